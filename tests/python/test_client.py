"""The Python client (apps/python/corolla) against a swarm of real processes on 127.0.0.1: a DHT node and two
servers of a 4-block model, each started and stopped by PID. Greedy generation gives the ids `corolla generate`
gives through the same swarm; sessions continue conversations as Petals' do; the tokenizer round-trips; the remote
forward and backward agree with each other (a finite-difference check); bad input gets Python exceptions.

    COROLLA_BIN=build/bin/corolla PYTHONPATH=build/python python3 -m pytest tests/python/test_client.py
"""
import os
import re
import shutil
import subprocess
import tempfile
import time

import numpy as np
import pytest

import corolla

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("COROLLA_BIN", os.path.join(ROOT, "build/bin/corolla"))
MODELS = os.path.join(ROOT, "tests/data/models")
TOKENIZER = os.path.join(ROOT, "tests/data/tokenizers/bpe-tiny256")


def wait_for(path, pattern, proc, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited: %s" % (proc.args, open(path).read()))
        m = re.search(pattern, open(path).read())
        if m:
            return m
        time.sleep(0.1)
    raise RuntimeError("timed out waiting for %r in %s" % (pattern, path))


@pytest.fixture(scope="module")
def swarm():
    work = tempfile.mkdtemp(prefix="corolla-python-")
    model = os.path.join(work, "tiny-llama")  # the sharded test model with a tokenizer of its vocabulary
    shutil.copytree(os.path.join(MODELS, "llama-sharded"), model)
    for f in os.listdir(TOKENIZER):
        shutil.copy(os.path.join(TOKENIZER, f), model)
    procs = []

    def start(name, *args):
        log = os.path.join(work, name + ".log")
        with open(log, "w") as out:
            procs.append(subprocess.Popen([BIN, *args], stdout=out, stderr=subprocess.STDOUT))
        return log, procs[-1]

    try:
        log, p = start("dht", "dht", "--port", "0")
        dht = wait_for(log, r"dht node at (\S+)", p).group(1)
        for span in ("0:2", "2:4"):
            log, p = start("serve-" + span, "serve", model, "--block_indices", span, "--port", "0",
                           "--initial_peers", dht, "--data_dir", os.path.join(work, "data-" + span.replace(":", "-")))
            wait_for(log, r"serving blocks", p)
        yield {"model": model, "peers": [dht]}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def model(swarm):
    return corolla.AutoDistributedModelForCausalLM.from_pretrained(swarm["model"], initial_peers=swarm["peers"])


def cli_generate(swarm, ids, n):
    out = subprocess.run([BIN, "generate", "--model", swarm["model"], "--initial_peers", swarm["peers"][0],
                          "--prompt-ids", ",".join(map(str, ids)), "--max-new-tokens", str(n), "--ignore-eos"],
                         capture_output=True, text=True, check=True, timeout=120)
    return [int(x) for x in out.stdout.split()]


def test_greedy_generation_matches_the_command_line(swarm, model):
    prompt = [1, 72, 101, 108, 108, 111]
    expected = cli_generate(swarm, prompt, 8)
    assert len(expected) == 8
    out = model.generate(np.array([prompt]), max_new_tokens=8, ignore_eos=True)
    assert out.dtype == np.int64
    assert out.tolist() == [prompt + expected]
    # A batch of prompts of different lengths: each row what it gives alone, shorter rows padded on the right.
    second = [1, 50, 60]
    both = model.generate([prompt, second], max_new_tokens=8, ignore_eos=True)
    assert both.shape == (2, len(prompt) + 8)
    assert both[0].tolist() == prompt + expected
    assert both[1].tolist()[:len(second) + 8] == second + cli_generate(swarm, second, 8)
    assert set(both[1].tolist()[len(second) + 8:]) == {model.config.pad_token_id}


def test_a_session_continues_as_one_generation(model):
    prompt = [1, 20, 30, 40]
    whole = model.generate([prompt], max_new_tokens=6, ignore_eos=True)[0].tolist()
    with model.inference_session(max_length=32) as session:
        first = model.generate([prompt], max_new_tokens=3, session=session, ignore_eos=True)[0].tolist()
        rest = model.generate(None, max_new_tokens=3, session=session, ignore_eos=True)[0].tolist()
        assert first + rest == whole
        assert session.position == len(prompt) + 5  # the last id generated is not fed yet
    with pytest.raises(RuntimeError, match="the session is closed"):
        model.generate([prompt], max_new_tokens=1, session=session)


def test_sampling_is_seeded_and_checked(model):
    a = model.generate([[1, 2, 3]], max_new_tokens=10, do_sample=True, temperature=0.9, top_k=40, top_p=0.9,
                       repetition_penalty=1.1, seed=7, ignore_eos=True)
    b = model.generate([[1, 2, 3]], max_new_tokens=10, do_sample=True, temperature=0.9, top_k=40, top_p=0.9,
                       repetition_penalty=1.1, seed=7, ignore_eos=True)
    assert a.tolist() == b.tolist()
    with pytest.raises(ValueError, match="temperature"):
        model.generate([[1, 2, 3]], max_new_tokens=2, do_sample=True, temperature=-1.0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate([[1, 2, 3]], max_new_tokens=0)
    with model.inference_session(max_length=5) as s:
        with pytest.raises(RuntimeError, match="max_length_exceeded"):
            model.generate([1, 2, 3], max_new_tokens=6, session=s)


def test_the_tokenizer_round_trips(swarm, model):
    tok = corolla.AutoTokenizer.from_pretrained(swarm["model"], prefer_transformers=False)
    ids = tok("Hello world", return_tensors="np")["input_ids"]
    assert ids.shape[0] == 1
    assert tok.decode(ids[0], skip_special_tokens=True) == "Hello world"
    out = model.generate(ids, max_new_tokens=4, ignore_eos=True)
    assert tok.decode(out[0], skip_special_tokens=True).startswith("Hello world")


def test_remote_forward_and_backward_agree(model):
    rng = np.random.default_rng(0)
    hidden = model.embed([[1, 5, 9, 13]]).astype(np.float64)
    weights = rng.standard_normal((1, 4, model.config.hidden_size))
    direction = rng.standard_normal(hidden.shape)

    def f(h):
        out, _ = model.remote_forward(h.astype(np.float32))
        return float((out.astype(np.float64) * weights).sum())

    out, pass_id = model.remote_forward(hidden.astype(np.float32))
    assert out.shape == hidden.shape
    grad = model.remote_backward(pass_id, weights.astype(np.float32)).astype(np.float64)
    eps = 1e-4  # the hidden states are about 0.13 in size; a larger step leaves the linear regime
    numeric = (f(hidden + eps * direction) - f(hidden - eps * direction)) / (2 * eps)
    analytic = float((grad * direction).sum())
    assert abs(numeric - analytic) <= 2e-2 * max(1.0, abs(analytic)), (numeric, analytic)
    logits = model.logits(out)
    assert logits.shape == (1, 4, model.config.vocab_size)


def test_torch_autograd_through_the_swarm(model):
    torch = pytest.importorskip("torch")
    hidden = torch.tensor(model.embed([[1, 5, 9]]), requires_grad=True)
    out = model.remote_blocks()(hidden)
    out.sum().backward()
    _, pass_id = model.remote_forward(hidden.detach().numpy())
    expected = model.remote_backward(pass_id, np.ones(tuple(out.shape), dtype=np.float32))
    assert np.allclose(hidden.grad.numpy(), expected, atol=1e-5)


def test_errors_say_what_happened(swarm):
    with pytest.raises(ValueError, match="initial_peers is empty"):
        corolla.AutoDistributedModelForCausalLM.from_pretrained(swarm["model"], initial_peers=[])
    with pytest.raises(ValueError, match="initial_peers"):
        corolla.AutoDistributedModelForCausalLM.from_pretrained(swarm["model"], initial_peers=["not an address"])
    unreachable = corolla.AutoDistributedModelForCausalLM.from_pretrained(
        swarm["model"], initial_peers=["/ip4/127.0.0.1/tcp/1/p2p/QmPeer"], request_timeout=5)
    with pytest.raises(RuntimeError, match="cannot connect to 127.0.0.1:1"):
        unreachable.generate([[1, 2]], max_new_tokens=1)
