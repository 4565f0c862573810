// The shape of a model, read from Hugging Face config.json or GGUF metadata.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace corolla {

class GgufFile;

// The largest vocabulary a model or tokenizer file may declare (real ones stay below 2^18): token ids and
// vocabulary sizes from files are checked against it before anything is sized by them.
constexpr int64_t kMaxVocabSize = int64_t{1} << 24;

struct RopeScaling {
  // "" (none), "linear", "llama3", "yarn", "longrope", or "dynamic" (NTK: the frequencies change only for sequences
  // longer than max_position_embeddings, which Corolla refuses, so within the context they are the unscaled ones).
  std::string type;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
  // yarn: the ramp between extrapolated and interpolated frequencies runs from beta_fast to beta_slow rotations
  // over original_max_position, its ends rounded to whole dimensions when `truncate`; cos and sin are scaled by
  // attention_factor (0: derived from factor, and from mscale / mscale_all_dim when both are given).
  double beta_fast = 32.0, beta_slow = 1.0, attention_factor = 0.0, mscale = 0.0, mscale_all_dim = 0.0;
  bool truncate = true;
  // longrope (Phi-3's, "su" in older configs): frequency i is divided by short_factor[i], or by long_factor[i] in a
  // forward whose last position is past original_max_position (the choice is made per forward, over all its
  // positions, as Hugging Face makes it); cos and sin are scaled by attention_factor (0: derived from factor, or
  // from max_position / original_max_position without one).
  std::vector<float> short_factor, long_factor;
};

struct ModelConfig {
  std::string arch;  // "bloom", "falcon", "gemma2", "llama", "mistral", "mixtral", "phi3", "qwen2", "qwen3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  // RoPE turns the first rotary_dim values of each query and key head (Phi-3's partial_rotary_factor, Phi-4-mini's
  // 0.75 of head_dim); the rest pass unrotated. 0: the whole head.
  int64_t rotary_dim = 0;
  int64_t max_position = 0;
  double norm_eps = 1e-5;  // of every norm, RMSNorm or LayerNorm
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  // Per-frequency divisors stored by GGUF files as the tensor rope_freqs.weight (Llama 3.1 scaling in llama.cpp).
  std::vector<float> rope_freq_factors;
  bool tie_word_embeddings = false;
  // Which projections have biases: Llama's attention_bias gives q/k/v/o theirs and mlp_bias gate/up/down theirs;
  // Qwen2 has q/k/v biases only; a GGUF file has the bias tensors it holds.
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  // q/k/v stored as one qkv_proj and gate/up as one gate_up_proj (Phi-3); the block uses row slices of them.
  bool fused_projections = false;
  // Each head's query and key pass an RMSNorm over head_dim before RoPE (Qwen3).
  bool qk_norm = false;
  // BLOOM: every norm is a LayerNorm with a bias (the final one too), the embeddings pass one of their own before
  // the first block, and positions enter as ALiBi biases on the attention scores instead of RoPE.
  bool layer_norm = false;
  bool embedding_norm = false;
  bool alibi = false;
  // Falcon: attention and the MLP both read the block's input and both add to it (parallel_attn), through one
  // shared LayerNorm or, with separate_mlp_norm, one each (ln_attn, ln_mlp); without parallel_attn the MLP reads
  // the stream after attention (post_attention_layernorm).
  bool parallel_attn = false;
  bool separate_mlp_norm = false;
  // Mixture of experts (Mixtral): the MLP is num_experts SwiGLU experts of intermediate_size each, and a router
  // that sends each token to experts_per_token of them (their outputs weighted by the router's renormalized
  // softmax); 0 = one dense MLP.
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  // The MLP's activation: "silu" (config.json hidden_act of the Llama family, the only one its block computes),
  // "gelu_tanh" (BLOOM's, fixed by its architecture; Falcon's when its activation names the tanh form; Gemma 2's
  // gelu_pytorch_tanh, gating its MLP as GeGLU) or "gelu" (exact, with erf: Falcon's default; Gemma 2's "gelu").
  std::string hidden_act = "silu";
  // Gemma 2: every RMSNorm multiplies by 1 + weight (its stored weights are offsets from 1), the embeddings are
  // scaled by √hidden_size (in f32, the hidden dtype), and attention's and the MLP's outputs each pass an RMSNorm
  // before their residual add (post_attention_layernorm, post_feedforward_layernorm; the MLP's input norm is
  // pre_feedforward_layernorm).
  bool norm_plus_one = false;
  bool scale_embeddings = false;
  bool post_norms = false;
  // Attention scores are scaled by query_pre_attn_scalar^-0.5 (Gemma 2) instead of head_dim^-0.5; 0: head_dim.
  double query_pre_attn_scalar = 0;
  // Soft caps, cap · tanh(x / cap), 0 for none: of attention's scores before the mask (Gemma 2's
  // attn_logit_softcapping) and of the LM head's logits (final_logit_softcapping).
  double attn_softcap = 0;
  double final_softcap = 0;
  // Sliding-window attention: on the layers marked in window_layers (num_layers entries) a query sees only the last
  // sliding_window tokens, itself included; 0 = every layer sees the whole history.
  int64_t sliding_window = 0;
  std::vector<bool> window_layers;
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;

  // The attention window of block `layer` (0: none).
  int64_t attention_window(int64_t layer) const;
  // The values of each head RoPE turns: rotary_dim, or head_dim where that is 0.
  int64_t rope_dim() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  // RoPE inverse frequencies (rope_dim() / 2 values), with the configured scaling applied, for a forward whose
  // positions end below `length` (longrope's choice of factors; the other scalings do not depend on it).
  std::vector<float> rope_inv_freq(int64_t length = 0) const;
  // Whether rope_inv_freq() depends on the forward's length (longrope).
  bool rope_depends_on_length() const { return rope_scaling.type == "longrope"; }
  // The factor Hugging Face scales RoPE's cos and sin by (yarn's attention factor; 1 otherwise): scores of rotated
  // queries and keys scale by its square.
  double rope_attention_factor() const;
  // Why blocks [first, last) are not a span of this model (0 <= first < last <= num_layers), or nullopt when they
  // are: the one rule that serving, block loading and `corolla config-check` apply.
  std::optional<std::string> span_problem(int64_t first, int64_t last) const;
  // Throws std::runtime_error naming `source` when a field is missing or inconsistent.
  void validate(const std::string& source) const;

  static ModelConfig from_hf_json(const std::string& path);
  // The same from the text of a config.json; `source` names it in errors.
  static ModelConfig from_hf_json_text(std::string_view text, const std::string& source);
  static ModelConfig from_gguf(const GgufFile& gguf);

 private:
  void yarn_frequencies(std::vector<float>& inv) const;
};

}  // namespace corolla
