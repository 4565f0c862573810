#!/usr/bin/env python3
"""Build tiny random-weight Hugging Face models, GGUF conversions of them, and
golden reference outputs that the Corolla C++ engine tests compare against.

Run from the repository root:

    python3 tools/make_golden.py --out tests/data/models

Requirements: torch, transformers (>= 4.45; 5.x tested), safetensors, gguf,
numpy.  No network access is needed (nothing is loaded from the model hub).

The script is deterministic: weights and prompts come from seeded torch
generators, and torch runs single-threaded so that float reductions happen in
a fixed order.  For every model family a base seed is tried first; if the
model does not satisfy the acceptance checks below, the next seed is tried.

Acceptance checks (per model family, over every variant that has a golden
file: fp32, bf16-rounded, and each dequantized GGUF type):
  * along the 32-step greedy path the gap between the top-1 and the top-2
    logit is > 2e-3 at every step, so an engine accurate to ~1e-4 reproduces
    the greedy tokens exactly;
  * the greedy path never emits the EOS token (id 2), so an engine that stops
    at EOS still produces all 32 tokens;
  * logits computed one token at a time with the KV cache match the full
    forward within 1e-5.

Output layout (one directory per model under --out):

  llama/          LlamaForCausalLM, f32 safetensors, GGUF f32/f16/q8_0/q4_0/q4_1, and q4_K_M/q5_K_M as
                  llama-quantize writes them for rows of 64 values (Q5_0 / Q5_1 with Q8_0)
  llama-sharded/  same weights as llama, saved in several safetensors shards
  llama-kquant/   LlamaForCausalLM with rows of 256 values (hidden 256, intermediate 256, 2 layers), GGUF
                  q2_K/q3_K/q4_K/q5_K/q6_K/iq4_nl (every 2-D weight of that type) and q4_K_M
                  (llama-quantize's Q4_K_M mix: output, and attn_v and ffn_down of the layers use_more_bits
                  picks, in Q6_K); see K_MIXES
  llama-bf16/     same weights as llama rounded to bfloat16 (BF16 safetensors)
  mistral/        MistralForCausalLM (no sliding window)
  qwen2/          Qwen2ForCausalLM (q/k/v biases, tied embeddings), GGUF f32/q8_0
  llama3-rope/    LlamaForCausalLM with head_dim 32 and llama3 rope scaling
  qwen2-yarn/     Qwen2ForCausalLM with YaRN rope scaling (factor 4 over a 64-token original context)
  llama-bias/     LlamaForCausalLM with attention_bias and mlp_bias (biases on all seven
                  projections), GGUF f32/q8_0
  mistral-window/ MistralForCausalLM with a 5-token sliding window (every layer)
  qwen2-window/   Qwen2ForCausalLM with a 4-token sliding window on layers 2 and 3
                  (use_sliding_window, max_window_layers 2)
  qwen3/          Qwen3ForCausalLM (q/k RMSNorm per head, head_dim 32 so that heads x head_dim
                  is twice hidden_size, tied embeddings), GGUF f32/q8_0
  mixtral/        MixtralForCausalLM (4 experts, top-2), GGUF f32/q8_0 (arch "llama" with
                  expert_count, experts stacked as llama.cpp writes them); the seed is accepted
                  only if every token's 2nd and 3rd router probabilities differ by more than
                  MIN_ROUTER_GAP, so an engine accurate to ~1e-5 routes identically
  phi3/           Phi3ForCausalLM (fused qkv_proj and gate_up_proj, a 7-token sliding window)
  phi3-longrope/  Phi3ForCausalLM with Phi-4-mini's RoPE: over 3/4 of each head (partial_rotary_factor
                  0.75), longrope over a 64-token original context (short factors for the prompts and
                  the greedy path, long ones at positions 100..111)
  bloom/          BloomForCausalLM (ALiBi, LayerNorms with biases, the embeddings' LayerNorm, fused
                  query_key_value interleaved per head, tanh GELU, tied embeddings); it takes no
                  position ids, so its positions_* logits are the plain ones
  falcon/         FalconForCausalLM in Falcon-7B's layout: multi-query attention (one KV head),
                  attention and MLP in parallel from one shared input_layernorm, no biases, RoPE,
                  exact (erf) GELU, LayerNorms with biases, tied embeddings; GGUF f32/q8_0
  falcon-new/     FalconForCausalLM in Falcon-40B/180B's layout (new_decoder_architecture): 2 KV
                  heads for 4 query heads, query_key_value laid out per KV group, ln_attn and
                  ln_mlp, biases on every projection, ffn_hidden_size 96, untied LM head; GGUF
                  f32/q8_0
  falcon-sequential/  FalconForCausalLM with parallel_attn and multi_query false: attention, then
                  post_attention_layernorm and the MLP; query_key_value interleaved per head;
                  biases on every projection
  falcon2/        FalconForCausalLM in Falcon2-11B's layout: new_decoder_architecture with one
                  input_layernorm shared by attention and MLP (num_ln_in_parallel_attn 1), 2 KV heads
  gemma2/         Gemma2ForCausalLM: embeddings scaled by sqrt(hidden), RMSNorms of 1 + weight (the stored
                  weights are 0.1 * N(0, 1) offsets), post-attention and post-feedforward norms, GeGLU
                  (gelu_pytorch_tanh), a 5-token sliding window on layers 0 and 2 (full attention on 1
                  and 3), attention scores soft-capped at 2 and logits at 1.5 (both bend many values),
                  query_pre_attn_scalar = head_dim, tied embeddings; GGUF f32/q8_0 as llama.cpp's
                  Gemma2Model converter writes it
  gemma2-options/ Gemma2ForCausalLM with the keys the first leaves at Gemma's values: head_dim 32 (heads x
                  head_dim twice hidden_size), query_pre_attn_scalar 16 = hidden / heads (27B's rule), q/k/v/o
                  biases (attention_bias), no soft caps (null), the exact GELU, and layer_types naming a
                  4-token window on layers 1 and 2; no GGUF (llama.cpp's files cannot say any of these)

Each directory holds config.json, the safetensors weights and golden.safetensors:

  input_ids                  int64 [1, 12]      prompt (ids in 3..255)
  logits_full                f32   [1, 12, V]   one forward over the prompt
  logits_steps               f32   [1, 12, V]   prompt fed token by token with the KV cache
  greedy_ids                 int64 [32]         32 greedy tokens after the prompt
  greedy_logits              f32   [32, V]      logits that chose each greedy token
                                                (KV-cache decoding, as generate() saw them)
  batch_input_ids            int64 [2, 12]      row 0 = input_ids, row 1 = another prompt
  batch_logits               f32   [2, 12, V]   one batched forward of both rows
  positions_offset_logits    f32   [1, 12, V]   input_ids with position_ids 100..111
  positions_gap_ids          int64 [1, 12]      position_ids 0..5, 40..45
  positions_gap_logits       f32   [1, 12, V]   input_ids with positions_gap_ids
                                                (unlike a constant offset, a gap changes
                                                relative positions, so RoPE bugs show)
  hidden_states              f32   [L+1, 1, 12, H]  [0] = token embeddings, [i] = output of
                                                decoder block i-1 (before the final norm)

For every GGUF file model-<type>.gguf except f32 there is a golden-<type>.safetensors
with input_ids, logits_full, greedy_ids and greedy_logits computed in fp32 from
the weights as stored in that GGUF file (read back, dequantized with
gguf.quants.dequantize, Q/K un-permuted to the HF layout).  The f32 GGUF holds
exactly the HF weights, so golden.safetensors applies to it.

GGUF conventions follow llama.cpp's convert_hf_to_gguf.py (LlamaModel and
Qwen2Model): tensor names token_embd / blk.N.{attn_norm, attn_q, attn_k,
attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down} / output_norm /
output (absent when the embeddings are tied), q/k/v .bias for qwen2 and every
projection's .bias (attn_output, ffn_gate/up/down too) for llama-bias.  For arch
"llama" the Q and K weights are permuted from HF's rotate-half layout into
llama.cpp's interleaved-pair layout (see permute_qk).  Norms and other 1-D
tensors are always F32; every 2-D weight, token_embd included, gets the file's
type (like llama-quantize --pure for q4_0/q4_1; the K-quant mixes follow llama-quantize's choice per tensor, see
K_MIXES).  The K-quants pack super-blocks of 256 values, so they get their own model, llama-kquant, whose rows are
multiples of 256: for the 64-wide llama llama-quantize would not write K-quants at all (a row that is not whole
super-blocks falls back to Q5_0 / Q5_1 / Q8_0 for Q4_K / Q5_K / Q6_K), so a K-quant form of it would test none of
them.  The K-quant encoders are tools/kquants.py's (gguf-py has none).  Falcon follows FalconModel:
token_embd / blk.N.{attn_norm, attn_norm_2 (ln_mlp), attn_qkv, attn_output,
ffn_up, ffn_down} / output_norm / output, LayerNorm biases as .bias, keys
context_length 2048, tensor_data_layout "jploski" (query_key_value regrouped
as all q, all k, all v rows), feed_forward_length 4 x hidden, head_count_kv,
layer_norm_epsilon; rope.freq_base is added (the converter omits it).  BLOOM follows BloomModel: token_embd,
token_embd_norm, blk.N.{attn_norm, attn_qkv (regrouped all q, all k, all v), attn_output, ffn_norm, ffn_up,
ffn_down} with biases, output_norm and output (a copy of the embeddings), context_length seq_length or the hidden
size.  Phi-3 follows Phi3MiniModel: attn_qkv and ffn_up (gate_up) fused, rope.dimension_count, sliding_window,
rope.scaling.original_context_length, and for longrope the tensors rope_factors_long/short with
rope.scaling.attn_factor.  YaRN (qwen2-yarn) writes rope.scaling.type/factor/original_context_length as
TextModel.set_gguf_parameters does.

A summary of the checks is printed and also written to <out>/manifest.json.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

import gguf
import kquants  # tools/kquants.py: K-quant encoders
import transformers
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter, LlamaFileType
from safetensors.torch import save_file
from transformers import (
    BloomConfig,
    BloomForCausalLM,
    DynamicCache,
    FalconConfig,
    FalconForCausalLM,
    Gemma2Config,
    Gemma2ForCausalLM,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

try:
    transformers.utils.logging.disable_progress_bar()
except AttributeError:
    pass
transformers.utils.logging.set_verbosity_error()

PROMPT_LEN = 12
NEW_TOKENS = 32
MIN_GAP = 2e-3
STEPS_TOL = 1e-5
EOS_ID = 2
BOS_ID = 1
WEIGHT_STD = 0.15     # std of random matrix weights (HF default would be 0.02)
NORM_STD = 0.1        # RMSNorm weights are 1 + NORM_STD * N(0, 1)
BIAS_STD = 0.1        # biases are BIAS_STD * N(0, 1)
MAX_SEED_TRIES = 200
MIN_ROUTER_GAP = 1e-3  # mixture of experts: between the last chosen and the first passed-over probability
PROMPT_SEED = 4242    # prompts are the same for every model

COMMON = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    rms_norm_eps=1e-5,
    max_position_embeddings=512,
    bos_token_id=BOS_ID,
    eos_token_id=EOS_ID,
    pad_token_id=None,
    initializer_range=WEIGHT_STD,
)

# Falcon's own keys (no intermediate_size or rms_norm_eps: ffn_hidden_size defaults to 4 x hidden, every norm
# is a LayerNorm with layer_norm_epsilon).
FALCON = dict(
    vocab_size=256,
    hidden_size=64,
    num_hidden_layers=4,
    num_attention_heads=4,
    layer_norm_epsilon=1e-5,
    max_position_embeddings=512,
    alibi=False,
    activation="gelu",
    bos_token_id=BOS_ID,
    eos_token_id=EOS_ID,
    pad_token_id=None,
    initializer_range=WEIGHT_STD,
    tie_word_embeddings=True,
)

# name -> (config class, model class, config kwargs, base seed, gguf types)
SPECS = {
    "llama": (
        LlamaConfig, LlamaForCausalLM,
        dict(COMMON, rope_theta=10000.0, tie_word_embeddings=False),
        # q4_K_M / q5_K_M: what llama-quantize writes for rows of 64 values (Q5_0 / Q5_1 and Q8_0, see weight_qtype)
        1000, ["f32", "f16", "q8_0", "q4_0", "q4_1", "q4_K_M", "q5_K_M"],
    ),
    "mistral": (
        MistralConfig, MistralForCausalLM,
        dict(COMMON, rope_theta=10000.0, tie_word_embeddings=False, sliding_window=None, head_dim=16),
        2000, [],
    ),
    "llama-kquant": (
        LlamaConfig, LlamaForCausalLM,
        # weights half as wide as WEIGHT_STD: sums over 4x the values keep the 64-wide models' scale
        dict(COMMON, hidden_size=256, intermediate_size=256, num_hidden_layers=2, rope_theta=10000.0,
             tie_word_embeddings=False, initializer_range=WEIGHT_STD / 2),
        17000, ["q4_K", "q5_K", "q6_K", "q4_K_M", "q2_K", "q3_K", "iq4_nl"],
    ),
    "qwen2": (
        Qwen2Config, Qwen2ForCausalLM,
        dict(COMMON, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
             use_sliding_window=False, sliding_window=None),
        3000, ["f32", "q8_0"],
    ),
    "llama3-rope": (
        LlamaConfig, LlamaForCausalLM,
        dict(COMMON, hidden_size=128, intermediate_size=256, num_hidden_layers=2, head_dim=32,
             rope_theta=500000.0, tie_word_embeddings=True,
             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                           "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
        4000, [],
    ),
    "qwen2-yarn": (
        Qwen2Config, Qwen2ForCausalLM,
        dict(COMMON, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
             use_sliding_window=False, sliding_window=None,
             rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}),
        12000, ["f32"],
    ),
    "llama-bias": (
        LlamaConfig, LlamaForCausalLM,
        dict(COMMON, rope_theta=10000.0, tie_word_embeddings=False, attention_bias=True, mlp_bias=True),
        5000, ["f32", "q8_0"],
    ),
    "mistral-window": (
        MistralConfig, MistralForCausalLM,
        dict(COMMON, rope_theta=10000.0, tie_word_embeddings=False, sliding_window=5, head_dim=16),
        6000, [],
    ),
    "qwen2-window": (
        Qwen2Config, Qwen2ForCausalLM,
        dict(COMMON, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
             use_sliding_window=True, sliding_window=4, max_window_layers=2),
        7000, [],
    ),
    "qwen3": (
        Qwen3Config, Qwen3ForCausalLM,
        dict(COMMON, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, head_dim=32,
             use_sliding_window=False, sliding_window=None),
        8000, ["f32", "q8_0"],
    ),
    "mixtral": (
        MixtralConfig, MixtralForCausalLM,
        dict(COMMON, rope_theta=10000.0, tie_word_embeddings=False, head_dim=16, sliding_window=None,
             num_local_experts=4, num_experts_per_tok=2),
        9000, ["f32", "q8_0"],
    ),
    "bloom": (
        BloomConfig, BloomForCausalLM,
        dict(vocab_size=256, hidden_size=64, n_layer=4, n_head=4, layer_norm_epsilon=1e-5, bos_token_id=BOS_ID,
             eos_token_id=EOS_ID, pad_token_id=None, initializer_range=WEIGHT_STD, tie_word_embeddings=True),
        11000, ["f32", "q8_0"],
    ),
    "falcon": (
        FalconConfig, FalconForCausalLM,
        dict(FALCON, new_decoder_architecture=False, multi_query=True, parallel_attn=True, bias=False),
        13100, ["f32", "q8_0"],  # 13000's Adam steps in make_golden_grads.py are ill-conditioned (fp32 vs fp64: 7.7e-5)
    ),
    "falcon-new": (
        FalconConfig, FalconForCausalLM,
        dict(FALCON, new_decoder_architecture=True, num_kv_heads=2, bias=True, ffn_hidden_size=96,
             tie_word_embeddings=False, rope_theta=500000.0),
        14000, ["f32", "q8_0"],
    ),
    "falcon-sequential": (
        FalconConfig, FalconForCausalLM,
        dict(FALCON, new_decoder_architecture=False, multi_query=False, parallel_attn=False, bias=True),
        15000, [],
    ),
    "falcon2": (
        FalconConfig, FalconForCausalLM,
        dict(FALCON, new_decoder_architecture=True, num_kv_heads=2, num_ln_in_parallel_attn=1, bias=False),
        16000, [],
    ),
    # Gemma 2: the prompt (12 tokens) and the greedy path (44) pass the 5-token window of the even layers; caps
    # small enough that tanh bends the scores and the logits.
    "gemma2": (
        Gemma2Config, Gemma2ForCausalLM,
        dict(COMMON, head_dim=16, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True,
             hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=16, sliding_window=5,
             attn_logit_softcapping=2.0, final_logit_softcapping=1.5, pad_token_id=0),
        17000, ["f32", "q8_0"],
    ),
    "gemma2-options": (
        Gemma2Config, Gemma2ForCausalLM,
        dict(COMMON, head_dim=32, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True,
             hidden_activation="gelu", query_pre_attn_scalar=16, sliding_window=4, attention_bias=True,
             attn_logit_softcapping=None, final_logit_softcapping=None, pad_token_id=0,
             layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"]),
        18000, [],
    ),
    "phi3": (
        Phi3Config, Phi3ForCausalLM,
        dict(COMMON, rope_theta=10000.0, tie_word_embeddings=False, sliding_window=7,
             original_max_position_embeddings=512, pad_token_id=0),
        10000, ["f32", "q8_0"],
    ),
    # Phi-4-mini's RoPE: longrope over 3/4 of each head (12 of 16 values turn, 6 frequencies). The prompts and
    # the greedy path stay within the 64-token original context (short factors); the positions_offset forward
    # (100..111) passes it, so it runs on the long factors.
    "phi3-longrope": (
        Phi3Config, Phi3ForCausalLM,
        dict(COMMON, rope_theta=10000.0, tie_word_embeddings=False, sliding_window=None,
             max_position_embeddings=256, original_max_position_embeddings=64, pad_token_id=0,
             partial_rotary_factor=0.75,
             rope_scaling={"type": "longrope",
                           "short_factor": [1.0, 1.05, 1.1, 1.3, 1.6, 2.0],
                           "long_factor": [1.0, 2.5, 4.0, 6.0, 9.0, 16.0]}),
        13000, ["f32"],
    ),
}

GGUF_TYPES = {
    # name: (tensor type for 2-D weights, general.file_type)
    "f32": (GGMLQuantizationType.F32, LlamaFileType.ALL_F32),
    "f16": (GGMLQuantizationType.F16, LlamaFileType.MOSTLY_F16),
    "q8_0": (GGMLQuantizationType.Q8_0, LlamaFileType.MOSTLY_Q8_0),
    "q4_0": (GGMLQuantizationType.Q4_0, LlamaFileType.MOSTLY_Q4_0),
    "q4_1": (GGMLQuantizationType.Q4_1, LlamaFileType.MOSTLY_Q4_1),
    "q4_K": (GGMLQuantizationType.Q4_K, LlamaFileType.MOSTLY_Q4_K_S),
    "q5_K": (GGMLQuantizationType.Q5_K, LlamaFileType.MOSTLY_Q5_K_S),
    "q6_K": (GGMLQuantizationType.Q6_K, LlamaFileType.MOSTLY_Q6_K),
    "q4_K_M": (GGMLQuantizationType.Q4_K, LlamaFileType.MOSTLY_Q4_K_M),
    "q2_K": (GGMLQuantizationType.Q2_K, LlamaFileType.MOSTLY_Q2_K),
    "q3_K": (GGMLQuantizationType.Q3_K, LlamaFileType.MOSTLY_Q3_K_S),
    "iq4_nl": (GGMLQuantizationType.IQ4_NL, LlamaFileType.MOSTLY_IQ4_NL),
    "q5_K_M": (GGMLQuantizationType.Q5_K, LlamaFileType.MOSTLY_Q5_K_M),
}

# llama-quantize's Q4_K_M / Q5_K_M (llama_tensor_get_type) for a llama with n_gqa < 4: the LM head (output.weight,
# or token_embd when tied) is Q6_K, and so are attn_v and ffn_down of the layers use_more_bits picks; every other
# 2-D weight has the base type.  A weight whose rows are not whole super-blocks of 256 gets the fallback instead:
# Q5_0 for Q4_K, Q5_1 for Q5_K, Q8_0 for Q6_K (so the 64-wide llama's K-quant files hold no K-quant at all).
K_MIXES = {"q4_K_M", "q5_K_M"}
K_FALLBACK = {GGMLQuantizationType.Q4_K: GGMLQuantizationType.Q5_0,
              GGMLQuantizationType.Q5_K: GGMLQuantizationType.Q5_1,
              GGMLQuantizationType.Q6_K: GGMLQuantizationType.Q8_0}


def use_more_bits(i_layer: int, n_layer: int) -> bool:
    return i_layer < n_layer // 8 or i_layer >= 7 * n_layer // 8 or (i_layer - n_layer // 8) % 3 == 2


def weight_qtype(gtype: str, gname: str, row: int, config) -> GGMLQuantizationType:
    """The tensor type of the 2-D weight `gname` (rows of `row` values) in a file of type `gtype`."""
    qtype = GGUF_TYPES[gtype][0]
    if gtype in K_MIXES:
        lm_head = "output.weight" if not config.tie_word_embeddings else "token_embd.weight"
        if gname == lm_head or (gname.endswith(("attn_v.weight", "ffn_down.weight")) and
                                use_more_bits(int(gname.split(".")[1]), config.num_hidden_layers)):
            qtype = GGMLQuantizationType.Q6_K
    if qtype in K_FALLBACK and row % kquants.QK_K != 0:
        qtype = K_FALLBACK[qtype]
    return qtype

GGUF_ARCH = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
             "Qwen3ForCausalLM": "qwen3", "MixtralForCausalLM": "llama", "FalconForCausalLM": "falcon",
             "BloomForCausalLM": "bloom", "Phi3ForCausalLM": "phi3", "Gemma2ForCausalLM": "gemma2"}


def log(*args):
    print(*args, flush=True)


# --------------------------------------------------------------------------- models

def build_model(name: str, seed: int) -> torch.nn.Module:
    cfg_cls, model_cls, kwargs, _, _ = SPECS[name]
    config = cfg_cls(**kwargs)
    model = model_cls(config)
    model.set_attn_implementation("eager")
    randomize(model, seed)
    model.eval()
    return model


@torch.no_grad()
def randomize(model: torch.nn.Module, seed: int) -> None:
    """Fill every parameter from a seeded generator (independent of HF's init code)."""
    gen = torch.Generator().manual_seed(seed)
    # Gemma's RMSNorms multiply by 1 + weight: their weights are the offsets.
    norm_center = 0.0 if model.config.model_type == "gemma2" else 1.0
    std = model.config.initializer_range  # WEIGHT_STD, or less for wider models
    for pname, p in model.named_parameters():  # tied parameters appear once
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
        if pname.endswith(("norm.weight", "ln_f.weight", "ln_attn.weight", "ln_mlp.weight")):
            p.copy_(norm_center + NORM_STD * noise)
        elif pname.endswith(".bias"):
            p.copy_(BIAS_STD * noise)
        else:
            p.copy_(std * noise)


def make_prompts() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(PROMPT_SEED)
    ids = torch.randint(3, 256, (2, PROMPT_LEN), generator=gen, dtype=torch.int64)
    while torch.equal(ids[0], ids[1]):  # pragma: no cover - practically impossible
        ids[1] = torch.randint(3, 256, (PROMPT_LEN,), generator=gen, dtype=torch.int64)
    return ids[:1].clone(), ids.clone()


def top2_gap(logits: torch.Tensor) -> torch.Tensor:
    """top-1 minus top-2 along the last axis."""
    t = torch.topk(logits, 2, dim=-1).values
    return t[..., 0] - t[..., 1]


@torch.no_grad()
def greedy(model, input_ids: torch.Tensor) -> dict:
    """32 greedy tokens via generate(), cross-checked with a plain argmax loop."""
    # generate() fills unset GenerationConfig fields from the model's own
    # generation_config (eos_token_id=2), so clear EOS there: the 32 tokens are
    # pure argmax, never cut short and with no logits processor touching them.
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    gcfg = GenerationConfig(
        max_new_tokens=NEW_TOKENS, min_new_tokens=None, do_sample=False, num_beams=1,
        eos_token_id=None, pad_token_id=0, bos_token_id=BOS_ID,
        temperature=None, top_p=None, top_k=None,
        output_logits=True, return_dict_in_generate=True,
    )
    out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), generation_config=gcfg)
    new = out.sequences[0, input_ids.shape[1]:]
    assert new.numel() == NEW_TOKENS, f"generate stopped early: {new.numel()} tokens"
    step_logits = torch.cat(out.logits, dim=0).float()  # [32, V]
    assert torch.equal(step_logits.argmax(-1), new), "generate() is not plain argmax"

    # Independent check: full forward over prompt + generated tokens.
    full = model(out.sequences, attention_mask=torch.ones_like(out.sequences), use_cache=False).logits[0]
    full = full[input_ids.shape[1] - 1: -1]
    assert torch.equal(full.argmax(-1), new), "full-forward argmax disagrees with generate()"
    gap = torch.minimum(top2_gap(step_logits), top2_gap(full))
    return dict(ids=new.clone(), logits=step_logits.clone(), min_gap=float(gap.min()),
                gen_vs_full=float((step_logits - full).abs().max()))


