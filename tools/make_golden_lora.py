#!/usr/bin/env python3
"""LoRA adapters for the tiny golden models, made and saved with Hugging Face PEFT, and golden outputs of the
models with each adapter applied.

Run from the repository root, after make_golden.py:

    python3 tools/make_golden_lora.py --models tests/data/models

Requirements: torch, transformers (>= 4.45; 5.x tested), peft (0.21 tested), safetensors.  Deterministic.

PEFT initialises lora_B to zero (an adapter that changes nothing); here every lora_A and lora_B is drawn from a
seeded normal distribution so that the adapters change the outputs measurably. Seeds are tried in turn until the
greedy path has a top-1/top-2 logit gap above 2e-3 at every step (so an engine accurate to ~1e-4 picks the same
tokens).

For each model in MODELS and each adapter in ADAPTERS, <model>/adapters/<adapter>/ holds what
`PeftModel.save_pretrained` writes (adapter_config.json, adapter_model.safetensors) plus golden.safetensors:

  input_ids           i64 [1, 12]        the prompt of the model's golden.safetensors
  logits_full         f32 [1, 12, V]     one forward with the adapter
  greedy_ids          i64 [16]           16 greedy tokens after the prompt with the adapter
  block_input         f32 [2, 12, H]     input of the stack below
  block_grad_output   f32 [2, 12, H]     gradient of the stack's output (std 0.1)
  span_prompts        f32 [L, 2, 4, H]   deep prompts
  span_output         f32 [2, 12, H]     every block with the adapter and the deep prompts
  span_grad_input     f32 [2, 12, H]     autograd gradient of block_input (adapter and base weights frozen)
  span_grad_prompts   f32 [L, 2, 4, H]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import transformers
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_golden_grads import run_stack  # noqa: E402  (the same layer loop and mask as the gradient goldens)

transformers.utils.logging.set_verbosity_error()

MODELS = ["llama", "qwen2"]
# name -> LoraConfig arguments
ADAPTERS = {
    "lora-attn": dict(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
    "lora-mlp": dict(r=2, lora_alpha=3, use_rslora=True, target_modules=["gate_proj", "up_proj", "down_proj", "q_proj"]),
}
SEED = 555
LORA_STD = 0.2
NEW_TOKENS = 16
MIN_GAP = 2e-3
MAX_SEED_TRIES = 50


@torch.no_grad()
def randomize_lora(model, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if "lora_" in name:
            p.copy_(LORA_STD * torch.randn(p.shape, generator=gen))


def golden_for(model_dir: Path, name: str, spec: dict, seed: int) -> bool:
    """Writes the adapter and its golden file; False (nothing kept) when the greedy path is too close to a tie."""
    base = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    base.set_attn_implementation("eager")
    model = get_peft_model(base, LoraConfig(lora_dropout=0.0, bias="none", **spec))
    randomize_lora(model, seed)
    model.eval()
    out_dir = model_dir / "adapters" / name
    model.save_pretrained(out_dir)
    # Keep the files small and stable: no README, no absolute paths.
    (out_dir / "README.md").unlink(missing_ok=True)
    cfg_path = out_dir / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = model_dir.name
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")

    ids = load_file(str(model_dir / "golden.safetensors"))["input_ids"]
    inner = model.base_model.model  # the transformers model with LoRA layers in place
    golden: dict[str, torch.Tensor] = {"input_ids": ids}
    with torch.no_grad():
        golden["logits_full"] = inner(ids, attention_mask=torch.ones_like(ids), use_cache=False).logits.float()
        seq = ids.clone()
        for _ in range(NEW_TOKENS):
            last = inner(seq, attention_mask=torch.ones_like(seq), use_cache=False).logits[0, -1]
            top = torch.topk(last, 2).values
            if top[0] - top[1] <= MIN_GAP:
                return False
            seq = torch.cat([seq, last.argmax().view(1, 1)], dim=1)
        golden["greedy_ids"] = seq[0, ids.shape[1]:].clone()

    for p in model.parameters():
        p.requires_grad_(False)
    h, layers = inner.config.hidden_size, inner.config.num_hidden_layers
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(2, 12, h, generator=gen)
    g = 0.1 * torch.randn(2, 12, h, generator=gen)
    prompts = (0.5 * torch.randn(layers, 2, 4, h, generator=gen)).requires_grad_(True)
    xi = x.clone().requires_grad_(True)
    y = run_stack(inner, xi, prompts)
    y.backward(g)
    golden.update(block_input=x, block_grad_output=g, span_prompts=prompts.detach(), span_output=y.detach(),
                  span_grad_input=xi.grad, span_grad_prompts=prompts.grad)
    save_file({k: v.detach().contiguous() for k, v in golden.items()}, str(out_dir / "golden.safetensors"),
              metadata={"format": "pt"})
    for f in out_dir.iterdir():
        f.chmod(0o644)
    print(f"{model_dir.name}/{name}: seed {seed}, greedy {golden['greedy_ids'].tolist()}", flush=True)
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, default=Path("tests/data/models"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    for m, model in enumerate(MODELS):
        for a, (name, spec) in enumerate(ADAPTERS.items()):
            for attempt in range(MAX_SEED_TRIES):
                if golden_for(args.models / model, name, spec, SEED + 10 * m + a + 1000 * attempt):
                    break
            else:
                raise SystemExit(f"{model}/{name}: no seed gave a clear greedy path")
    return 0


if __name__ == "__main__":
    sys.exit(main())
