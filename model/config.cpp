#include "model/config.hpp"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <stdexcept>

#include "model/weights/gguf_file.hpp"

namespace corolla {
namespace {

const std::vector<std::string> kArchitectures = {"llama", "mistral", "qwen2"};

bool supported(const std::string& arch) {
  for (const auto& a : kArchitectures)
    if (a == arch) return true;
  return false;
}

}  // namespace

std::vector<float> ModelConfig::rope_inv_freq() const {
  const int64_t half = head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    // As Hugging Face: 1 / theta^(2i/d) computed in f32 from an int64 arange.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv[static_cast<size_t>(i)] = 1.0f / std::pow(static_cast<float>(rope_theta), exponent);
  }
  if (rope_scaling.type == "linear") {
    for (auto& f : inv) f = static_cast<float>(f / rope_scaling.factor);
  } else if (rope_scaling.type == "llama3") {
    // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, the band between interpolated.
    const double old_ctx = static_cast<double>(rope_scaling.original_max_position);
    const double low_wavelen = old_ctx / rope_scaling.low_freq_factor;
    const double high_wavelen = old_ctx / rope_scaling.high_freq_factor;
    for (auto& f : inv) {
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / rope_scaling.factor);
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_ctx / wavelen - rope_scaling.low_freq_factor) /
                              (rope_scaling.high_freq_factor - rope_scaling.low_freq_factor);
        f = static_cast<float>((1 - smooth) * f / rope_scaling.factor + smooth * f);
      }
    }
  }
  if (!rope_freq_factors.empty())
    for (int64_t i = 0; i < half; ++i) inv[static_cast<size_t>(i)] /= rope_freq_factors[static_cast<size_t>(i)];
  return inv;
}

void ModelConfig::validate(const std::string& source) const {
  auto fail = [&](const std::string& msg) { throw std::runtime_error(source + ": " + msg); };
  if (!supported(arch)) fail("unsupported architecture '" + arch + "' (supported: llama, mistral, qwen2)");
  if (vocab_size <= 0 || hidden_size <= 0 || intermediate_size <= 0 || num_layers <= 0 || num_heads <= 0)
    fail("vocab_size, hidden_size, intermediate_size, num_hidden_layers and num_attention_heads must be positive");
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0)
    fail("num_key_value_heads " + std::to_string(num_kv_heads) + " does not divide num_attention_heads " +
         std::to_string(num_heads));
  if (head_dim <= 0 || head_dim % 2 != 0) fail("head_dim " + std::to_string(head_dim) + " must be even");
  if (!rope_freq_factors.empty() && static_cast<int64_t>(rope_freq_factors.size()) != head_dim / 2)
    fail("rope_freqs has " + std::to_string(rope_freq_factors.size()) + " factors, head_dim/2 is " +
         std::to_string(head_dim / 2));
  if (!rope_scaling.type.empty() && rope_scaling.type != "linear" && rope_scaling.type != "llama3")
    fail("unsupported rope_scaling type '" + rope_scaling.type + "' (supported: linear, llama3)");
}