class RouterRecorder:
    """Records, for every token a mixture-of-experts router sees, the gap between the probability of the last
    expert it chooses and that of the first it passes over (a tie there would make the choice a coin toss)."""

    def __init__(self, model):
        self.min_gap = 1.0
        k = getattr(model.config, "num_experts_per_tok", 0)
        routers = [m for m in model.modules() if type(m).__name__.endswith("TopKRouter")]
        self.handles = [r.register_forward_hook(lambda mod, inp, out, k=k: self._hook(out, k)) for r in routers]

    def _hook(self, out, k):
        logits = out[0] if isinstance(out, (tuple, list)) else out
        p = torch.softmax(logits.float(), dim=-1).sort(dim=-1, descending=True).values
        self.min_gap = min(self.min_gap, float((p[..., k - 1] - p[..., k]).min()))

    def close(self):
        for h in self.handles:
            h.remove()


def is_bloom(model) -> bool:
    return model.config.model_type == "bloom"


def decoder(model):
    """The model under the LM head: (embedding module whose output the first block takes, blocks, final norm)."""
    if is_bloom(model):
        t = model.transformer
        return t.word_embeddings_layernorm, t.h, t.ln_f
    if model.config.model_type == "falcon":
        t = model.transformer
        return t.word_embeddings, t.h, t.ln_f
    return model.model.embed_tokens, model.model.layers, model.model.norm


