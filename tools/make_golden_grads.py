#!/usr/bin/env python3
"""Golden gradients for training through the blocks (prompt tuning, deep prompt tuning), computed with torch
autograd on the tiny models that tools/make_golden.py wrote.

Run from the repository root, after make_golden.py:

    python3 tools/make_golden_grads.py --models tests/data/models

Requirements: torch, transformers (>= 4.45; 5.x tested), safetensors.  Deterministic (seeded, single-threaded).

Block weights are frozen, as on a server: gradients flow to block inputs, to per-block prompts, to the client's
prompt embeddings and to a classification head, never to block weights.

Conventions (those of Petals, which the engine follows):
  * the stateless forward of a block: no KV cache, each sequence attends causally to its own tokens, positions
    0..T-1;
  * deep prompts: before block l runs, prompts[l] (shape [B, P, H]) is added to hidden[:, :P];
  * ptune: trainable prompt embeddings [P, H] are prepended to the token embeddings of every sequence
    (positions 0..P+T-1); deep_ptune adds per-block prompts [L, P, H] shared by the batch (block 0 included);
    after the last block the first P positions are dropped, then the final norm and the head run;
  * LM loss: mean cross-entropy of logits[:, t] against ids[:, t+1] over t < T-1 (Gemma 2's logits soft-capped, as
    its LM head computes them);
  * classification: the last token's hidden state, final norm, score [C, H] (no bias); mean cross-entropy.

Each model directory gets golden-grads.safetensors:

  block_input          f32 [2, T, H]       input of every block below (T = 12)
  block_grad_output    f32 [2, T, H]       gradient of each block's output (std 0.1)
  block_outputs        f32 [L, 2, T, H]    block l applied to block_input
  block_grad_inputs    f32 [L, 2, T, H]    gradient of block_input through block l alone
  span_prompts         f32 [L, 2, P, H]    deep prompts for the whole stack (P = 4)
  span_output          f32 [2, T, H]       blocks 0..L-1 over block_input with span_prompts
  span_grad_input      f32 [2, T, H]       gradient of block_input through the stack (grad = block_grad_output)
  span_grad_prompts    f32 [L, 2, P, H]    gradient of span_prompts
  train_ids            i64 [2, T]          token ids of the training examples
  ptune_prompts        f32 [P, H]          prompt embeddings
  ptune_deep_prompts   f32 [L, P, H]       per-block prompts (deep_ptune)
  ptune_loss           f32 [1]             LM loss with prompts and deep prompts
  ptune_grad_prompts   f32 [P, H]
  ptune_grad_deep_prompts f32 [L, P, H]
  cls_labels           i64 [2]             class of each example (2 classes)
  cls_score            f32 [2, H]          classification head weight
  cls_loss             f32 [1]             classification loss with ptune_prompts (no deep prompts)
  cls_grad_score       f32 [2, H]
  cls_grad_prompts     f32 [P, H]
  adam_lr              f32 [1]             learning rate of the run below
  adam_losses          f32 [5]             deep_ptune LM loss before each of 5 torch.optim.Adam steps on
                                           (ptune_prompts, ptune_deep_prompts), default betas and eps
  adam_prompts         f32 [P, H]          prompts after the 5 steps
  adam_deep_prompts    f32 [L, P, H]       deep prompts after the 5 steps
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

transformers.utils.logging.set_verbosity_error()

MODELS = ["llama", "mistral", "qwen2", "llama3-rope", "qwen2-yarn", "phi3-longrope", "llama-bias", "mistral-window", "qwen2-window", "qwen3", "mixtral", "phi3",
          "bloom", "falcon", "falcon-new", "falcon-sequential", "falcon2", "gemma2", "gemma2-options"]
T = 12
P = 4
SEED = 777
ADAM_LR = 1e-2
ADAM_STEPS = 5
# Output gradients are drawn at the scale a mean loss produces (not 1 per element), so that input gradients stay
# in a range where a 1e-4 absolute comparison in fp32 is meaningful.
GRAD_STD = 0.1
ADAM_FP64_TOL = 2e-5  # the fp32 Adam steps within this of fp64 ones, else the comparison is one of rounding


def causal_mask(t: int, window: int | None = None) -> torch.Tensor:
    """Additive mask [1, 1, t, t] for eager attention: 0 where query i sees key j (j <= i, and i - j < window with
    a sliding window), the dtype's minimum elsewhere."""
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    seen = j <= i
    if window:
        seen &= i - j < window
    return torch.where(seen, 0.0, torch.finfo(torch.float32).min)[None, None]


def layer_window(model, index: int) -> int | None:
    """The sliding window of block `index` as the model's class configures it (None: whole history)."""
    cfg = model.config
    types = getattr(cfg, "layer_types", None)
    if types is not None and getattr(cfg, "model_type", "") != "mistral":
        return cfg.sliding_window if types[index] == "sliding_attention" else None
    return getattr(cfg, "sliding_window", None)


