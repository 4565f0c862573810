#include "sim/synthetic_weights.hpp"

#include <stdexcept>

#include "sim/virtual_tensor.hpp"

namespace corolla::sim {
namespace {

const char* const kAttentionTensors[] = {"input_layernorm.weight",  "self_attn.q_proj.weight",
                                         "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                         "self_attn.o_proj.weight", "post_attention_layernorm.weight"};
const char* const kMlpTensors[] = {"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};

// A Mixtral block's MLP: the router and each expert's w1 (gate), w3 (up) and w2 (down), as its checkpoints name them.
std::vector<std::string> moe_tensors(int64_t experts) {
  std::vector<std::string> out = {"block_sparse_moe.gate.weight"};
  for (int64_t e = 0; e < experts; ++e)
    for (const char* w : {"w1", "w2", "w3"})
      out.push_back("block_sparse_moe.experts." + std::to_string(e) + "." + w + ".weight");
  return out;
}

}  // namespace

SyntheticWeights::SyntheticWeights(ModelConfig config, DType weight_dtype, std::string name)
    : config_(std::move(config)), weight_dtype_(weight_dtype), name_(std::move(name)) {
  config_.validate(name_);
}

bool SyntheticWeights::lookup(const std::string& name, TensorMeta& out) const {
  const auto& c = config_;
  const int64_t d = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t ff = c.intermediate_size;
  if (name == "model.embed_tokens.weight" || (name == "lm_head.weight" && !c.tie_word_embeddings)) {
    out = {weight_dtype_, Shape{c.vocab_size, d}};
    return true;
  }
  if (name == "model.norm.weight") {
    out = {DType::f32, Shape{d}};
    return true;
  }
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return false;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return false;
  int64_t block = -1;
  try {
    block = std::stoll(name.substr(prefix.size(), dot - prefix.size()));
  } catch (const std::exception&) {
    return false;
  }
  if (block < 0 || block >= c.num_layers) return false;
  const std::string suffix = name.substr(dot + 1);
  if (c.num_experts > 0 && suffix.rfind("mlp.", 0) == 0) return false;  // a mixture of experts has no dense MLP
  if (c.num_experts > 0 && suffix.rfind("block_sparse_moe.", 0) == 0) return lookup_expert(suffix, out);
  if (suffix == "input_layernorm.weight" || suffix == "post_attention_layernorm.weight")
    out = {DType::f32, Shape{d}};
  else if (suffix == "self_attn.q_proj.weight")
    out = {weight_dtype_, Shape{q, d}};
  else if (suffix == "self_attn.k_proj.weight" || suffix == "self_attn.v_proj.weight")
    out = {weight_dtype_, Shape{kv, d}};
  else if (suffix == "self_attn.o_proj.weight")
    out = {weight_dtype_, Shape{d, q}};
  else if (suffix == "mlp.gate_proj.weight" || suffix == "mlp.up_proj.weight")
    out = {weight_dtype_, Shape{ff, d}};
  else if (suffix == "mlp.down_proj.weight")
    out = {weight_dtype_, Shape{d, ff}};
  else
    return false;
  return true;
}

bool SyntheticWeights::has(const std::string& name) const {
  TensorMeta m{};
  return lookup(name, m);
}

WeightSource::TensorMeta SyntheticWeights::meta(const std::string& name) const {
  TensorMeta m{};
  if (!lookup(name, m)) throw std::runtime_error(name_ + ": tensor '" + name + "' is missing");
  return m;
}

Tensor SyntheticWeights::get(const std::string& name) const {
  const TensorMeta m = meta(name);
  Tensor t = virtual_tensor(m.dtype, m.shape);
  count(t);
  return t;
}

bool SyntheticWeights::lookup_expert(const std::string& suffix, TensorMeta& out) const {
  const auto& c = config_;
  const int64_t d = c.hidden_size, ff = c.intermediate_size;
  if (suffix == "block_sparse_moe.gate.weight") {
    out = {DType::f32, Shape{c.num_experts, d}};
    return true;
  }
  const std::string prefix = "block_sparse_moe.experts.";
  if (suffix.rfind(prefix, 0) != 0) return false;
  const size_t dot = suffix.find('.', prefix.size());
  if (dot == std::string::npos) return false;
  const auto expert = parse_block_number(std::string_view(suffix).substr(prefix.size(), dot - prefix.size()));
  if (!expert || *expert >= c.num_experts) return false;
  const std::string weight = suffix.substr(dot + 1);
  if (weight == "w1.weight" || weight == "w3.weight")
    out = {weight_dtype_, Shape{ff, d}};
  else if (weight == "w2.weight")
    out = {weight_dtype_, Shape{d, ff}};
  else
    return false;
  return true;
}

std::vector<std::string> SyntheticWeights::names() const {
  std::vector<std::string> out = {"model.embed_tokens.weight", "model.norm.weight"};
  if (!config_.tie_word_embeddings) out.push_back("lm_head.weight");
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    for (const char* suffix : kAttentionTensors) out.push_back(block_tensor_name(i, suffix));
    if (config_.num_experts > 0)
      for (const std::string& suffix : moe_tensors(config_.num_experts)) out.push_back(block_tensor_name(i, suffix));
    else
      for (const char* suffix : kMlpTensors) out.push_back(block_tensor_name(i, suffix));
  }
  return out;
}

}  // namespace corolla::sim