class BlockRecorder:
    """Captures the embedding output (BLOOM: after its LayerNorm) and each decoder block's output."""

    def __init__(self, model):
        self.outs = []
        embedding, blocks, _ = decoder(model)
        self.handles = [embedding.register_forward_hook(self._hook)]
        self.handles += [layer.register_forward_hook(self._hook) for layer in blocks]

    def _hook(self, module, inputs, output):
        h = output[0] if isinstance(output, (tuple, list)) else output
        self.outs.append(h.detach().clone())

    def close(self):
        for h in self.handles:
            h.remove()


@torch.no_grad()
def compute_golden(model, input_ids, batch_ids) -> tuple[dict, dict]:
    ones = torch.ones_like(input_ids)
    routers = RouterRecorder(model)
    rec = BlockRecorder(model)
    logits_full = model(input_ids, attention_mask=ones, use_cache=False).logits.float()
    rec.close()
    hidden = torch.stack(rec.outs, dim=0)  # [L+1, 1, T, H]
    assert hidden.shape[0] == model.config.num_hidden_layers + 1

    # token by token with the KV cache (the cache object is updated in place)
    cache = DynamicCache(config=model.config)
    # transformers >= 5.x renamed the forward argument past_key_values to cache
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    steps = []
    for t in range(input_ids.shape[1]):
        out = model(input_ids[:, t:t + 1], attention_mask=torch.ones(1, t + 1, dtype=torch.int64),
                    use_cache=True, **{cache_kw: cache})
        steps.append(out.logits.float())
    assert cache.get_seq_length() == input_ids.shape[1]
    logits_steps = torch.cat(steps, dim=1)

    batch_logits = model(batch_ids, attention_mask=torch.ones_like(batch_ids), use_cache=False).logits.float()

    pos_off = torch.arange(100, 100 + PROMPT_LEN, dtype=torch.int64)[None]
    # An explicit attention_mask keeps transformers from treating the jump in
    # position ids as the start of a second packed sequence.
    half = PROMPT_LEN // 2
    pos_gap = torch.cat([torch.arange(0, half), torch.arange(40, 40 + PROMPT_LEN - half)]).to(torch.int64)[None]
    # BLOOM takes no position ids: ALiBi counts distances within the sequence, so any positions give the plain logits.
    pos_kw = (lambda p: {}) if is_bloom(model) else (lambda p: {"position_ids": p})
    positions_offset_logits = model(input_ids, attention_mask=ones, use_cache=False, **pos_kw(pos_off)).logits.float()
    positions_gap_logits = model(input_ids, attention_mask=ones, use_cache=False, **pos_kw(pos_gap)).logits.float()

    g = greedy(model, input_ids)
    routers.close()

    golden = dict(
        input_ids=input_ids.clone(),
        logits_full=logits_full,
        logits_steps=logits_steps,
        greedy_ids=g["ids"],
        greedy_logits=g["logits"],
        batch_input_ids=batch_ids.clone(),
        batch_logits=batch_logits,
        positions_offset_logits=positions_offset_logits,
        positions_gap_ids=pos_gap,
        positions_gap_logits=positions_gap_logits,
        hidden_states=hidden.float(),
    )
    stats = dict(
        min_greedy_gap=g["min_gap"],
        greedy_has_eos=bool((g["ids"] == EOS_ID).any()),
        steps_vs_full=float((logits_steps - logits_full).abs().max()),
        batch_row0_vs_full=float((batch_logits[:1] - logits_full).abs().max()),
        offset_vs_full=float((positions_offset_logits - logits_full).abs().max()),
        gap_vs_full=float((positions_gap_logits - logits_full).abs().max()),
        generate_vs_full=g["gen_vs_full"],
        hidden_last_vs_full=float(
            (soft_cap(model.lm_head(decoder(model)[2](hidden[-1])), model.config) - logits_full).abs().max()),
        min_prompt_gap=float(top2_gap(logits_full).min()),
        logit_std=float(logits_full.std()),
    )
    if routers.handles:
        stats["min_router_gap"] = routers.min_gap
    return golden, stats


@torch.no_grad()
def compute_quant_golden(model, input_ids) -> tuple[dict, dict]:
    routers = RouterRecorder(model)
    logits_full = model(input_ids, attention_mask=torch.ones_like(input_ids), use_cache=False).logits.float()
    g = greedy(model, input_ids)
    routers.close()
    golden = dict(input_ids=input_ids.clone(), logits_full=logits_full,
                  greedy_ids=g["ids"], greedy_logits=g["logits"])
    stats = dict(min_greedy_gap=g["min_gap"], greedy_has_eos=bool((g["ids"] == EOS_ID).any()))
    if routers.handles:
        stats["min_router_gap"] = routers.min_gap
    return golden, stats


def soft_cap(logits: torch.Tensor, config) -> torch.Tensor:
    """The LM head's final soft cap (Gemma 2), as its forward applies it."""
    cap = getattr(config, "final_logit_softcapping", None)
    return logits if cap is None else torch.tanh(logits / cap) * cap


