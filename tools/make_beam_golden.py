#!/usr/bin/env python3
"""Reference beam searches for the golden models: transformers' generate(num_beams=...) (do_sample=False) on
tests/data/models/<model> from its golden prompt, for several beam counts, length penalties, early_stopping
settings and end tokens. Writes tests/data/models/<model>/beam_search.json, which
tests/conformance/test_beam_search.cpp compares Corolla's beam search against.

Run from the repository root (after tools/make_golden.py made the models):

    python3 tools/make_beam_golden.py [--models llama mistral-window]

Requirements: torch, transformers, safetensors, numpy. Deterministic: no sampling, one thread.
"""
import argparse
import json
import os

import torch
from safetensors.numpy import load_file
from transformers import AutoModelForCausalLM

# (num_beams, max_new_tokens, length_penalty, early_stopping, eos): eos None = no end token; otherwise token ids
# that end a hypothesis (chosen among tokens the searches produce, so that finished hypotheses compete).
CASES = [
    (4, 12, 1.0, False, None),
    (3, 10, 2.0, False, None),
    (2, 8, 1.0, False, None),
    (4, 12, 1.0, False, "first"),
    (4, 12, 1.0, True, "first"),
    (4, 12, 1.0, "never", "first"),
    (4, 12, 0.5, "never", "second"),
    (5, 12, -1.0, False, "second"),
    (4, 12, 1.0, True, "both"),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=["llama", "mistral-window"])
    parser.add_argument("--dir", default="tests/data/models")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name in args.models:
        path = os.path.join(args.dir, name)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        prompt = torch.tensor(load_file(os.path.join(path, "golden.safetensors"))["input_ids"]).long()
        plain = None
        out = []
        with torch.no_grad():
            for beams, new, penalty, early, eos in CASES:
                if eos is None:
                    eos_ids = None
                else:
                    # End tokens taken from the plain 4-beam search's best hypothesis.
                    if plain is None:
                        plain = out[0]["tokens"]
                    eos_ids = {"first": [plain[1]], "second": [plain[4]], "both": [plain[2], plain[5]]}[eos]
                seq = model.generate(prompt, num_beams=beams, do_sample=False, max_new_tokens=new,
                                     length_penalty=penalty, early_stopping=early,
                                     eos_token_id=eos_ids, pad_token_id=0)
                tokens = seq[0, prompt.shape[1]:].tolist()
                if eos_ids:  # what follows the first end token is padding
                    for i, t in enumerate(tokens):
                        if t in eos_ids:
                            tokens = tokens[: i + 1]
                            break
                out.append({"num_beams": beams, "max_new_tokens": new, "length_penalty": penalty,
                            "early_stopping": early if isinstance(early, str) else ("true" if early else "false"),
                            "eos": eos_ids or [], "tokens": tokens})
        with open(os.path.join(path, "beam_search.json"), "w") as f:
            json.dump({"prompt": prompt[0].tolist(), "cases": out}, f, indent=1)
            f.write("\n")
        print(name, [len(c["tokens"]) for c in out])


if __name__ == "__main__":
    main()