ModelConfig ModelConfig::from_hf_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open model config");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not valid JSON: " + e.what());
  }
  ModelConfig c;
  try {
    c.arch = j.at("model_type").get<std::string>();
    c.vocab_size = j.at("vocab_size").get<int64_t>();
    c.hidden_size = j.at("hidden_size").get<int64_t>();
    c.intermediate_size = j.at("intermediate_size").get<int64_t>();
    c.num_layers = j.at("num_hidden_layers").get<int64_t>();
    c.num_heads = j.at("num_attention_heads").get<int64_t>();
    c.num_kv_heads = j.value("num_key_value_heads", c.num_heads);
    c.head_dim = c.hidden_size / c.num_heads;
    if (j.contains("head_dim") && !j["head_dim"].is_null()) c.head_dim = j["head_dim"].get<int64_t>();
    c.max_position = j.value("max_position_embeddings", int64_t{2048});
    c.rms_norm_eps = j.value("rms_norm_eps", 1e-5);
    c.rope_theta = j.value("rope_theta", 10000.0);
    c.tie_word_embeddings = j.value("tie_word_embeddings", false);
    c.attention_bias = c.arch == "qwen2" || j.value("attention_bias", false);
    // Older configs say rope_scaling; newer ones rope_parameters (which may also carry rope_theta).
    const nlohmann::json* rope = nullptr;
    if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) rope = &j["rope_scaling"];
    else if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) rope = &j["rope_parameters"];
    if (rope) {
      const auto& r = *rope;
      if (!j.contains("rope_theta") && r.contains("rope_theta")) c.rope_theta = r["rope_theta"].get<double>();
      c.rope_scaling.type = r.contains("rope_type") ? r["rope_type"].get<std::string>() : r.value("type", "");
      if (c.rope_scaling.type == "default") c.rope_scaling.type.clear();
      c.rope_scaling.factor = r.value("factor", 1.0);
      c.rope_scaling.low_freq_factor = r.value("low_freq_factor", 1.0);
      c.rope_scaling.high_freq_factor = r.value("high_freq_factor", 4.0);
      c.rope_scaling.original_max_position = r.value("original_max_position_embeddings", int64_t{8192});
    }
    if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer())
      c.bos_token_id = j["bos_token_id"].get<int32_t>();
    if (j.contains("eos_token_id")) {
      const auto& e = j["eos_token_id"];
      if (e.is_number_integer()) c.eos_token_ids.push_back(e.get<int32_t>());
      if (e.is_array())
        for (const auto& v : e) c.eos_token_ids.push_back(v.get<int32_t>());
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  c.validate(path);
  return c;
}

ModelConfig ModelConfig::from_gguf(const GgufFile& g) {
  ModelConfig c;
  const std::string arch = g.get_string("general.architecture");
  c.arch = arch;
  auto key = [&](const std::string& k) { return arch + "." + k; };
  if (!supported(arch))
    throw std::runtime_error(g.path() + ": unsupported architecture '" + arch + "' (supported: llama, mistral, qwen2)");
  c.hidden_size = g.get_int(key("embedding_length"));
  c.intermediate_size = g.get_int(key("feed_forward_length"));
  c.num_layers = g.get_int(key("block_count"));
  c.num_heads = g.get_int(key("attention.head_count"));
  c.num_kv_heads = g.find_int(key("attention.head_count_kv")).value_or(c.num_heads);
  c.head_dim = g.find_int(key("attention.key_length")).value_or(c.hidden_size / c.num_heads);
  c.max_position = g.find_int(key("context_length")).value_or(2048);
  c.rms_norm_eps = g.get_float(key("attention.layer_norm_rms_epsilon"));
  c.rope_theta = g.find_float(key("rope.freq_base")).value_or(10000.0);
  if (auto t = g.find_string(key("rope.scaling.type")); t && *t == "linear") {
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = g.get_float(key("rope.scaling.factor"));
  }
  c.attention_bias = arch == "qwen2";
  if (const GgufTensorInfo* f = g.find_tensor("rope_freqs.weight")) {
    Tensor factors = g.tensor(*f).to_f32();
    c.rope_freq_factors.assign(factors.data_as<const float>(), factors.data_as<const float>() + factors.numel());
  }
  const GgufTensorInfo* embd = g.find_tensor("token_embd.weight");
  if (!embd) throw std::runtime_error(g.path() + ": tensor 'token_embd.weight' is missing");
  c.vocab_size = g.find_int(key("vocab_size")).value_or(embd->shape[0]);
  c.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;
  if (auto b = g.find_int("tokenizer.ggml.bos_token_id")) c.bos_token_id = static_cast<int32_t>(*b);
  if (auto e = g.find_int("tokenizer.ggml.eos_token_id")) c.eos_token_ids.push_back(static_cast<int32_t>(*e));
  if (auto e = g.find_int("tokenizer.ggml.eot_token_id"); e && (c.eos_token_ids.empty() || *e != c.eos_token_ids[0]))
    c.eos_token_ids.push_back(static_cast<int32_t>(*e));
  c.validate(g.path());
  return c;
}

}  // namespace corolla