def is_bloom(model) -> bool:
    return model.config.model_type == "bloom"


def is_falcon(model) -> bool:
    return model.config.model_type == "falcon"


def inner(model):
    return model.transformer if is_bloom(model) or is_falcon(model) else model.model


def blocks(model):
    return inner(model).h if is_bloom(model) or is_falcon(model) else model.model.layers


def embed(model, ids):
    """What the first block takes: BLOOM's embeddings pass their LayerNorm (Gemma 2's embed_tokens scales them)."""
    if is_bloom(model):
        return model.transformer.word_embeddings_layernorm(model.transformer.word_embeddings(ids))
    if is_falcon(model):
        return model.transformer.word_embeddings(ids)
    return model.model.embed_tokens(ids)


def final_norm(model, h):
    return model.transformer.ln_f(h) if is_bloom(model) or is_falcon(model) else model.model.norm(h)


def run_block(model, layer, hidden: torch.Tensor) -> torch.Tensor:
    t = hidden.shape[1]
    if is_bloom(model):  # ALiBi over the sequence's own positions, causal mask
        ones = torch.ones(hidden.shape[0], t, dtype=torch.int64)
        alibi = model.transformer.build_alibi_tensor(ones, model.config.n_head, dtype=hidden.dtype)
        out = layer(hidden, alibi=alibi, attention_mask=causal_mask(t))
        return out[0] if isinstance(out, (tuple, list)) else out
    pos = torch.arange(t)[None]
    if is_falcon(model):  # RoPE, causal mask, no window
        pe = model.transformer.rotary_emb(hidden, position_ids=pos)
        out = layer(hidden, attention_mask=causal_mask(t), position_ids=pos, position_embeddings=pe)
        return out[0] if isinstance(out, (tuple, list)) else out
    pe = model.model.rotary_emb(hidden, position_ids=pos)
    mask = causal_mask(t, layer_window(model, layer.self_attn.layer_idx))
    out = layer(hidden, attention_mask=mask, position_ids=pos, position_embeddings=pe)
    return out[0] if isinstance(out, (tuple, list)) else out


def run_stack(model, hidden: torch.Tensor, prompts: torch.Tensor | None) -> torch.Tensor:
    """Every block in order; prompts [L, B, P, H] are added to the first P positions before each block."""
    for i, layer in enumerate(blocks(model)):
        if prompts is not None:
            p = prompts.shape[2]
            hidden = torch.cat([hidden[:, :p] + prompts[i], hidden[:, p:]], dim=1)
        hidden = run_block(model, layer, hidden)
    return hidden


def client_hidden(model, ids, prompts, deep):
    """ptune / deep_ptune: prompts prepended, deep prompts per block, prompt positions dropped at the end."""
    b = ids.shape[0]
    emb = embed(model, ids)
    x = torch.cat([prompts[None].expand(b, -1, -1), emb], dim=1)
    deep_b = None if deep is None else deep[:, None].expand(-1, b, -1, -1)
    h = run_stack(model, x, deep_b)
    return final_norm(model, h[:, prompts.shape[0]:])


def lm_loss(model, ids, prompts, deep):
    logits = model.lm_head(client_hidden(model, ids, prompts, deep))
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap is not None:  # Gemma 2's LM head caps its logits (the classifier below has no cap)
        logits = torch.tanh(logits / cap) * cap
    v = logits.shape[-1]
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, v), ids[:, 1:].reshape(-1))


def cls_loss(model, ids, prompts, score, labels):
    h = client_hidden(model, ids, prompts, None)[:, -1]
    return torch.nn.functional.cross_entropy(h @ score.T, labels)


def adam_in_fp64(model_dir: Path, ids, prompts, deep) -> tuple[torch.Tensor, torch.Tensor]:
    """ADAM_STEPS of lm_loss in float64 from the same start: the reference the fp32 steps are measured against."""
    # (Experts as plain loops: grouped_mm has no float64.)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64, experts_implementation="eager")
    model.set_attn_implementation("eager")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    # (causal_mask's fp32 minimum, promoted, still masks fp64 scores.)
    pa = prompts.double().clone().requires_grad_(True)
    da = deep.double().clone().requires_grad_(True)
    opt = torch.optim.Adam([pa, da], lr=ADAM_LR)
    for _ in range(ADAM_STEPS):
        opt.zero_grad()
        lm_loss(model, ids, pa, da).backward()
        opt.step()
    return pa.detach(), da.detach()