def acceptable(stats: dict) -> bool:
    return (stats["min_greedy_gap"] > MIN_GAP and not stats["greedy_has_eos"]
            and stats.get("steps_vs_full", 0.0) <= STEPS_TOL
            and stats.get("min_router_gap", 1.0) > MIN_ROUTER_GAP)


def reason(stats: dict) -> str:
    r = []
    if stats["min_greedy_gap"] <= MIN_GAP:
        r.append(f"greedy gap {stats['min_greedy_gap']:.1e} <= {MIN_GAP}")
    if stats["greedy_has_eos"]:
        r.append("greedy path emits EOS")
    if stats.get("steps_vs_full", 0.0) > STEPS_TOL:
        r.append(f"KV-cache logits differ by {stats['steps_vs_full']:.1e} > {STEPS_TOL}")
    if stats.get("min_router_gap", 1.0) <= MIN_ROUTER_GAP:
        r.append(f"router gap {stats['min_router_gap']:.1e} <= {MIN_ROUTER_GAP}")
    return ", ".join(r)


def clone_with_state(name: str, seed: int, state: dict[str, torch.Tensor]) -> torch.nn.Module:
    model = build_model(name, seed)
    missing, unexpected = model.load_state_dict(from_checkpoint_names(state), strict=False)
    # lm_head.weight may be absent when tied; nothing else may be missing
    assert not unexpected, unexpected
    assert all(k == "lm_head.weight" and model.config.tie_word_embeddings for k in missing), missing
    if model.config.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    model.eval()
    return model


def hf_state(model) -> dict[str, torch.Tensor]:
    """The weights under the names a saved checkpoint uses."""
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    return to_checkpoint_names(sd)


