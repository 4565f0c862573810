"""The OpenAI-compatible API through the official `openai` Python package, streaming and not, against
`corolla run`. Exits 77 (skipped) when the package is missing: tools/setup.sh installs it into .venv.

    python tests/api/test_openai_client.py build/bin/corolla
"""
import sys
import unittest

from corolla_run import CorollaRun, skip

try:
    import openai
except ImportError:
    skip("the openai Python package is missing (bash tools/setup.sh installs it into .venv)")

BINARY = sys.argv.pop(1) if len(sys.argv) > 1 else "build/bin/corolla"
RUN = None


def setUpModule():
    global RUN
    RUN = CorollaRun(BINARY).__enter__()


def tearDownModule():
    RUN.__exit__(None, None, None)


class OpenAIClient(unittest.TestCase):
    def setUp(self):
        self.client = openai.OpenAI(base_url=RUN.base + "/v1", api_key="unused", max_retries=0, timeout=120)
        self.question = [{"role": "user", "content": "Name the capital of France."}]

    def test_models(self):
        models = self.client.models.list()
        self.assertEqual([m.id for m in models.data], [RUN.model])
        self.assertEqual(self.client.models.retrieve(RUN.model).id, RUN.model)

    def test_chat_completion(self):
        r = self.client.chat.completions.create(model=RUN.model, messages=self.question, max_tokens=24, temperature=0)
        self.assertEqual(r.object, "chat.completion")
        choice = r.choices[0]
        self.assertEqual(choice.message.role, "assistant")
        self.assertIn(choice.finish_reason, ("stop", "length"))
        self.assertGreater(r.usage.prompt_tokens, 5)
        self.assertGreaterEqual(r.usage.completion_tokens, 1)
        self.assertLessEqual(r.usage.completion_tokens, 24)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)
        if RUN.demo:
            self.assertIn("Paris", choice.message.content)

    def test_chat_completion_streamed_equals_whole(self):
        whole = self.client.chat.completions.create(model=RUN.model, messages=self.question, max_tokens=24,
                                                    temperature=0)
        stream = self.client.chat.completions.create(model=RUN.model, messages=self.question, max_tokens=24,
                                                     temperature=0, stream=True,
                                                     stream_options={"include_usage": True})
        pieces, finish, usage = [], None, None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            if not chunk.choices:
                continue
            if chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
            if chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        self.assertGreater(len(pieces), 1)  # streamed in pieces
        self.assertEqual("".join(pieces), whole.choices[0].message.content)
        self.assertEqual(finish, whole.choices[0].finish_reason)
        self.assertEqual(usage.completion_tokens, whole.usage.completion_tokens)

    def test_completion_with_stop_sequence(self):
        free = self.client.completions.create(model=RUN.model, prompt="The capital of France is", max_tokens=16,
                                              temperature=0)
        text = free.choices[0].text
        self.assertEqual(free.choices[0].finish_reason, "length")
        stop = next((text[i] for i in range(3, len(text)) if text[i].isascii() and not text[i].isspace()), None)
        self.assertIsNotNone(stop, text)
        cut = self.client.completions.create(model=RUN.model, prompt="The capital of France is", max_tokens=16,
                                             temperature=0, stop=[stop])
        self.assertEqual(cut.choices[0].text, text[:text.index(stop)])
        self.assertEqual(cut.choices[0].finish_reason, "stop")
        self.assertLess(cut.usage.completion_tokens, free.usage.completion_tokens)
        streamed = "".join(c.choices[0].text for c in self.client.completions.create(
            model=RUN.model, prompt="The capital of France is", max_tokens=16, temperature=0, stop=[stop],
            stream=True) if c.choices)
        self.assertEqual(streamed, cut.choices[0].text)

    def test_seed_repeats_a_sampled_answer(self):
        kw = dict(model=RUN.model, messages=self.question, max_tokens=16, temperature=1.0, top_p=0.95, seed=1234)
        a = self.client.chat.completions.create(**kw).choices[0].message.content
        b = self.client.chat.completions.create(**kw).choices[0].message.content
        self.assertEqual(a, b)

    def test_errors(self):
        with self.assertRaises(openai.NotFoundError) as e:
            self.client.chat.completions.create(model="no-such-model", messages=self.question)
        self.assertIn("unknown model", str(e.exception))
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(model=RUN.model, messages=self.question, max_tokens=10 ** 6)
        self.assertIn("max_tokens", str(e.exception))
        with self.assertRaises(openai.BadRequestError):
            self.client.chat.completions.create(model=RUN.model, messages=[])
        # Still serving.
        self.assertEqual(self.client.models.list().data[0].id, RUN.model)


if __name__ == "__main__":
    unittest.main(verbosity=2)