def golden_for(model_dir: Path) -> dict[str, torch.Tensor]:
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.set_attn_implementation("eager")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    cfg = model.config
    h, layers = cfg.hidden_size, cfg.num_hidden_layers
    gen = torch.Generator().manual_seed(SEED)
    rnd = lambda *shape, std=1.0: std * torch.randn(*shape, generator=gen, dtype=torch.float32)

    # The layer loop above must be the model's own forward.
    ids0 = torch.randint(3, cfg.vocab_size, (2, T), generator=gen)
    with torch.no_grad():
        ref = inner(model)(ids0, attention_mask=torch.ones_like(ids0), use_cache=False).last_hidden_state
        mine = final_norm(model, run_stack(model, embed(model, ids0), None))
    assert (ref - mine).abs().max() < 1e-5, f"layer loop differs from the model's forward: {(ref - mine).abs().max()}"

    out: dict[str, torch.Tensor] = {}
    x = rnd(2, T, h)
    g = rnd(2, T, h, std=GRAD_STD)
    out["block_input"], out["block_grad_output"] = x, g
    outs, grads = [], []
    for layer in blocks(model):
        xi = x.clone().requires_grad_(True)
        y = run_block(model, layer, xi)
        y.backward(g)
        outs.append(y.detach())
        grads.append(xi.grad.detach())
    out["block_outputs"], out["block_grad_inputs"] = torch.stack(outs), torch.stack(grads)

    prompts = rnd(layers, 2, P, h, std=0.5).requires_grad_(True)
    xi = x.clone().requires_grad_(True)
    y = run_stack(model, xi, prompts)
    y.backward(g)
    out["span_prompts"] = prompts.detach()
    out["span_output"], out["span_grad_input"], out["span_grad_prompts"] = y.detach(), xi.grad, prompts.grad

    ids = torch.randint(3, cfg.vocab_size, (2, T), generator=gen)
    pr = rnd(P, h, std=0.5).requires_grad_(True)
    deep = rnd(layers, P, h, std=0.1).requires_grad_(True)
    loss = lm_loss(model, ids, pr, deep)
    loss.backward()
    out["train_ids"] = ids
    out["ptune_prompts"], out["ptune_deep_prompts"] = pr.detach().clone(), deep.detach().clone()
    out["ptune_loss"] = loss.detach().reshape(1)
    out["ptune_grad_prompts"], out["ptune_grad_deep_prompts"] = pr.grad.clone(), deep.grad.clone()

    labels = torch.tensor([0, 1])
    score = rnd(2, h, std=0.2).requires_grad_(True)
    pr2 = pr.detach().clone().requires_grad_(True)
    loss = cls_loss(model, ids, pr2, score, labels)
    loss.backward()
    out["cls_labels"], out["cls_score"] = labels, score.detach()
    out["cls_loss"], out["cls_grad_score"], out["cls_grad_prompts"] = loss.detach().reshape(1), score.grad, pr2.grad

    pa = out["ptune_prompts"].clone().requires_grad_(True)
    da = out["ptune_deep_prompts"].clone().requires_grad_(True)
    opt = torch.optim.Adam([pa, da], lr=ADAM_LR)
    losses = []
    for _ in range(ADAM_STEPS):
        opt.zero_grad()
        loss = lm_loss(model, ids, pa, da)
        loss.backward()
        losses.append(loss.item())
        opt.step()
    # An element whose gradient stays near 0 makes Adam's step (m / sqrt(v)) a ratio of rounding errors: then no
    # fp32 engine can follow torch's fp32 steps within the tolerance. The same steps in fp64 tell.
    exact = adam_in_fp64(model_dir, ids, out["ptune_prompts"], out["ptune_deep_prompts"])
    cond = max(float((a - b.double()).abs().max()) for a, b in zip(exact, (pa.detach(), da.detach())))
    assert cond < ADAM_FP64_TOL, (
        f"{model_dir.name}: Adam's fp32 steps differ from fp64 by {cond:.1e} (ill-conditioned: pick another seed "
        f"for this model in make_golden.py)")
    out["adam_lr"] = torch.tensor([ADAM_LR])
    out["adam_losses"] = torch.tensor(losses)
    out["adam_prompts"], out["adam_deep_prompts"] = pa.detach(), da.detach()
    return {k: v.detach().contiguous() for k, v in out.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, default=Path("tests/data/models"))
    ap.add_argument("--only", nargs="*", choices=MODELS, help="only these models")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    for name in args.only or MODELS:
        tensors = golden_for(args.models / name)
        save_file(tensors, str(args.models / name / "golden-grads.safetensors"), metadata={"format": "pt"})
        print(f"{name}: span |grad_input| max {tensors['span_grad_input'].abs().max():.3f}, "
              f"ptune loss {tensors['ptune_loss'].item():.4f}, adam losses "
              + " ".join(f"{v:.4f}" for v in tensors["adam_losses"].tolist()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
