#include "sim/synthetic_weights.hpp"

#include <stdexcept>

#include "sim/virtual_tensor.hpp"

namespace corolla::sim {
namespace {

const char* const kBlockTensors[] = {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                     "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                     "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                     "mlp.down_proj.weight"};

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
  if (suffix == "input_layernorm.weight" || suffix == "post_attention_layernorm.weight") out = {DType::f32, Shape{d}};
  else if (suffix == "self_attn.q_proj.weight") out = {weight_dtype_, Shape{q, d}};
  else if (suffix == "self_attn.k_proj.weight" || suffix == "self_attn.v_proj.weight") out = {weight_dtype_, Shape{kv, d}};
  else if (suffix == "self_attn.o_proj.weight") out = {weight_dtype_, Shape{d, q}};
  else if (suffix == "mlp.gate_proj.weight" || suffix == "mlp.up_proj.weight") out = {weight_dtype_, Shape{ff, d}};
  else if (suffix == "mlp.down_proj.weight") out = {weight_dtype_, Shape{d, ff}};
  else return false;
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

std::vector<std::string> SyntheticWeights::names() const {
  std::vector<std::string> out = {"model.embed_tokens.weight", "model.norm.weight"};
  if (!config_.tie_word_embeddings) out.push_back("lm_head.weight");
  for (int64_t i = 0; i < config_.num_layers; ++i)
    for (const char* suffix : kBlockTensors) out.push_back(block_tensor_name(i, suffix));
  return out;
}

}  // namespace corolla::sim