# transformers 5 holds a Mixtral block's experts fused (mlp.experts.gate_up_proj [E, 2F, D], down_proj [E, D, F],
# router mlp.gate) and saves them as checkpoints have them (block_sparse_moe.experts.E.w1/w3/w2, router
# block_sparse_moe.gate): these two convert between the forms.
def to_checkpoint_names(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for k, v in sd.items():
        if k.endswith(".mlp.gate.weight"):
            out[k.replace(".mlp.gate.", ".block_sparse_moe.gate.")] = v
        elif k.endswith(".mlp.experts.gate_up_proj"):
            p = k[: -len("mlp.experts.gate_up_proj")] + "block_sparse_moe.experts."
            f = v.shape[1] // 2
            for e in range(v.shape[0]):
                out[f"{p}{e}.w1.weight"] = v[e, :f].clone()
                out[f"{p}{e}.w3.weight"] = v[e, f:].clone()
        elif k.endswith(".mlp.experts.down_proj"):
            p = k[: -len("mlp.experts.down_proj")] + "block_sparse_moe.experts."
            for e in range(v.shape[0]):
                out[f"{p}{e}.w2.weight"] = v[e].clone()
        else:
            out[k] = v
    return out


def from_checkpoint_names(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out, experts = {}, {}
    for k, v in sd.items():
        if ".block_sparse_moe.gate." in k:
            out[k.replace(".block_sparse_moe.gate.", ".mlp.gate.")] = v
        elif ".block_sparse_moe.experts." in k:
            layer, rest = k.split(".block_sparse_moe.experts.")
            e, w, _ = rest.split(".")
            experts.setdefault(layer, {})[(int(e), w)] = v
        else:
            out[k] = v
    for layer, ws in experts.items():
        n = 1 + max(e for e, _ in ws)
        out[layer + ".mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([ws[(e, "w1")], ws[(e, "w3")]]) for e in range(n)])
        out[layer + ".mlp.experts.down_proj"] = torch.stack([ws[(e, "w2")] for e in range(n)])
    return out


# --------------------------------------------------------------------------- GGUF

def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF rotate-half layout -> llama.cpp interleaved pairs (rows of Q or K).

    Within each head the rows [0, d/2) and [d/2, d) are interleaved:
    new row 2*i = old row i, new row 2*i + 1 = old row d/2 + i.
    n_head is num_attention_heads for Q and num_key_value_heads for K.
    """
    rows = w.shape[0]
    return (w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    rows = w.shape[0]
    return (w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


def falcon_tensor_map(config) -> list[tuple[str, str]]:
    """Falcon's (gguf name, HF name) as llama.cpp's FalconModel converter maps them: attn_norm is ln_attn or the
    shared input_layernorm, attn_norm_2 ln_mlp; LayerNorm biases always, projection biases with config.bias."""
    m = [("token_embd.weight", "transformer.word_embeddings.weight")]
    two = config.new_decoder_architecture and config.num_ln_in_parallel_attn == 2
    assert config.parallel_attn or config.new_decoder_architecture, "llama.cpp has no sequential Falcon block"
    for i in range(config.num_hidden_layers):
        p = f"transformer.h.{i}."
        norms = [("attn_norm", "ln_attn"), ("attn_norm_2", "ln_mlp")] if two else [("attn_norm", "input_layernorm")]
        for g, h in norms:
            m += [(f"blk.{i}.{g}.weight", p + h + ".weight"), (f"blk.{i}.{g}.bias", p + h + ".bias")]
        for g, h in [("attn_qkv", "self_attention.query_key_value"), ("attn_output", "self_attention.dense"),
                     ("ffn_up", "mlp.dense_h_to_4h"), ("ffn_down", "mlp.dense_4h_to_h")]:
            m.append((f"blk.{i}.{g}.weight", p + h + ".weight"))
            if config.bias:
                m.append((f"blk.{i}.{g}.bias", p + h + ".bias"))
    m += [("output_norm.weight", "transformer.ln_f.weight"), ("output_norm.bias", "transformer.ln_f.bias")]
    if not config.tie_word_embeddings:
        m.append(("output.weight", "lm_head.weight"))
    return m


def falcon_qkv_to_gguf(data: np.ndarray, config) -> np.ndarray:
    """query_key_value rows [kv groups, heads/kv + 2, head_dim] -> all q, all k, all v (llama.cpp's "jploski"
    layout); biases likewise."""
    kv, hd = config.num_key_value_heads, config.hidden_size // config.num_attention_heads
    g = data.reshape(kv, -1, hd, *data.shape[1:])
    q, k, v = g[:, :-2], g[:, -2:-1], g[:, -1:]
    return np.concatenate([x.reshape(-1, *data.shape[1:]) for x in (q, k, v)])


def falcon_qkv_from_gguf(data: np.ndarray, config) -> np.ndarray:
    kv, heads, hd = config.num_key_value_heads, config.num_attention_heads, config.hidden_size // config.num_attention_heads
    rest = data.shape[1:]
    q = data[: heads * hd].reshape(kv, heads // kv, hd, *rest)
    k = data[heads * hd: (heads + kv) * hd].reshape(kv, 1, hd, *rest)
    v = data[(heads + kv) * hd:].reshape(kv, 1, hd, *rest)
    return np.concatenate([q, k, v], axis=1).reshape(data.shape)


def bloom_tensor_map(config) -> list[tuple[str, str]]:
    """BLOOM's (gguf name, HF name) as llama.cpp's BloomModel converter maps them: every projection and norm with
    its bias, the embedding LayerNorm as token_embd_norm, and output.weight written as a copy of the embeddings."""
    t = "transformer."
    m = [("token_embd.weight", t + "word_embeddings.weight"),
         ("token_embd_norm.weight", t + "word_embeddings_layernorm.weight"),
         ("token_embd_norm.bias", t + "word_embeddings_layernorm.bias")]
    for i in range(config.num_hidden_layers):
        p = f"{t}h.{i}."
        for g, h in [("attn_norm", "input_layernorm"), ("attn_qkv", "self_attention.query_key_value"),
                     ("attn_output", "self_attention.dense"), ("ffn_norm", "post_attention_layernorm"),
                     ("ffn_up", "mlp.dense_h_to_4h"), ("ffn_down", "mlp.dense_4h_to_h")]:
            m += [(f"blk.{i}.{g}.weight", p + h + ".weight"), (f"blk.{i}.{g}.bias", p + h + ".bias")]
    m += [("output_norm.weight", t + "ln_f.weight"), ("output_norm.bias", t + "ln_f.bias"),
          ("output.weight", t + "word_embeddings.weight")]
    return m


def bloom_qkv_to_gguf(data: np.ndarray, config) -> np.ndarray:
    """query_key_value rows [heads, 3, head_dim] -> all q, all k, all v (as the converter regroups them)."""
    heads = config.num_attention_heads
    g = data.reshape(heads, 3, -1, *data.shape[1:])
    return np.concatenate([g[:, part].reshape(-1, *data.shape[1:]) for part in range(3)])


def bloom_qkv_from_gguf(data: np.ndarray, config) -> np.ndarray:
    heads = config.num_attention_heads
    g = data.reshape(3, heads, -1, *data.shape[1:])
    return g.swapaxes(0, 1).reshape(data.shape)


def rope_parameters(config) -> dict:
    if hasattr(config, "rope_parameters"):
        return config.rope_parameters or {}
    return {"rope_theta": config.rope_theta} if hasattr(config, "rope_theta") else {}  # BLOOM: ALiBi, no RoPE


def rope_type(config) -> str:
    rope = rope_parameters(config)
    return rope.get("rope_type", rope.get("type", "default"))


def phi3_rope_dims(config) -> int:
    rot = rope_parameters(config).get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0))
    return int(rot * config.hidden_size) // config.num_attention_heads


def gguf_extra_tensors(config) -> dict[str, np.ndarray]:
    """Tensors the converter makes from the config, not from a weight: Phi-3's longrope factors."""
    if getattr(config, "model_type", "") != "phi3" or rope_type(config) != "longrope":
        return {}
    rope = rope_parameters(config)
    return {"rope_factors_long.weight": np.asarray(rope["long_factor"], dtype=np.float32),
            "rope_factors_short.weight": np.asarray(rope["short_factor"], dtype=np.float32)}


def gemma2_tensor_map(config) -> list[tuple[str, str]]:
    """Gemma 2's (gguf name, HF name) as llama.cpp's Gemma2Model converter maps them: four norms a block (ffn_norm is
    pre_feedforward_layernorm), no output tensor (the converter drops lm_head: the head is the embeddings)."""
    m = [("token_embd.weight", "model.embed_tokens.weight")]
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        m += [(f"blk.{i}.{g}.weight", p + h + ".weight") for g, h in [
            ("attn_norm", "input_layernorm"), ("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"),
            ("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj"),
            ("post_attention_norm", "post_attention_layernorm"), ("ffn_norm", "pre_feedforward_layernorm"),
            ("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"), ("ffn_down", "mlp.down_proj"),
            ("post_ffw_norm", "post_feedforward_layernorm")]]
    m.append(("output_norm.weight", "model.norm.weight"))
    return m


def gemma2_gguf_problem(config) -> str | None:
    """What of a Gemma 2 config llama.cpp's file cannot say (None: nothing). llama.cpp derives the query scale from
    the model's size (hidden / heads for 46 blocks, head_dim otherwise), reads no biases, no lm_head, no RoPE base
    or scaling, and computes the tanh GELU and both soft caps."""
    head_dim = config.head_dim
    scalar = config.hidden_size // config.num_attention_heads if config.num_hidden_layers == 46 else head_dim
    rope = config.rope_parameters
    checks = [
        (config.query_pre_attn_scalar == scalar, f"query_pre_attn_scalar {config.query_pre_attn_scalar} != {scalar}"),
        (not config.attention_bias, "attention_bias"),
        (config.tie_word_embeddings, "an untied lm_head"),
        (config.hidden_activation == "gelu_pytorch_tanh", f"hidden_activation {config.hidden_activation}"),
        (config.attn_logit_softcapping is not None and config.final_logit_softcapping is not None, "no soft cap"),
        (rope.get("rope_type", "default") == "default" and rope["rope_theta"] == 10000.0, f"rope {rope}"),
        (list(config.layer_types) == ["sliding_attention" if i % 2 == 0 else "full_attention"
                                      for i in range(config.num_hidden_layers)], "layer_types other than even/odd"),
    ]
    bad = [what for ok, what in checks if not ok]
    return ", ".join(bad) if bad else None


def gguf_tensor_map(config) -> list[tuple[str, str]]:
    """(gguf name, HF name) in llama.cpp's write order."""
    if getattr(config, "model_type", "") == "falcon":
        return falcon_tensor_map(config)
    if getattr(config, "model_type", "") == "bloom":
        return bloom_tensor_map(config)
    if getattr(config, "model_type", "") == "phi3":  # Phi3MiniModel: qkv_proj and gate_up_proj stay fused
        m = [("token_embd.weight", "model.embed_tokens.weight")]
        for i in range(config.num_hidden_layers):
            p = f"model.layers.{i}."
            m += [(f"blk.{i}.attn_norm.weight", p + "input_layernorm.weight"),
                  (f"blk.{i}.attn_qkv.weight", p + "self_attn.qkv_proj.weight"),
                  (f"blk.{i}.attn_output.weight", p + "self_attn.o_proj.weight"),
                  (f"blk.{i}.ffn_norm.weight", p + "post_attention_layernorm.weight"),
                  (f"blk.{i}.ffn_up.weight", p + "mlp.gate_up_proj.weight"),
                  (f"blk.{i}.ffn_down.weight", p + "mlp.down_proj.weight")]
        m.append(("output_norm.weight", "model.norm.weight"))
        if not config.tie_word_embeddings:
            m.append(("output.weight", "lm_head.weight"))
        return m
    if getattr(config, "model_type", "") == "gemma2":
        return gemma2_tensor_map(config)
    m = [("token_embd.weight", "model.embed_tokens.weight")]
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        m += [
            (f"blk.{i}.attn_norm.weight", p + "input_layernorm.weight"),
            (f"blk.{i}.attn_q.weight", p + "self_attn.q_proj.weight"),
            (f"blk.{i}.attn_k.weight", p + "self_attn.k_proj.weight"),
            (f"blk.{i}.attn_v.weight", p + "self_attn.v_proj.weight"),
        ]
        llama_bias = getattr(config, "model_type", "") == "llama" and getattr(config, "attention_bias", False)
        if getattr(config, "model_type", "") == "qwen2" or llama_bias:
            m += [
                (f"blk.{i}.attn_q.bias", p + "self_attn.q_proj.bias"),
                (f"blk.{i}.attn_k.bias", p + "self_attn.k_proj.bias"),
                (f"blk.{i}.attn_v.bias", p + "self_attn.v_proj.bias"),
            ]
        if getattr(config, "model_type", "") == "qwen3":
            m += [
                (f"blk.{i}.attn_k_norm.weight", p + "self_attn.k_norm.weight"),
                (f"blk.{i}.attn_q_norm.weight", p + "self_attn.q_norm.weight"),
            ]
        m += [(f"blk.{i}.attn_output.weight", p + "self_attn.o_proj.weight")]
        if llama_bias:
            m += [(f"blk.{i}.attn_output.bias", p + "self_attn.o_proj.bias")]
        m += [(f"blk.{i}.ffn_norm.weight", p + "post_attention_layernorm.weight")]
        if getattr(config, "num_local_experts", 0):
            # llama.cpp: the router, then each projection's experts stacked [E, rows, cols] (a tuple of names)
            e = range(config.num_local_experts)
            moe = p + "block_sparse_moe."
            m += [
                (f"blk.{i}.ffn_gate_inp.weight", moe + "gate.weight"),
                (f"blk.{i}.ffn_gate_exps.weight", tuple(f"{moe}experts.{x}.w1.weight" for x in e)),
                (f"blk.{i}.ffn_down_exps.weight", tuple(f"{moe}experts.{x}.w2.weight" for x in e)),
                (f"blk.{i}.ffn_up_exps.weight", tuple(f"{moe}experts.{x}.w3.weight" for x in e)),
            ]
            continue
        m += [
            (f"blk.{i}.ffn_gate.weight", p + "mlp.gate_proj.weight"),
            (f"blk.{i}.ffn_up.weight", p + "mlp.up_proj.weight"),
            (f"blk.{i}.ffn_down.weight", p + "mlp.down_proj.weight"),
        ]
        if getattr(config, "model_type", "") == "llama" and getattr(config, "mlp_bias", False):
            m += [
                (f"blk.{i}.ffn_gate.bias", p + "mlp.gate_proj.bias"),
                (f"blk.{i}.ffn_up.bias", p + "mlp.up_proj.bias"),
                (f"blk.{i}.ffn_down.bias", p + "mlp.down_proj.bias"),
            ]
    m.append(("output_norm.weight", "model.norm.weight"))
    if not config.tie_word_embeddings:
        m.append(("output.weight", "lm_head.weight"))
    return m


def write_gguf(path: Path, config, state: dict[str, torch.Tensor], gtype: str, model_name: str) -> None:
    arch = GGUF_ARCH[config.architectures[0] if config.architectures else type_name(config)]
    _, ftype = GGUF_TYPES[gtype]
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    rope = rope_parameters(config)
    kind = rope_type(config)
    assert kind == "default" or (kind, arch) in {("yarn", "qwen2"), ("longrope", "phi3")}, \
        f"GGUF export of rope_type {kind!r} for {arch} is not implemented"

    w = GGUFWriter(str(path), arch)  # writes general.architecture
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(model_name)
    if arch == "gemma2":  # Gemma2Model.set_gguf_parameters: the llama keys but the RoPE base, and its own
        problem = gemma2_gguf_problem(config)
        assert problem is None, f"a GGUF gemma2 file cannot hold this model: {problem}"
        write_llama_keys(w, config, arch, ftype, None, head_dim)
    elif arch == "falcon":  # FalconModel.set_gguf_parameters
        w.add_context_length(2048)  # the converter's constant
        w.add_tensor_data_layout("jploski")  # query_key_value regrouped as all q, all k, all v
        w.add_embedding_length(config.hidden_size)
        w.add_feed_forward_length(4 * config.hidden_size)  # written so whatever ffn_hidden_size says
        w.add_block_count(config.num_hidden_layers)
        w.add_head_count(config.num_attention_heads)
        # the KV heads the layer computes (the converter reads num_kv_heads, which a multi-query config saved by
        # transformers 5 sets to the head count)
        w.add_head_count_kv(config.num_key_value_heads)
        w.add_layer_norm_eps(float(config.layer_norm_epsilon))
        w.add_file_type(int(ftype))
        w.add_rope_freq_base(float(rope["rope_theta"]))  # the converter omits it (10000 then); kept for falcon-new
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    elif arch == "bloom":  # BloomModel.set_gguf_parameters
        w.add_context_length(config.to_dict().get("seq_length", config.hidden_size))  # the converter's fallback
        w.add_embedding_length(config.hidden_size)
        w.add_feed_forward_length(4 * config.hidden_size)
        w.add_block_count(config.num_hidden_layers)
        w.add_head_count(config.num_attention_heads)
        w.add_head_count_kv(config.num_attention_heads)
        w.add_layer_norm_eps(float(config.layer_norm_epsilon))
        w.add_file_type(int(ftype))
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    elif arch == "phi3":  # Phi3MiniModel.set_gguf_parameters and generate_extra_tensors
        orig = rope.get("original_max_position_embeddings", config.original_max_position_embeddings)
        w.add_context_length(config.max_position_embeddings)
        w.add_rope_scaling_orig_ctx_len(orig)
        w.add_embedding_length(config.hidden_size)
        w.add_feed_forward_length(config.intermediate_size)
        w.add_block_count(config.num_hidden_layers)
        w.add_head_count(config.num_attention_heads)
        w.add_head_count_kv(config.num_key_value_heads)
        w.add_layer_norm_rms_eps(float(config.rms_norm_eps))
        w.add_rope_dimension_count(phi3_rope_dims(config))
        w.add_rope_freq_base(float(rope["rope_theta"]))
        w.add_file_type(int(ftype))
        w.add_sliding_window(config.sliding_window or 0)
        if kind == "longrope":
            scale = config.max_position_embeddings / orig
            w.add_rope_scaling_attn_factors(float(np.sqrt(1 + np.log(scale) / np.log(orig)) if scale > 1 else 1.0))
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    # same keys, same order as convert_hf_to_gguf.py TextModel.set_gguf_parameters
    else:
        write_llama_keys(w, config, arch, ftype, rope, head_dim)

    for gname, hname in gguf_tensor_map(config):
        if isinstance(hname, tuple):
            data = np.stack([state[h].detach().float().numpy() for h in hname])
        else:
            data = state[hname].detach().float().numpy().copy()
        # llama.cpp's converter permutes Q and K rows, biases included
        if arch == "llama" and gname.endswith(("attn_q.weight", "attn_q.bias")):
            data = permute_qk(data, config.num_attention_heads)
        elif arch == "llama" and gname.endswith(("attn_k.weight", "attn_k.bias")):
            data = permute_qk(data, config.num_key_value_heads)
        elif arch == "falcon" and ".attn_qkv." in gname:
            data = falcon_qkv_to_gguf(data, config)
        elif arch == "bloom" and ".attn_qkv." in gname:
            data = bloom_qkv_to_gguf(data, config)
        elif arch == "gemma2" and gname.endswith("norm.weight"):
            data = data + np.float32(1)  # the converter stores Gemma's 1 + weight
        if data.ndim <= 1 or gname.endswith(("_norm.weight", "ffn_gate_inp.weight")):  # llama-quantize keeps routers
            t = GGMLQuantizationType.F32
        else:
            t = weight_qtype(gtype, gname, data.shape[-1], config)
        w.add_tensor(gname, kquants.quantize(data, t), raw_dtype=t)
    for gname, data in gguf_extra_tensors(config).items():
        w.add_tensor(gname, data, raw_dtype=GGMLQuantizationType.F32)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_llama_keys(w, config, arch, ftype, rope, head_dim) -> None:
    w.add_block_count(config.num_hidden_layers)
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    if rope is not None:
        w.add_rope_freq_base(float(rope["rope_theta"]))
    if rope_type(config) == "yarn":  # TextModel.set_gguf_parameters
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(float(rope["factor"]))
        w.add_rope_scaling_orig_ctx_len(int(rope["original_max_position_embeddings"]))
    w.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    # the converter writes these only when config.json has head_dim (transformers 5
    # saves it for llama and mistral, not for qwen2)
    if config.to_dict().get("head_dim") is not None:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_file_type(int(ftype))
    if arch == "llama":  # LlamaModel.set_gguf_parameters
        w.add_vocab_size(config.vocab_size)
        w.add_rope_dimension_count(head_dim)
    if getattr(config, "num_local_experts", 0):  # LlamaModel.set_gguf_parameters for Mixtral
        w.add_expert_count(config.num_local_experts)
        w.add_expert_used_count(config.num_experts_per_tok)
    if arch == "gemma2":
        w.add_attn_logit_softcapping(float(config.attn_logit_softcapping))
        w.add_final_logit_softcapping(float(config.final_logit_softcapping))
        w.add_sliding_window(config.sliding_window)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)


def type_name(config) -> str:
    return {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
            "qwen3": "Qwen3ForCausalLM", "mixtral": "MixtralForCausalLM",
            "falcon": "FalconForCausalLM", "bloom": "BloomForCausalLM",
            "phi3": "Phi3ForCausalLM", "gemma2": "Gemma2ForCausalLM"}[config.model_type]


def read_gguf(path: Path, config) -> tuple[dict[str, torch.Tensor], GGUFReader]:
    """Read a GGUF back into an HF state dict (dequantized, Q/K un-permuted)."""
    reader = GGUFReader(str(path))
    arch = reader.fields["general.architecture"].contents()
    by_name = {t.name: t for t in reader.tensors}
    expected = gguf_tensor_map(config)
    extras = gguf_extra_tensors(config)
    assert sorted(by_name) == sorted([g for g, _ in expected] + list(extras)), (sorted(by_name), expected)
    for gname, want in extras.items():
        assert np.array_equal(np.asarray(by_name[gname].data, dtype=np.float32), want), gname
    state = {}
    for gname, hname in expected:
        t = by_name[gname]
        shape = tuple(int(x) for x in reversed(t.shape))  # ggml order -> numpy order
        data = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        if arch == "llama" and gname.endswith(("attn_q.weight", "attn_q.bias")):
            data = unpermute_qk(data, config.num_attention_heads)
        elif arch == "llama" and gname.endswith(("attn_k.weight", "attn_k.bias")):
            data = unpermute_qk(data, config.num_key_value_heads)
        elif arch == "falcon" and ".attn_qkv." in gname:
            data = falcon_qkv_from_gguf(data, config)
        elif arch == "bloom" and ".attn_qkv." in gname:
            data = bloom_qkv_from_gguf(data, config)
        elif arch == "gemma2" and gname.endswith("norm.weight"):
            data = data - np.float32(1)
        if isinstance(hname, tuple):
            for h, one in zip(hname, data):
                state[h] = torch.from_numpy(one.copy())
        else:
            state[hname] = torch.from_numpy(data.copy())
    return state, reader


def check_gguf_metadata(reader: GGUFReader, config, gtype: str) -> None:
    arch = reader.fields["general.architecture"].contents()
    f = {k: v.contents() for k, v in reader.fields.items() if not k.startswith("GGUF.")}
    if arch in ("falcon", "bloom"):  # LayerNorm families: their converters' own keys, every 1-D tensor in f32
        want = {
            f"{arch}.block_count": config.num_hidden_layers,
            # Falcon's converter writes a constant; BLOOM's seq_length, else the hidden size
            f"{arch}.context_length": 2048 if arch == "falcon" else config.to_dict().get("seq_length",
                                                                                      config.hidden_size),
            f"{arch}.embedding_length": config.hidden_size,
            f"{arch}.feed_forward_length": 4 * config.hidden_size,
            f"{arch}.attention.head_count": config.num_attention_heads,
            f"{arch}.attention.head_count_kv": config.num_key_value_heads if arch == "falcon"
            else config.num_attention_heads,
            "general.file_type": int(GGUF_TYPES[gtype][1]),
        }
        if arch == "falcon":
            want["falcon.tensor_data_layout"] = "jploski"
        for k, v in want.items():
            assert f[k] == v, (k, f[k], v)
        eps = f[f"{arch}.attention.layer_norm_epsilon"]
        assert abs(eps - config.layer_norm_epsilon) <= 1e-6 * config.layer_norm_epsilon, eps
        for t in reader.tensors:
            want_t = GGMLQuantizationType.F32 if len(t.shape) == 1 else GGUF_TYPES[gtype][0]
            assert t.tensor_type == want_t, (t.name, t.tensor_type, want_t)
        return
    if arch == "phi3":
        assert f["phi3.rope.dimension_count"] == phi3_rope_dims(config)
        assert f["phi3.attention.sliding_window"] == (config.sliding_window or 0)
        assert ("phi3.rope.scaling.attn_factor" in f) == (rope_type(config) == "longrope")
    if rope_type(config) == "yarn":
        rope = rope_parameters(config)
        assert f[f"{arch}.rope.scaling.type"] == "yarn"
        assert f[f"{arch}.rope.scaling.factor"] == rope["factor"]
        assert f[f"{arch}.rope.scaling.original_context_length"] == rope["original_max_position_embeddings"]
    want = {
        f"{arch}.block_count": config.num_hidden_layers,
        f"{arch}.context_length": config.max_position_embeddings,
        f"{arch}.embedding_length": config.hidden_size,
        f"{arch}.feed_forward_length": config.intermediate_size,
        f"{arch}.attention.head_count": config.num_attention_heads,
        f"{arch}.attention.head_count_kv": config.num_key_value_heads,
        "general.file_type": int(GGUF_TYPES[gtype][1]),
    }
    if arch == "gemma2":
        want.update({"gemma2.attention.sliding_window": config.sliding_window,
                     "gemma2.attention.key_length": config.head_dim})
        for k, v in [("attn_logit_softcapping", config.attn_logit_softcapping),
                     ("final_logit_softcapping", config.final_logit_softcapping)]:
            assert abs(f[f"gemma2.{k}"] - v) <= 1e-6 * v, (k, f[f"gemma2.{k}"], v)
    for k, v in want.items():
        assert f[k] == v, (k, f[k], v)
    eps = f[f"{arch}.attention.layer_norm_rms_epsilon"]
    assert abs(eps - config.rms_norm_eps) <= 1e-6 * config.rms_norm_eps, (eps, config.rms_norm_eps)
    for t in reader.tensors:
        keep_f32 = len(t.shape) == 1 or t.name.endswith(("_norm.weight", "ffn_gate_inp.weight"))
        keep_f32 = keep_f32 or t.name.startswith("rope_factors_")
        want_t = GGMLQuantizationType.F32 if keep_f32 else weight_qtype(gtype, t.name, int(t.shape[0]), config)
        assert t.tensor_type == want_t, (t.name, t.tensor_type, want_t)


def gguf_reference_logits(path: Path, input_ids: np.ndarray) -> np.ndarray:
    """Forward pass straight from a GGUF file with llama.cpp's semantics.

    Independent of transformers: uses only the GGUF metadata and tensors.
    For arch "llama" RoPE rotates adjacent pairs (2i, 2i+1) (llama.cpp's
    normal mode, which is why the converter permutes Q/K); for "qwen2" it
    rotates (i, i + d/2) (NEOX mode, no permutation).  Returns [T, vocab].
    """
    r = GGUFReader(str(path))
    f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("GGUF.")}
    arch = f["general.architecture"]
    W = {}
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape))
        W[t.name] = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float64).reshape(shape)
    if arch == "falcon":
        return falcon_reference_logits(f, W, input_ids)
    if arch == "bloom":
        return bloom_reference_logits(f, W, input_ids)
    if arch == "gemma2":
        return gemma2_reference_logits(f, W, input_ids)
    n_layer = f[f"{arch}.block_count"]
    n_head = f[f"{arch}.attention.head_count"]
    n_kv = f[f"{arch}.attention.head_count_kv"]
    eps = f[f"{arch}.attention.layer_norm_rms_epsilon"]
    base = f[f"{arch}.rope.freq_base"]
    n_embd = f[f"{arch}.embedding_length"]
    hd = f.get(f"{arch}.attention.key_length", n_embd // n_head)
    T = len(input_ids)

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    rd = f.get(f"{arch}.rope.dimension_count", hd)  # Phi-3: RoPE over the first rd values of each head
    inv = base ** (-np.arange(0, rd, 2, dtype=np.float64) / rd)      # [rd/2]
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]      # [T, rd/2]
    mscale = 1.0
    if "rope_factors_short.weight" in W:
        # longrope: each frequency divided by its factor, the long ones once the sequence passes the original
        # context (as Hugging Face chooses them; llama.cpp chooses by the context it was started with)
        long = T > f[f"{arch}.rope.scaling.original_context_length"]
        ang = ang / W["rope_factors_long.weight" if long else "rope_factors_short.weight"][None, :]
        mscale = f[f"{arch}.rope.scaling.attn_factor"]
    if f.get(f"{arch}.rope.scaling.type") == "yarn":
        # llama.cpp's YaRN: interpolated and extrapolated angles mixed over a ramp between the correction dims
        factor, orig = f[f"{arch}.rope.scaling.factor"], f[f"{arch}.rope.scaling.original_context_length"]
        fast, slow = f.get(f"{arch}.rope.scaling.yarn_beta_fast", 32.0), f.get(f"{arch}.rope.scaling.yarn_beta_slow", 1.0)

        def corr_dim(rot):
            return rd * np.log(orig / (rot * 2 * np.pi)) / (2 * np.log(base))

        low, high = max(0.0, np.floor(corr_dim(fast))), min(rd - 1.0, np.ceil(corr_dim(slow)))
        ramp = 1 - np.clip((np.arange(rd // 2) - low) / max(0.001, high - low), 0, 1)
        ang = ang / factor * (1 - ramp) + ang * ramp
        mscale = 1 + 0.1 * np.log(factor)
    cos, sin = mscale * np.cos(ang)[:, None, :], mscale * np.sin(ang)[:, None, :]

    def rope(x):  # x [T, H, hd]
        if arch == "llama":
            a, b = x[..., 0::2], x[..., 1::2]
            out = np.empty_like(x)
            out[..., 0::2] = a * cos - b * sin
            out[..., 1::2] = a * sin + b * cos
            return out
        a, b, rest = x[..., : rd // 2], x[..., rd // 2: rd], x[..., rd:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos, rest], axis=-1)

    x = W["token_embd.weight"][input_ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    if window := f.get(f"{arch}.attention.sliding_window", 0):  # a query sees itself and the window-1 before it
        mask = mask + np.tril(np.full((T, T), -np.inf), -window)
    for i in range(n_layer):
        p = f"blk.{i}."
        h = rms(x, W[p + "attn_norm.weight"])
        if p + "attn_qkv.weight" in W:  # Phi-3: q, k and v rows in one tensor
            qkv = h @ W[p + "attn_qkv.weight"].T
            q, k, v = np.split(qkv, [n_head * hd, (n_head + n_kv) * hd], axis=-1)
        else:
            q = h @ W[p + "attn_q.weight"].T + W.get(p + "attn_q.bias", 0.0)
            k = h @ W[p + "attn_k.weight"].T + W.get(p + "attn_k.bias", 0.0)
            v = h @ W[p + "attn_v.weight"].T + W.get(p + "attn_v.bias", 0.0)
        q, k = q.reshape(T, n_head, hd), k.reshape(T, n_kv, hd)
        if p + "attn_q_norm.weight" in W:  # qwen3: RMSNorm over each head before RoPE
            q, k = rms(q, W[p + "attn_q_norm.weight"]), rms(k, W[p + "attn_k_norm.weight"])
        q, k = rope(q), rope(k)
        v = v.reshape(T, n_kv, hd)
        k = np.repeat(k, n_head // n_kv, axis=1)
        v = np.repeat(v, n_head // n_kv, axis=1)
        att = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", att, v).reshape(T, n_head * hd)
        x = x + o @ W[p + "attn_output.weight"].T + W.get(p + "attn_output.bias", 0.0)
        h = rms(x, W[p + "ffn_norm.weight"])
        if p + "ffn_gate_inp.weight" in W:  # mixture of experts: softmax router, top-k, renormalized
            k_used = f[f"{arch}.expert_used_count"]
            logits = h @ W[p + "ffn_gate_inp.weight"].T
            prob = np.exp(logits - logits.max(-1, keepdims=True))
            prob /= prob.sum(-1, keepdims=True)
            out = np.zeros_like(x)
            for t in range(T):
                top = np.argsort(-prob[t])[:k_used]
                for e in top:
                    g = h[t] @ W[p + "ffn_gate_exps.weight"][e].T
                    u = h[t] @ W[p + "ffn_up_exps.weight"][e].T
                    y = ((g / (1 + np.exp(-g))) * u) @ W[p + "ffn_down_exps.weight"][e].T
                    out[t] += prob[t, e] / prob[t, top].sum() * y
            x = x + out
            continue
        if p + "ffn_gate.weight" in W:
            g = h @ W[p + "ffn_gate.weight"].T + W.get(p + "ffn_gate.bias", 0.0)
            u = h @ W[p + "ffn_up.weight"].T + W.get(p + "ffn_up.bias", 0.0)
        else:  # Phi-3: gate rows, then up rows, in ffn_up
            g, u = np.split(h @ W[p + "ffn_up.weight"].T, 2, axis=-1)
        x = x + ((g / (1 + np.exp(-g))) * u) @ W[p + "ffn_down.weight"].T + W.get(p + "ffn_down.bias", 0.0)
    x = rms(x, W["output_norm.weight"])
    out_w = W.get("output.weight", W["token_embd.weight"])
    return x @ out_w.T


def falcon_reference_logits(f: dict, W: dict, input_ids: np.ndarray) -> np.ndarray:
    """Falcon from its GGUF tensors as llama.cpp's graph lays them out: attn_qkv holds all q rows, then all k, then
    all v; attention and MLP run in parallel from attn_norm, the MLP from attn_norm_2 when the file has it; RoPE
    rotates halves (NEOX).  The GELU is the exact one of the Hugging Face model the file came from (llama.cpp's
    graph uses the tanh approximation)."""
    from math import erf
    n_layer, n_head = f["falcon.block_count"], f["falcon.attention.head_count"]
    n_kv, eps = f["falcon.attention.head_count_kv"], f["falcon.attention.layer_norm_epsilon"]
    base = f.get("falcon.rope.freq_base", 10000.0)
    hd = f["falcon.embedding_length"] // n_head
    T = len(input_ids)
    gelu = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / np.sqrt(2))))

    def ln(x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * W[name + ".weight"] + W[name + ".bias"]

    inv = base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(x):  # x [T, H, hd], halves rotated
        a, b = x[..., : hd // 2], x[..., hd // 2:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)

    x = W["token_embd.weight"][input_ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(n_layer):
        p = f"blk.{i}."
        n = ln(x, p + "attn_norm")
        m = ln(x, p + "attn_norm_2") if p + "attn_norm_2.weight" in W else n
        qkv = n @ W[p + "attn_qkv.weight"].T + W.get(p + "attn_qkv.bias", 0.0)
        q = rope(qkv[:, : n_head * hd].reshape(T, n_head, hd))
        k = rope(qkv[:, n_head * hd: (n_head + n_kv) * hd].reshape(T, n_kv, hd))
        v = qkv[:, (n_head + n_kv) * hd:].reshape(T, n_kv, hd)
        k, v = np.repeat(k, n_head // n_kv, axis=1), np.repeat(v, n_head // n_kv, axis=1)
        att = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", att, v).reshape(T, n_head * hd)
        attn = o @ W[p + "attn_output.weight"].T + W.get(p + "attn_output.bias", 0.0)
        u = gelu(m @ W[p + "ffn_up.weight"].T + W.get(p + "ffn_up.bias", 0.0))
        x = x + attn + u @ W[p + "ffn_down.weight"].T + W.get(p + "ffn_down.bias", 0.0)
    x = ln(x, "output_norm")
    return x @ W.get("output.weight", W["token_embd.weight"]).T


def bloom_reference_logits(f: dict, W: dict, input_ids: np.ndarray) -> np.ndarray:
    """BLOOM from its GGUF tensors as llama.cpp's graph computes it: the embeddings' LayerNorm, then per block
    LayerNorm, attn_qkv (all q, all k, all v rows) with ALiBi (head h's score for key s gains slope_h * s; a
    per-query constant, so the same as a relative bias), attn_output, LayerNorm, ffn_up, tanh GELU, ffn_down."""
    n_layer, n_head = f["bloom.block_count"], f["bloom.attention.head_count"]
    eps = f["bloom.attention.layer_norm_epsilon"]
    hd = f["bloom.embedding_length"] // n_head
    T = len(input_ids)

    def ln(x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * W[name + ".weight"] + W[name + ".bias"]

    def gelu(v):
        return 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))

    n = 2 ** int(np.floor(np.log2(n_head)))  # slopes of the largest power of two, then the odd ones of 2n
    slopes = [2 ** (-8 * (h + 1) / n) for h in range(n)] + [2 ** (-4 * (2 * j + 1) / n) for j in range(n_head - n)]
    alibi = np.asarray(slopes)[:, None, None] * np.arange(T, dtype=np.float64)[None, None, :]

    x = ln(W["token_embd.weight"][input_ids], "token_embd_norm")
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(n_layer):
        p = f"blk.{i}."
        qkv = ln(x, p + "attn_norm") @ W[p + "attn_qkv.weight"].T + W[p + "attn_qkv.bias"]
        q, k, v = (part.reshape(T, n_head, hd) for part in np.split(qkv, 3, axis=-1))
        att = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + alibi + mask
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", att, v).reshape(T, n_head * hd)
        x = x + o @ W[p + "attn_output.weight"].T + W[p + "attn_output.bias"]
        u = gelu(ln(x, p + "ffn_norm") @ W[p + "ffn_up.weight"].T + W[p + "ffn_up.bias"])
        x = x + u @ W[p + "ffn_down.weight"].T + W[p + "ffn_down.bias"]
    x = ln(x, "output_norm")
    return x @ W["output.weight"].T


def gemma2_reference_logits(f: dict, W: dict, input_ids: np.ndarray) -> np.ndarray:
    """Gemma 2 from its GGUF tensors as llama.cpp's graph computes it: embeddings scaled by sqrt(n_embd); norms
    multiply by the stored weights (1 + weight already); queries scaled by f_attention_scale (head_dim^-0.5, or
    (n_embd / n_head)^-0.5 for 46 blocks); scores soft-capped, a sliding window on even layers (a key at distance
    >= n_swa is masked); post-norms on attention's and the MLP's outputs; tanh GELU; logits soft-capped."""
    n_layer, n_head = f["gemma2.block_count"], f["gemma2.attention.head_count"]
    n_kv, eps = f["gemma2.attention.head_count_kv"], f["gemma2.attention.layer_norm_rms_epsilon"]
    n_embd, hd = f["gemma2.embedding_length"], f["gemma2.attention.key_length"]
    base = f.get("gemma2.rope.freq_base", 10000.0)
    n_swa = f.get("gemma2.attention.sliding_window", 4096)
    attn_cap = f.get("gemma2.attn_logit_softcapping", 50.0)
    final_cap = f.get("gemma2.final_logit_softcapping", 30.0)
    q_scale = 1 / np.sqrt(n_embd // n_head if n_layer == 46 else hd)
    T = len(input_ids)

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))

    inv = base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(x):  # x [T, H, hd], halves rotated (NEOX)
        a, b = x[..., : hd // 2], x[..., hd // 2:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)

    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    x = W["token_embd.weight"][input_ids] * np.sqrt(n_embd)
    for layer in range(n_layer):
        p = f"blk.{layer}."
        seen = (j <= i) & ((i - j < n_swa) if layer % 2 == 0 else True)
        mask = np.where(seen, 0.0, -np.inf)
        h = rms(x, W[p + "attn_norm.weight"])
        q = rope((h @ W[p + "attn_q.weight"].T).reshape(T, n_head, hd)) * q_scale
        k = rope((h @ W[p + "attn_k.weight"].T).reshape(T, n_kv, hd))
        v = (h @ W[p + "attn_v.weight"].T).reshape(T, n_kv, hd)
        k, v = np.repeat(k, n_head // n_kv, axis=1), np.repeat(v, n_head // n_kv, axis=1)
        att = np.tanh(np.einsum("thd,shd->hts", q, k) / attn_cap) * attn_cap + mask
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", att, v).reshape(T, n_head * hd)
        x = x + rms(o @ W[p + "attn_output.weight"].T, W[p + "post_attention_norm.weight"])
        h = rms(x, W[p + "ffn_norm.weight"])
        ffn = (gelu(h @ W[p + "ffn_gate.weight"].T) * (h @ W[p + "ffn_up.weight"].T)) @ W[p + "ffn_down.weight"].T
        x = x + rms(ffn, W[p + "post_ffw_norm.weight"])
    logits = rms(x, W["output_norm.weight"]) @ W.get("output.weight", W["token_embd.weight"]).T
    return np.tanh(logits / final_cap) * final_cap


# --------------------------------------------------------------------------- output

def fix_config_json(model_dir: Path, dtype: str) -> None:
    """Add the pre-5.0 keys (torch_dtype, rope_theta, rope_scaling) next to the
    transformers 5 ones (dtype, rope_parameters), so the config reads like
    checkpoints from either era.  transformers accepts both."""
    p = model_dir / "config.json"
    cfg = json.loads(p.read_text())
    cfg["dtype"] = dtype
    cfg["torch_dtype"] = dtype
    rp = cfg.get("rope_parameters")
    if rp is not None:
        cfg["rope_theta"] = rp["rope_theta"]
        if rp.get("rope_type", "default") != "default":
            cfg["rope_scaling"] = {k: v for k, v in rp.items() if k != "rope_theta"}
    cfg = dict(sorted(cfg.items()))
    p.write_text(json.dumps(cfg, indent=2) + "\n")


def save_hf(model, out_dir: Path, dtype: torch.dtype = torch.float32, max_shard_size=None) -> None:
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    m = model
    if dtype != torch.float32:
        m = build_model_like(model)
        m.load_state_dict({k: v.to(dtype) for k, v in model.state_dict().items()})
        m.to(dtype)
    kwargs = dict(safe_serialization=True)
    if max_shard_size is not None:
        kwargs["max_shard_size"] = max_shard_size
    try:
        m.save_pretrained(out_dir, **kwargs)
    except TypeError:  # newer transformers always writes safetensors
        kwargs.pop("safe_serialization")
        m.save_pretrained(out_dir, **kwargs)
    (out_dir / "generation_config.json").unlink(missing_ok=True)
    fix_config_json(out_dir, {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype])


def build_model_like(model):
    m = type(model)(model.config)
    m.set_attn_implementation("eager")
    return m


def save_golden(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    clean = {}
    for k, v in tensors.items():
        v = v.detach().contiguous()
        assert v.dtype in (torch.float32, torch.int64), (k, v.dtype)
        clean[k] = v
    save_file(clean, str(path), metadata={"format": "pt"})


@torch.no_grad()
def reload_check(model_dir: Path, golden: dict, name: str) -> float:
    """from_pretrained(dir) in fp32 must reproduce logits_full bit for bit."""
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    m.eval()
    ids = golden["input_ids"]
    logits = m(ids, attention_mask=torch.ones_like(ids), use_cache=False).logits.float()
    diff = float((logits - golden["logits_full"]).abs().max())
    assert diff == 0.0, f"{name}: reloaded model differs from golden by {diff}"
    return diff


# --------------------------------------------------------------------------- main

def process_family(name: str, out: Path, input_ids, batch_ids, manifest: dict) -> None:
    cfg_cls, model_cls, kwargs, base_seed, gguf_types = SPECS[name]
    is_llama = name == "llama"
    for attempt in range(MAX_SEED_TRIES):
        seed = base_seed + attempt
        model = build_model(name, seed)
        golden, stats = compute_golden(model, input_ids, batch_ids)
        report = {"fp32": stats}
        ok = acceptable(stats)
        state = hf_state(model)
        variants = {}
        if ok and is_llama:
            bf16_state = {k: v.to(torch.bfloat16).float() for k, v in state.items()}
            bf16_model = clone_with_state(name, seed, bf16_state)
            variants["bf16"] = compute_golden(bf16_model, input_ids, batch_ids)
            report["bf16"] = variants["bf16"][1]
            ok = acceptable(report["bf16"])
        quant = {}
        if ok:
            tmp = out / f".tmp-{name}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            model.config.architectures = [model_cls.__name__]
            for gt in gguf_types:
                path = tmp / f"model-{gt}.gguf"
                write_gguf(path, model.config, state, gt, f"corolla-tiny-{name}")
                if gt == "f32":
                    continue
                qstate, _ = read_gguf(path, model.config)
                qmodel = clone_with_state(name, seed, qstate)
                quant[gt] = compute_quant_golden(qmodel, input_ids)
                report[gt] = quant[gt][1]
                if not acceptable(report[gt]):
                    ok = False
                    break
        why = [f"{k}: {reason(v)}" for k, v in report.items() if not acceptable(v)]
        summary = ", ".join(f"{k}: gap {v['min_greedy_gap']:.4f}{' EOS' if v['greedy_has_eos'] else ''}"
                            for k, v in report.items())
        log(f"[{name}] seed {seed}: {summary} -> {'ok' if ok else 'retry (' + '; '.join(why) + ')'}")
        if ok:
            break
    else:
        raise SystemExit(f"{name}: no acceptable seed in {MAX_SEED_TRIES} tries")

    # ---- write the HF checkpoint(s) and goldens
    model_dir = out / name
    save_hf(model, model_dir)
    save_golden(model_dir / "golden.safetensors", golden)
    reload_check(model_dir, golden, name)
    files = {name: sorted(p.name for p in model_dir.iterdir())}

    tmp = out / f".tmp-{name}"
    for gt in gguf_types:
        src = tmp / f"model-{gt}.gguf"
        dst = model_dir / src.name
        shutil.move(str(src), str(dst))
        qstate, reader = read_gguf(dst, model.config)
        check_gguf_metadata(reader, model.config, gt)
        if gt == "f32":
            for k, v in state.items():  # exact round trip, permutation undone (Gemma's norms: 1 added, taken off)
                if model.config.model_type == "gemma2" and k.endswith("norm.weight"):
                    v = (v.float() + 1) - 1
                assert torch.equal(qstate[k], v.float()), f"{dst.name}: {k} differs"
        else:
            if gt == "f16":  # 2-D weights rounded to half, norms and biases exact
                for k, v in state.items():
                    want = v.half().float() if v.ndim == 2 else v.float()
                    if model.config.model_type == "gemma2" and k.endswith("norm.weight"):
                        want = (want + 1) - 1
                    assert torch.equal(qstate[k], want), f"{dst.name}: {k} differs"
            save_golden(model_dir / f"golden-{gt}.safetensors", quant[gt][0])
            report[gt]["logits_vs_fp32"] = float((quant[gt][0]["logits_full"] - golden["logits_full"]).abs().max())
        # the file, read with llama.cpp's semantics, must reproduce its golden logits
        want = golden if gt == "f32" else quant[gt][0]
        ref = gguf_reference_logits(dst, input_ids[0].numpy())
        diff = float(np.abs(ref - want["logits_full"][0].double().numpy()).max())
        assert diff < 1e-4, f"{dst.name}: llama.cpp-style numpy forward differs from golden by {diff}"
        report["fp32" if gt == "f32" else gt]["gguf_numpy_forward_vs_golden"] = diff
    shutil.rmtree(tmp, ignore_errors=True)
    files[name] = sorted(p.name for p in model_dir.iterdir())

    if is_llama:
        # same weights, sharded
        sdir = out / "llama-sharded"
        save_hf(model, sdir, max_shard_size="300KB")
        shards = sorted(sdir.glob("model-*.safetensors"))
        assert 2 <= len(shards) <= 3 and (sdir / "model.safetensors.index.json").exists(), shards
        save_golden(sdir / "golden.safetensors", golden)
        reload_check(sdir, golden, "llama-sharded")
        files["llama-sharded"] = sorted(p.name for p in sdir.iterdir())

        # same weights rounded to bf16
        bdir = out / "llama-bf16"
        save_hf(model, bdir, dtype=torch.bfloat16)
        from safetensors import safe_open
        with safe_open(str(bdir / "model.safetensors"), "pt") as f:
            for k in f.keys():
                assert f.get_tensor(k).dtype == torch.bfloat16, k
        bgold = variants["bf16"][0]
        save_golden(bdir / "golden.safetensors", bgold)
        reload_check(bdir, bgold, "llama-bf16")
        files["llama-bf16"] = sorted(p.name for p in bdir.iterdir())
        report["bf16"]["logits_vs_fp32"] = float((bgold["logits_full"] - golden["logits_full"]).abs().max())

    manifest["models"][name] = dict(seed=seed, tries=attempt + 1, checks=report, files=files,
                                    versions=library_versions())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("tests/data/models"))
    ap.add_argument("--only", nargs="*", choices=list(SPECS), help="build only these families")
    args = ap.parse_args(argv)

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    args.out.mkdir(parents=True, exist_ok=True)

    input_ids, batch_ids = make_prompts()
    log(f"input_ids: {input_ids.tolist()[0]}")
    log(f"batch row 1: {batch_ids.tolist()[1]}")

    manifest_path = args.out / "manifest.json"
    manifest = {"models": {}}
    if args.only and manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
    manifest.update(
        generator="tools/make_golden.py",
        min_gap_required=MIN_GAP,
        steps_tolerance=STEPS_TOL,
    )
    for name in args.only or SPECS:
        process_family(name, args.out, input_ids, batch_ids, manifest)

    manifest["models"] = dict(sorted(manifest["models"].items()))
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")

    log("\nsummary")
    for name, info in manifest["models"].items():
        for variant, st in info["checks"].items():
            extra = "".join(f" {k}={st[k]:.2e}" for k in
                            ("steps_vs_full", "offset_vs_full", "gap_vs_full", "logits_vs_fp32",
                             "gguf_numpy_forward_vs_golden") if k in st)
            log(f"  {name:12s} {variant:5s} seed={info['seed']} min_greedy_gap={st['min_greedy_gap']:.4f}{extra}")
    return 0


def library_versions() -> dict:
    """What a family's files were made with (each family records its own: --only rebuilds some)."""
    return dict(torch=torch.__version__, transformers=transformers.__version__,
                gguf=getattr(gguf, "__version__", None) or _dist_version("gguf"), numpy=np.__version__)


def _dist_version(pkg: str):
    try:
        from importlib.metadata import version
        return version(pkg)
    except Exception:
        return None


if __name__ == "__main__":
    sys.exit(main())
