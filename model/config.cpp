#include "model/config.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>
#include <stdexcept>

#include "model/bounded_file.hpp"
#include "model/weights/gguf_file.hpp"

namespace corolla {
namespace {

const std::vector<std::string> kArchitectures = {"bloom",   "falcon", "gemma2", "llama", "mistral",
                                                 "mixtral", "phi3",   "qwen2",  "qwen3"};
// The general.architecture values of the GGUF files whose tensors the loader maps (llama.cpp writes Mistral and
// Mixtral as "llama"; its Falcon files hold the parallel layouts only).
const std::vector<std::string> kGgufArchitectures = {"bloom", "falcon", "gemma2", "llama", "phi3", "qwen2", "qwen3"};

bool supported(const std::string& arch, const std::vector<std::string>& list = kArchitectures) {
  for (const auto& a : list)
    if (a == arch) return true;
  return false;
}

std::string unsupported_architecture(const std::string& arch,
                                     const std::vector<std::string>& supported = kArchitectures) {
  std::string list;
  for (const auto& a : supported) list += (list.empty() ? "" : ", ") + a;
  return "unsupported architecture '" + arch + "' (supported: " + list + ")";
}

}  // namespace

int64_t ModelConfig::attention_window(int64_t layer) const {
  if (sliding_window <= 0 || layer < 0 || layer >= static_cast<int64_t>(window_layers.size())) return 0;
  return window_layers[static_cast<size_t>(layer)] ? sliding_window : 0;
}

std::vector<float> ModelConfig::rope_inv_freq(int64_t length) const {
  const int64_t dim = rope_dim(), half = dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  // longrope divides theta^(2i/d) by its factor before inverting, in f32 as Hugging Face does.
  const std::vector<float>* divisors = nullptr;
  if (rope_scaling.type == "longrope")
    divisors = length > rope_scaling.original_max_position ? &rope_scaling.long_factor : &rope_scaling.short_factor;
  for (int64_t i = 0; i < half; ++i) {
    // As Hugging Face: 1 / theta^(2i/d) computed in f32 from an int64 arange (d: the rotated part of a head).
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    const float wavelength = std::pow(static_cast<float>(rope_theta), exponent);
    inv[static_cast<size_t>(i)] =
        1.0f / (divisors && static_cast<size_t>(i) < divisors->size() ? (*divisors)[static_cast<size_t>(i)] * wavelength
                                                                      : wavelength);
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
  } else if (rope_scaling.type == "yarn") {
    yarn_frequencies(inv);
  }
  if (!rope_freq_factors.empty())
    for (int64_t i = 0; i < half; ++i) inv[static_cast<size_t>(i)] /= rope_freq_factors[static_cast<size_t>(i)];
  return inv;
}

namespace {

// YaRN's mscale (its paper's eq. 21) as Hugging Face computes it.
double yarn_mscale(double scale, double mscale = 1.0) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

}  // namespace

// YaRN as Hugging Face computes it (f32 where it is f32 there): each frequency blends the unscaled one
// (extrapolation) with it divided by `factor` (interpolation), by a ramp over the dimensions whose wavelengths lie
// between beta_fast and beta_slow rotations of the original context.
void ModelConfig::yarn_frequencies(std::vector<float>& inv) const {
  const RopeScaling& r = rope_scaling;
  const int64_t dim = rope_dim(), half = dim / 2;
  const double base = rope_theta, context = static_cast<double>(r.original_max_position);
  auto correction_dim = [&](double rotations) {
    return static_cast<double>(dim) * std::log(context / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
  };
  double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
  if (r.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // no division by zero
  const float lo = static_cast<float>(low), span = static_cast<float>(high - low);
  const float factor = static_cast<float>(r.factor);
  for (int64_t i = 0; i < half; ++i) {
    const float pos_freq = std::pow(static_cast<float>(base), static_cast<float>(2 * i) / static_cast<float>(dim));
    const float extrapolated = 1.0f / pos_freq, interpolated = 1.0f / (factor * pos_freq);
    const float ramp = std::clamp((static_cast<float>(i) - lo) / span, 0.0f, 1.0f);
    const float keep = 1.0f - ramp;  // the share of the extrapolated frequency
    inv[static_cast<size_t>(i)] = interpolated * (1.0f - keep) + extrapolated * keep;
  }
}

double ModelConfig::rope_attention_factor() const {
  const RopeScaling& r = rope_scaling;
  if (r.type == "longrope") {
    if (r.attention_factor > 0) return r.attention_factor;
    const double context = static_cast<double>(r.original_max_position);
    const double factor = r.factor > 0 ? r.factor : static_cast<double>(max_position) / context;
    return factor <= 1 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(context));
  }
  if (r.type != "yarn") return 1.0;
  if (r.attention_factor > 0) return r.attention_factor;
  if (r.mscale != 0 && r.mscale_all_dim != 0)
    return yarn_mscale(r.factor, r.mscale) / yarn_mscale(r.factor, r.mscale_all_dim);
  return yarn_mscale(r.factor);
}

// Bounds on a model's sizes, far above any real model, so that every size derived from them (vocab × hidden
// elements of the embeddings, max_position × kv heads × head_dim of a KV cache, their bytes) fits in int64.
constexpr int64_t kMaxHidden = int64_t{1} << 16;
constexpr int64_t kMaxIntermediate = int64_t{1} << 18;
constexpr int64_t kMaxLayers = int64_t{1} << 12;
constexpr int64_t kMaxHeads = int64_t{1} << 12;
constexpr int64_t kMaxHeadDim = int64_t{1} << 12;
constexpr int64_t kMaxPositions = int64_t{1} << 24;
constexpr int64_t kMaxExperts = 1024;

void ModelConfig::validate(const std::string& source) const {
  auto fail = [&](const std::string& msg) { throw std::runtime_error(source + ": " + msg); };
  auto count = [&](const char* key, int64_t v, int64_t max) {
    if (v <= 0 || v > max) fail(std::string(key) + " " + std::to_string(v) + " must be in 1.." + std::to_string(max));
  };
  auto positive_finite = [&](const std::string& key, double v) {
    if (!std::isfinite(v) || v <= 0) fail(key + " " + std::to_string(v) + " must be a finite number above 0");
  };
  if (!supported(arch)) fail(unsupported_architecture(arch));
  count("vocab_size", vocab_size, kMaxVocabSize);
  count("hidden_size", hidden_size, kMaxHidden);
  count("intermediate_size", intermediate_size, kMaxIntermediate);
  count("num_hidden_layers", num_layers, kMaxLayers);
  count("num_attention_heads", num_heads, kMaxHeads);
  count("num_key_value_heads", num_kv_heads, kMaxHeads);
  count("head_dim", head_dim, kMaxHeadDim);
  count("max_position_embeddings", max_position, kMaxPositions);
  if (hidden_size % num_heads != 0)
    fail("hidden_size " + std::to_string(hidden_size) + " is not divisible by num_attention_heads " +
         std::to_string(num_heads));
  if (num_heads % num_kv_heads != 0)
    fail("num_key_value_heads " + std::to_string(num_kv_heads) + " does not divide num_attention_heads " +
         std::to_string(num_heads));
  if (head_dim % 2 != 0) fail("head_dim " + std::to_string(head_dim) + " must be even");
  if (!(norm_eps > 0 && norm_eps < 1)) fail("rms_norm_eps " + std::to_string(norm_eps) + " must be in (0, 1)");
  positive_finite("rope_theta", rope_theta);
  if (rotary_dim != 0 && (rotary_dim < 2 || rotary_dim > head_dim || rotary_dim % 2 != 0))
    fail("RoPE over " + std::to_string(rotary_dim) + " of each head's " + std::to_string(head_dim) +
         " values (partial_rotary_factor): it must be an even count from 2 to head_dim");
  if (!rope_freq_factors.empty() && static_cast<int64_t>(rope_freq_factors.size()) != rope_dim() / 2)
    fail("rope_freqs has " + std::to_string(rope_freq_factors.size()) + " factors, rotary dim/2 is " +
         std::to_string(rope_dim() / 2));
  for (float f : rope_freq_factors) positive_finite("a rope_freqs factor", f);
  if (arch == "mixtral") {
    count("num_local_experts", num_experts, kMaxExperts);
    count("num_experts_per_tok", experts_per_token, num_experts);
  } else if (num_experts != 0 || experts_per_token != 0) {
    fail("experts are given for " + arch + ", which has one dense MLP");
  }
  // Falcon's and Gemma 2's configs name their GELU (exact or tanh); BLOOM's is fixed; the rest of the Llama family
  // computes SiLU only.
  const std::vector<std::string> activations = arch == "bloom" ? std::vector<std::string>{"gelu_tanh"}
                                               : arch == "falcon" || arch == "gemma2"
                                                   ? std::vector<std::string>{"gelu", "gelu_tanh"}
                                                   : std::vector<std::string>{"silu"};
  if (!supported(hidden_act, activations))
    fail("hidden_act '" + hidden_act + "' is not supported for " + arch +
         " (supported: " + (activations.size() == 1 ? activations[0] : activations[0] + ", " + activations[1]) + ")");
  for (const auto& [key, v] :
       {std::pair{"query_pre_attn_scalar", query_pre_attn_scalar}, std::pair{"attn_logit_softcapping", attn_softcap},
        std::pair{"final_logit_softcapping", final_softcap}})
    if (!std::isfinite(v) || v < 0)
      fail(std::string(key) + " " + std::to_string(v) + " must be a finite number above 0");
  if (sliding_window < 0 || sliding_window > kMaxPositions)
    fail("sliding_window " + std::to_string(sliding_window) + " must be in 0.." + std::to_string(kMaxPositions));
  if (sliding_window > 0 && static_cast<int64_t>(window_layers.size()) != num_layers)
    fail("the sliding window is given for " + std::to_string(window_layers.size()) + " layers, the model has " +
         std::to_string(num_layers));
  if (!rope_scaling.type.empty() && rope_scaling.type != "linear" && rope_scaling.type != "llama3" &&
      rope_scaling.type != "yarn" && rope_scaling.type != "dynamic" && rope_scaling.type != "longrope")
    fail("unsupported rope_scaling type '" + rope_scaling.type +
         "' (supported: linear, llama3, yarn, dynamic, longrope)");
  if (!rope_scaling.type.empty() && rope_scaling.type != "longrope")
    positive_finite("rope_scaling factor", rope_scaling.factor);
  if (rope_scaling.type == "longrope") {
    count("rope_scaling original_max_position_embeddings", rope_scaling.original_max_position, kMaxPositions);
    for (const auto& [name, factors] :
         {std::pair{"short_factor", &rope_scaling.short_factor}, std::pair{"long_factor", &rope_scaling.long_factor}}) {
      if (static_cast<int64_t>(factors->size()) != rope_dim() / 2)
        fail(std::string("rope_scaling ") + name + " has " + std::to_string(factors->size()) +
             " values; longrope needs one per frequency, rotary dim / 2 = " + std::to_string(rope_dim() / 2));
      for (float v : *factors)
        if (!std::isfinite(v) || !(v > 0)) fail(std::string("rope_scaling ") + name + " values must be positive");
    }
    if (!std::isfinite(rope_scaling.factor) || rope_scaling.factor < 0)
      fail("rope_scaling factor must be finite and not negative");
    if (!std::isfinite(rope_scaling.attention_factor) || rope_scaling.attention_factor < 0)
      fail("rope_scaling attention_factor must be finite and not negative");
    if (!std::isfinite(rope_attention_factor()) || !(rope_attention_factor() > 0))
      fail("the longrope attention factor is not a positive number");
  }
  if (rope_scaling.type == "llama3") {
    positive_finite("rope_scaling low_freq_factor", rope_scaling.low_freq_factor);
    positive_finite("rope_scaling high_freq_factor", rope_scaling.high_freq_factor);
    // The band between the two wavelengths is interpolated over (high - low).
    if (!(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor))
      fail("rope_scaling high_freq_factor must be above low_freq_factor");
    count("rope_scaling original_max_position_embeddings", rope_scaling.original_max_position, kMaxPositions);
  }
  if (rope_scaling.type == "yarn") {
    count("rope_scaling original_max_position_embeddings", rope_scaling.original_max_position, kMaxPositions);
    positive_finite("rope_scaling beta_fast", rope_scaling.beta_fast);
    positive_finite("rope_scaling beta_slow", rope_scaling.beta_slow);
    for (const auto& [name, v] :
         {std::pair{"attention_factor", rope_scaling.attention_factor}, std::pair{"mscale", rope_scaling.mscale},
          std::pair{"mscale_all_dim", rope_scaling.mscale_all_dim}})
      if (!std::isfinite(v) || v < 0) fail(std::string("rope_scaling ") + name + " must be finite and not negative");
    if (!(rope_theta > 1)) fail("yarn needs rope_theta above 1");
    if (!std::isfinite(rope_attention_factor()) || !(rope_attention_factor() > 0))
      fail("the yarn attention factor is not a positive number");
  }
  // The frequencies themselves, as every RoPE kernel will use them (extreme but finite factors can still overflow).
  for (int64_t length : {int64_t{0}, max_position})  // longrope's short and long sets
    for (float f : rope_inv_freq(length))
      if (!std::isfinite(f))
        fail("the RoPE parameters (rope_theta, rope_scaling, rope_freqs) give a non-finite frequency");
  if (bos_token_id < -1 || bos_token_id >= vocab_size)
    fail("bos_token_id " + std::to_string(bos_token_id) + " is outside the vocabulary of " +
         std::to_string(vocab_size));
  for (int32_t e : eos_token_ids)
    if (e < 0 || e >= vocab_size)
      fail("eos_token_id " + std::to_string(e) + " is outside the vocabulary of " + std::to_string(vocab_size));
}

std::optional<std::string> ModelConfig::span_problem(int64_t first, int64_t last) const {
  if (first >= 0 && first < last && last <= num_layers) return std::nullopt;
  return "blocks " + std::to_string(first) + ":" + std::to_string(last) + " are not a span of the model's " +
         std::to_string(num_layers) + " blocks";
}

namespace {

// A token id read from a file, refused before it is narrowed to int32 (validate() checks it against the vocabulary).
int32_t token_id(int64_t v, const char* key, const std::string& source) {
  if (v < -1 || v > std::numeric_limits<int32_t>::max())
    throw std::runtime_error(source + ": " + key + " " + std::to_string(v) + " is not a token id");
  return static_cast<int32_t>(v);
}

// Typed fields of a config.json object; a wrong type names the key. Absent and null fields take the fallback.
class JsonFields {
 public:
  JsonFields(const nlohmann::json& j, const std::string& source) : j_(j), source_(source) {}

  bool present(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  int64_t integer(const char* key) const {
    if (!present(key)) fail(key, "is missing");
    return integer_or(key, 0);
  }
  int64_t integer_or(const char* key, int64_t fallback) const {
    if (!present(key)) return fallback;
    const auto& v = j_.at(key);
    if (!v.is_number_integer()) fail(key, "must be an integer, got " + v.dump());
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(key, "is out of range: " + v.dump());
    return v.get<int64_t>();
  }
  double number_or(const char* key, double fallback) const {
    if (!present(key)) return fallback;
    const auto& v = j_.at(key);
    if (!v.is_number()) fail(key, "must be a number, got " + v.dump());
    return v.get<double>();
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!present(key)) return fallback;
    const auto& v = j_.at(key);
    if (!v.is_boolean()) fail(key, "must be true or false, got " + v.dump());
    return v.get<bool>();
  }
  // A list of at most `max` numbers (the key is required).
  std::vector<float> numbers(const char* key, int64_t max) const {
    if (!present(key)) fail(key, "is missing");
    const auto& v = j_.at(key);
    if (!v.is_array()) fail(key, "must be a list of numbers");
    if (static_cast<int64_t>(v.size()) > max) fail(key, "has more than " + std::to_string(max) + " values");
    std::vector<float> out;
    for (const auto& x : v) {
      if (!x.is_number()) fail(key, "must be a list of numbers, got " + x.dump());
      out.push_back(static_cast<float>(x.get<double>()));
    }
    return out;
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!present(key)) return fallback;
    const auto& v = j_.at(key);
    if (!v.is_string()) fail(key, "must be a string, got " + v.dump());
    return v.get<std::string>();
  }
  [[noreturn]] void fail(const char* key, const std::string& problem) const {
    throw std::runtime_error(source_ + ": '" + key + "' " + problem);
  }

 private:
  const nlohmann::json& j_;
  const std::string& source_;
};

// Which layers slide: those layer_types marks "sliding_attention" (newer configs), else those `slides` picks.
template <class Slides>
void read_window_layers(const JsonFields& f, const nlohmann::json& j, ModelConfig& c, Slides slides) {
  if (f.present("layer_types")) {
    const auto& types = j.at("layer_types");
    if (!types.is_array()) f.fail("layer_types", "must be a list, got " + types.dump());
    for (const auto& t : types) {
      if (t != "sliding_attention" && t != "full_attention")
        f.fail("layer_types", "holds " + t.dump() + " (supported: full_attention, sliding_attention)");
      c.window_layers.push_back(t == "sliding_attention");
    }
  } else if (c.num_layers > 0 && c.num_layers <= kMaxLayers) {
    for (int64_t i = 0; i < c.num_layers; ++i) c.window_layers.push_back(slides(i));
  }
}

// Gemma 2 as Gemma2Config and its modeling read it: its own defaults (head_dim 256, 8192 positions, eps 1e-6, tied
// embeddings), the MLP's hidden_activation (hidden_act is not read there), post-norms and norms of 1 + weight,
// embeddings scaled by √hidden, query_pre_attn_scalar, soft caps that are 50 and 30 when absent and none when null,
// and a sliding window on the layers layer_types marks, by default the even ones.
void read_gemma2(const JsonFields& f, const nlohmann::json& j, ModelConfig& c) {
  c.head_dim = f.integer_or("head_dim", 256);
  c.max_position = f.integer_or("max_position_embeddings", 8192);
  c.norm_eps = f.number_or("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", true);
  const std::string act = f.string_or("hidden_activation", "gelu_pytorch_tanh");
  if (act == "gelu_pytorch_tanh" || act == "gelu_new")
    c.hidden_act = "gelu_tanh";  // the same function
  else if (act == "gelu")
    c.hidden_act = "gelu";  // exact, with erf
  else
    f.fail("hidden_activation", "is '" + act + "' (supported: gelu_pytorch_tanh, gelu_new, gelu)");
  c.norm_plus_one = c.scale_embeddings = c.post_norms = true;
  c.qkv_bias = c.o_bias = f.boolean_or("attention_bias", false);
  if (f.boolean_or("use_bidirectional_attention", false))
    f.fail("use_bidirectional_attention", "is true: attention that sees later tokens is not supported");
  c.query_pre_attn_scalar = f.number_or("query_pre_attn_scalar", 256);
  if (!(c.query_pre_attn_scalar > 0)) f.fail("query_pre_attn_scalar", "must be a number above 0");
  auto cap = [&](const char* key, double fallback) {
    if (!j.contains(key)) return fallback;  // Gemma2Config's default
    if (j.at(key).is_null()) return 0.0;    // no cap
    const double v = f.number_or(key, 0);
    if (!std::isfinite(v) || !(v > 0)) f.fail(key, "must be a number above 0, or null for none");
    return v;
  };
  c.attn_softcap = cap("attn_logit_softcapping", 50.0);
  c.final_softcap = cap("final_logit_softcapping", 30.0);
  read_window_layers(f, j, c, [](int64_t i) { return i % 2 == 0; });
  const bool slides = std::find(c.window_layers.begin(), c.window_layers.end(), true) != c.window_layers.end();
  if (j.contains("sliding_window") && j.at("sliding_window").is_null() && slides)
    f.fail("sliding_window", "is null while layer_types has sliding_attention layers");
  c.sliding_window = slides ? f.integer_or("sliding_window", 4096) : 0;
  if (slides && c.sliding_window <= 0) f.fail("sliding_window", "must be above 0 for sliding_attention layers");
  if (!slides) c.window_layers.clear();
}

// What each family reads beyond the shared keys, as its Hugging Face class does (keys another family uses are
// ignored there too: Mistral's attention layers have no biases whatever attention_bias says).
void read_arch_options(const JsonFields& f, const nlohmann::json& j, ModelConfig& c) {
  if (c.arch == "gemma2") {
    read_gemma2(f, j, c);
  } else if (c.arch == "llama") {
    c.qkv_bias = c.o_bias = f.boolean_or("attention_bias", false);
    c.mlp_bias = f.boolean_or("mlp_bias", false);
  } else if (c.arch == "phi3") {
    c.fused_projections = true;
    c.sliding_window = f.integer_or("sliding_window", 0);  // every layer, as Mistral
    c.window_layers.assign(c.num_layers > 0 && c.num_layers <= kMaxLayers ? c.num_layers : 0, c.sliding_window > 0);
  } else if (c.arch == "mistral" || c.arch == "mixtral") {
    // Every layer slides when the window is set.
    c.sliding_window = f.integer_or("sliding_window", 0);
    if (c.arch == "mixtral") {
      c.num_experts = f.integer("num_local_experts");
      c.experts_per_token = f.integer("num_experts_per_tok");
    }
    c.window_layers.assign(c.num_layers > 0 && c.num_layers <= kMaxLayers ? c.num_layers : 0, c.sliding_window > 0);
  } else if (c.arch == "qwen2" || c.arch == "qwen3") {
    if (c.arch == "qwen2") {
      c.qkv_bias = true;
    } else {
      c.qkv_bias = c.o_bias = f.boolean_or("attention_bias", false);
      c.qk_norm = true;
    }
    // The window exists only with use_sliding_window; it applies to the layers layer_types marks "sliding_attention",
    // or without that list to the layers from max_window_layers on.
    if (f.boolean_or("use_sliding_window", false)) c.sliding_window = f.integer_or("sliding_window", 0);
    const int64_t from = f.integer_or("max_window_layers", 28);
    if (c.sliding_window > 0) read_window_layers(f, j, c, [from](int64_t i) { return i >= from; });
  }
}

// RoPE's base and scaling, from rope_scaling (older configs) or rope_parameters (newer ones, which may also carry
// rope_theta).
void read_rope(const JsonFields& f, const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  c.rope_theta = f.number_or("rope_theta", 10000.0);
  // RoPE over part of each head: Phi-3's block turns the first int(head_dim · factor) values (Phi-4-mini: 0.75);
  // the other families' blocks rotate whole heads, so there it is refused. The factor in the RoPE parameters wins
  // over a top-level one, as Hugging Face standardizes them.
  double rotary_factor = f.number_or("partial_rotary_factor", 1.0);
  for (const char* where : {"rope_scaling", "rope_parameters"})
    if (j.contains(where) && j[where].is_object() && j[where].contains("partial_rotary_factor"))
      rotary_factor = JsonFields(j[where], path).number_or("partial_rotary_factor", 1.0);
  if (rotary_factor != 1.0) {
    if (c.arch != "phi3" || !(rotary_factor > 0 && rotary_factor < 1))
      throw std::runtime_error(path + ": 'partial_rotary_factor' " + std::to_string(rotary_factor) +
                               " (RoPE over part of each head) is supported for phi3 only, in (0, 1]");
    c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * rotary_factor);
    if (c.rotary_dim < 2)
      throw std::runtime_error(path + ": 'partial_rotary_factor' " + std::to_string(rotary_factor) + " of head_dim " +
                               std::to_string(c.head_dim) + " turns " + std::to_string(c.rotary_dim) +
                               " values; RoPE needs an even count from 2 to head_dim");
  }
  // Older configs say rope_scaling; newer ones rope_parameters (which may also carry rope_theta).
  const nlohmann::json* rope = nullptr;
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object())
    rope = &j["rope_scaling"];
  else if (j.contains("rope_parameters") && j["rope_parameters"].is_object())
    rope = &j["rope_parameters"];
  if (rope) {
    const JsonFields r(*rope, path);
    if (!f.present("rope_theta")) c.rope_theta = r.number_or("rope_theta", c.rope_theta);
    c.rope_scaling.type = r.present("rope_type") ? r.string_or("rope_type", "") : r.string_or("type", "");
    if (c.rope_scaling.type == "default") c.rope_scaling.type.clear();
    // Phi-3's older configs name longrope "su", or "yarn" (which Hugging Face's Phi-3 reads as longrope).
    if (c.arch == "phi3" && (c.rope_scaling.type == "su" || c.rope_scaling.type == "yarn"))
      c.rope_scaling.type = "longrope";
    const bool longrope = c.rope_scaling.type == "longrope";
    c.rope_scaling.factor = r.number_or("factor", longrope ? 0.0 : 1.0);
    c.rope_scaling.low_freq_factor = r.number_or("low_freq_factor", 1.0);
    c.rope_scaling.high_freq_factor = r.number_or("high_freq_factor", 4.0);
    // yarn without one takes the model's own context (as Hugging Face standardizes it); llama3's default is 8192.
    c.rope_scaling.original_max_position = r.integer_or(
        "original_max_position_embeddings", c.rope_scaling.type == "yarn" || longrope ? c.max_position : 8192);
    // Phi-3 keeps its pretraining context beside rope_scaling, and Hugging Face prefers that one (4096 unless set).
    if (c.arch == "phi3" && longrope)
      c.rope_scaling.original_max_position = f.integer_or("original_max_position_embeddings", 4096);
    if (longrope && c.arch == "falcon")  // its block keeps one set of frequencies
      throw std::runtime_error(path + ": rope_scaling longrope is not supported for falcon");
    if (longrope) {
      c.rope_scaling.short_factor = r.numbers("short_factor", kMaxHeadDim);
      c.rope_scaling.long_factor = r.numbers("long_factor", kMaxHeadDim);
    }
    c.rope_scaling.beta_fast = r.number_or("beta_fast", 32.0);
    c.rope_scaling.beta_slow = r.number_or("beta_slow", 1.0);
    c.rope_scaling.attention_factor = r.number_or("attention_factor", 0.0);
    c.rope_scaling.mscale = r.number_or("mscale", 0.0);
    c.rope_scaling.mscale_all_dim = r.number_or("mscale_all_dim", 0.0);
    c.rope_scaling.truncate = r.boolean_or("truncate", true);
  }
}

// BLOOM names its sizes its own way (n_layer, n_head; n_embed in older files) and has no intermediate size (4 ×
// hidden), RoPE or hidden_act: LayerNorm, ALiBi and the tanh GELU are the architecture. slow_but_exact with
// pretraining_tp only splits the output projections' sums into slices: the same values up to rounding.
void read_bloom(const JsonFields& f, ModelConfig& c) {
  c.vocab_size = f.integer("vocab_size");
  c.hidden_size = f.present("hidden_size") ? f.integer("hidden_size") : f.integer("n_embed");
  c.num_layers = f.present("n_layer") ? f.integer("n_layer") : f.integer("num_hidden_layers");
  c.num_heads = f.present("n_head") ? f.integer("n_head") : f.integer("num_attention_heads");
  c.num_kv_heads = c.num_heads;
  // validate() refuses a head count of 0 and sizes out of range; the arithmetic waits for sane ones.
  c.head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
  c.intermediate_size = c.hidden_size > 0 && c.hidden_size <= kMaxHidden ? 4 * c.hidden_size : 0;
  c.max_position = f.integer_or("seq_length", 2048);  // ALiBi has no table of positions; this bounds sessions
  c.norm_eps = f.number_or("layer_norm_epsilon", 1e-5);
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", true);
  if (f.boolean_or("apply_residual_connection_post_layernorm", false))
    f.fail("apply_residual_connection_post_layernorm",
           "is true: residual connections taken after the LayerNorms are not supported");
  c.layer_norm = c.embedding_norm = c.alibi = true;
  c.qkv_bias = c.o_bias = c.mlp_bias = true;
  c.fused_projections = true;
  c.hidden_act = "gelu_tanh";
}

// Falcon as Hugging Face's FalconConfig and FalconDecoderLayer read it. Its keys are its own (ffn_hidden_size,
// 4 × hidden by default; layer_norm_epsilon; bias for every projection; activation; num_kv_heads), and three of them
// choose the block's layout: new_decoder_architecture (40B/180B: grouped keys and values, query_key_value per KV
// group, ln_attn and ln_mlp, or one input_layernorm with num_ln_in_parallel_attn 1), multi_query (7B: one KV head)
// and parallel_attn (attention and MLP side by side, else one after the other). The combinations Hugging Face's
// layer cannot run are refused, as is ALiBi (Falcon-RW). hidden_dropout and attention_dropout act only in
// training mode, which the blocks never take (as Petals, their backward is that of the evaluation forward).
void read_falcon(const JsonFields& f, const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  c.vocab_size = f.integer("vocab_size");
  c.hidden_size = f.present("n_embed") ? f.integer("n_embed") : f.integer("hidden_size");  // n_embed wins, as there
  c.num_layers = f.integer("num_hidden_layers");
  c.num_heads = f.integer("num_attention_heads");
  // validate() refuses a head count of 0 and sizes out of range; the arithmetic waits for sane ones.
  c.head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
  const bool new_arch = f.boolean_or("new_decoder_architecture", false);
  const bool multi_query = f.boolean_or("multi_query", true);
  c.parallel_attn = f.boolean_or("parallel_attn", true);
  const int64_t kv_heads = f.integer_or("num_kv_heads", c.num_heads);
  // num_key_value_heads, written by newer versions, is derived from these three and recomputed on load.
  c.num_kv_heads = new_arch || !multi_query ? kv_heads : 1;
  if (!new_arch && !multi_query && kv_heads != c.num_heads)
    f.fail("num_kv_heads", "is " + std::to_string(kv_heads) +
                               " with multi_query and new_decoder_architecture false: "
                               "that layout stores a key and a value for each of the " +
                               std::to_string(c.num_heads) +
                               " query heads, so only num_kv_heads = num_attention_heads is computed");
  const int64_t norms = f.integer_or("num_ln_in_parallel_attn", new_arch ? 2 : 0);  // 0: not given
  if (new_arch) {
    if (!c.parallel_attn)
      f.fail("parallel_attn",
             "is false with new_decoder_architecture: that layer always runs attention and MLP in "
             "parallel (Hugging Face's Falcon has no sequential form of it)");
    if (norms != 1 && norms != 2)
      f.fail("num_ln_in_parallel_attn", "is " + std::to_string(norms) + " (supported: 1, 2)");
    c.separate_mlp_norm = norms == 2;
  } else if (c.parallel_attn && norms != 0 && norms != 1) {
    f.fail("num_ln_in_parallel_attn", "is " + std::to_string(norms) +
                                          " without new_decoder_architecture: only the "
                                          "new decoder architecture has separate LayerNorms for attention and MLP");
  }
  if (f.boolean_or("alibi", false))
    f.fail("alibi",
           "is true (Falcon-RW): ALiBi as Falcon computes it (slopes times positions rounded to bfloat16, "
           "scaled by 1/sqrt(head_dim)) is not supported; Falcon models with RoPE are");
  // The original Falcon code took the residual after the LayerNorm when this was set; Hugging Face's ignores it.
  if (f.boolean_or("apply_residual_connection_post_layernorm", false))
    f.fail("apply_residual_connection_post_layernorm",
           "is true: residual connections taken after the LayerNorms are not supported");
  c.intermediate_size =
      f.integer_or("ffn_hidden_size", c.hidden_size > 0 && c.hidden_size <= kMaxHidden ? 4 * c.hidden_size : 0);
  c.max_position = f.integer_or("max_position_embeddings", 2048);
  c.norm_eps = f.number_or("layer_norm_epsilon", 1e-5);
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", true);
  c.qkv_bias = c.o_bias = c.mlp_bias = f.boolean_or("bias", false);
  const std::string act = f.string_or("activation", "gelu");
  if (act == "gelu")
    c.hidden_act = "gelu";  // exact, with erf
  else if (act == "gelu_new" || act == "gelu_pytorch_tanh")
    c.hidden_act = "gelu_tanh";  // the same function
  else
    f.fail("activation", "is '" + act + "' (supported: gelu, gelu_new, gelu_pytorch_tanh)");
  c.layer_norm = true;
  c.fused_projections = true;
  read_rope(f, j, c, path);
}

// The token ids of config.json.
void read_special_tokens(const JsonFields& f, const nlohmann::json& j, ModelConfig& c, const std::string& path) {
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer())
    c.bos_token_id = token_id(f.integer("bos_token_id"), "bos_token_id", path);
  if (j.contains("eos_token_id")) {
    const auto& e = j["eos_token_id"];
    if (e.is_number_integer()) c.eos_token_ids.push_back(token_id(f.integer("eos_token_id"), "eos_token_id", path));
    if (e.is_array())
      for (const auto& v : e) {
        if (!v.is_number_integer()) f.fail("eos_token_id", "must hold integers, got " + v.dump());
        const int64_t id = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{1} << 62 ? -2 : v.get<int64_t>();
        c.eos_token_ids.push_back(token_id(id, "eos_token_id", path));
      }
  }
}

}  // namespace

ModelConfig ModelConfig::from_hf_json(const std::string& path) {
  return from_hf_json_text(read_bounded_file(path, kMaxConfigFileBytes, "a model config"), path);
}

ModelConfig ModelConfig::from_hf_json_text(std::string_view text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw std::runtime_error(path + ": a model config must be a JSON object");
  const JsonFields f(j, path);
  ModelConfig c;
  c.arch = f.string_or("model_type", "");
  if (c.arch.empty()) f.fail("model_type", "is missing");
  // The architecture first: another family's config lacks this one's keys, and that is not what is wrong with it.
  if (!supported(c.arch)) throw std::runtime_error(path + ": " + unsupported_architecture(c.arch));
  // Weights quantized by a library (GPTQ, AWQ, bitsandbytes, FP8...) are not the plain tensors the blocks read.
  if (f.present("quantization_config"))
    f.fail("quantization_config",
           "names a quantized checkpoint, which Corolla does not load: use the original "
           "weights (quantize them with --dtype) or a GGUF file");
  if (c.arch == "bloom" || c.arch == "falcon") {
    if (c.arch == "bloom")
      read_bloom(f, c);
    else
      read_falcon(f, j, c, path);
    read_special_tokens(f, j, c, path);
    c.validate(path);
    return c;
  }
  c.vocab_size = f.integer("vocab_size");
  c.hidden_size = f.integer("hidden_size");
  c.intermediate_size = f.integer("intermediate_size");
  c.num_layers = f.integer("num_hidden_layers");
  c.num_heads = f.integer("num_attention_heads");
  c.num_kv_heads = f.integer_or("num_key_value_heads", c.num_heads);
  // validate() refuses a head count of 0; the division waits for a positive one.
  // Qwen3's class defaults head_dim to 128, the others to hidden_size / heads.
  c.head_dim = f.integer_or("head_dim", c.arch == "qwen3" ? 128 : c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  c.max_position = f.integer_or("max_position_embeddings", 2048);
  c.norm_eps = f.number_or("rms_norm_eps", 1e-5);
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", false);
  c.hidden_act = f.string_or("hidden_act", "silu");
  if (c.hidden_act == "swish") c.hidden_act = "silu";  // the same function under its other name
  read_arch_options(f, j, c);
  read_rope(f, j, c, path);
  read_special_tokens(f, j, c, path);
  c.validate(path);
  return c;
}

namespace {

// RoPE's base and scaling as llama.cpp's converters write them. YaRN as Hugging Face's configs give it (Qwen2.5's
// factor and original context, the ramp's betas) is the same computation in llama.cpp; the keys only llama.cpp's
// other converters write (an extrapolation factor other than 1, an attention factor, DeepSeek's log multiplier)
// change it in ways Hugging Face's yarn does not, so they are refused. Phi-3's longrope comes as two factor tensors
// (read_phi3_gguf).
void read_gguf_rope(const GgufFile& g, ModelConfig& c) {
  auto key = [&](const std::string& k) { return c.arch + "." + k; };
  c.rope_theta = g.find_float(key("rope.freq_base")).value_or(10000.0);
  const std::string type = g.find_string(key("rope.scaling.type")).value_or("");
  if (type == "linear") {
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = g.get_float(key("rope.scaling.factor"));
  } else if (type == "yarn") {
    c.rope_scaling.type = "yarn";
    c.rope_scaling.factor = g.get_float(key("rope.scaling.factor"));
    c.rope_scaling.original_max_position =
        g.find_int(key("rope.scaling.original_context_length")).value_or(c.max_position);
    c.rope_scaling.beta_fast = g.find_float(key("rope.scaling.yarn_beta_fast")).value_or(32.0);
    c.rope_scaling.beta_slow = g.find_float(key("rope.scaling.yarn_beta_slow")).value_or(1.0);
    for (const auto& [name, neutral] :
         {std::pair{"rope.scaling.yarn_ext_factor", 1.0}, std::pair{"rope.scaling.yarn_attn_factor", 1.0},
          std::pair{"rope.scaling.yarn_log_multiplier", 0.0}})
      if (auto v = g.find_float(key(name)); v && *v != neutral)
        throw std::runtime_error(g.path() + ": " + key(name) + " " + std::to_string(*v) +
                                 " is not supported (YaRN is supported as Hugging Face computes it: " +
                                 std::string(name).substr(13) + " " + std::to_string(neutral) + ")");
  } else if (type == "longrope" && c.arch == "phi3") {
    // read_phi3_gguf takes the factors from their tensors
  } else if (!type.empty() && type != "none") {
    throw std::runtime_error(g.path() + ": rope scaling '" + type +
                             "' in a GGUF file is not supported (supported: linear, yarn; phi3's longrope)");
  }
}

// BLOOM as llama.cpp's converter writes it: query_key_value regrouped into all q, all k, all v rows (BLOOM's block
// regroups its checkpoint's rows the same way), LayerNorms and projections with biases, the embeddings' LayerNorm as
// token_embd_norm and the LM head as output.weight (a copy of the embeddings). context_length is the checkpoint's
// seq_length, or the hidden size where it had none (ALiBi has no table of positions: it bounds sessions only).
void read_bloom_gguf(const GgufFile& g, ModelConfig& c) {
  c.hidden_size = g.get_int("bloom.embedding_length");
  c.num_layers = g.get_int("bloom.block_count");
  c.num_heads = g.get_int("bloom.attention.head_count");
  c.num_kv_heads = g.find_int("bloom.attention.head_count_kv").value_or(c.num_heads);
  if (c.num_kv_heads != c.num_heads)
    throw std::runtime_error(g.path() + ": bloom.attention.head_count_kv " + std::to_string(c.num_kv_heads) +
                             " is not head_count " + std::to_string(c.num_heads) + " (BLOOM has a key per head)");
  // validate() refuses a head count of 0; the division waits for a positive one.
  c.head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
  c.intermediate_size = g.get_int("bloom.feed_forward_length");
  c.max_position = g.find_int("bloom.context_length").value_or(2048);
  c.norm_eps = g.get_float("bloom.attention.layer_norm_epsilon");
  if (g.find_string("bloom.rope.scaling.type") || g.find_int("bloom.rope.dimension_count"))
    throw std::runtime_error(g.path() + ": a bloom file with RoPE keys is not supported (BLOOM's positions are ALiBi)");
  c.layer_norm = c.embedding_norm = c.alibi = true;
  c.qkv_bias = c.o_bias = c.mlp_bias = true;
  c.fused_projections = true;
  c.hidden_act = "gelu_tanh";
}

// Falcon as llama.cpp's converter writes it: query_key_value regrouped into all q, all k, all v rows (the "jploski"
// layout), attn_norm and (40B/180B) attn_norm_2 as LayerNorms with biases, attention and MLP in parallel (its graph
// has no other form). feed_forward_length is written as 4 × hidden whatever ffn_hidden_size was, so the MLP's width
// is read from its tensor. The GELU is the exact one of the Hugging Face model the file was converted from.
void read_falcon_gguf(const GgufFile& g, ModelConfig& c) {
  const std::string layout = g.find_string("falcon.tensor_data_layout").value_or("");
  if (layout != "jploski")
    throw std::runtime_error(g.path() + ": falcon.tensor_data_layout '" + layout +
                             "' is not supported (supported: jploski, the layout llama.cpp's converter writes)");
  if (g.find_tensor("blk.0.ffn_norm.weight"))
    throw std::runtime_error(g.path() +
                             ": a Falcon block with an ffn_norm (attention, then the MLP) is not supported "
                             "in a GGUF file; load its Hugging Face directory");
  c.hidden_size = g.get_int("falcon.embedding_length");
  c.num_layers = g.get_int("falcon.block_count");
  c.num_heads = g.get_int("falcon.attention.head_count");
  c.num_kv_heads = g.find_int("falcon.attention.head_count_kv").value_or(c.num_heads);
  // validate() refuses a head count of 0; the division waits for a positive one.
  c.head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
  const GgufTensorInfo* up = g.find_tensor("blk.0.ffn_up.weight");
  c.intermediate_size = up && up->shape.rank() == 2 ? up->shape[0] : g.get_int("falcon.feed_forward_length");
  c.max_position = g.find_int("falcon.context_length").value_or(2048);
  c.norm_eps = g.get_float("falcon.attention.layer_norm_epsilon");
  read_gguf_rope(g, c);
  c.layer_norm = c.fused_projections = c.parallel_attn = true;
  c.separate_mlp_norm = g.find_tensor("blk.0.attn_norm_2.weight") != nullptr;
  c.qkv_bias = g.find_tensor("blk.0.attn_qkv.bias") != nullptr;
  c.o_bias = g.find_tensor("blk.0.attn_output.bias") != nullptr;
  c.mlp_bias = g.find_tensor("blk.0.ffn_up.bias") != nullptr;
  c.hidden_act = "gelu";
}

// Phi-3 as llama.cpp's converter writes it: qkv_proj as attn_qkv and gate_up_proj as ffn_up (gate rows first), both
// kept fused as the Hugging Face checkpoint has them; a sliding window on every layer (0: none, Phi-4); longrope's
// factors as the tensors rope_factors_short and rope_factors_long beside the original context and the attention
// factor. Hugging Face switches to the long factors once a sequence passes the original context, and so does
// Corolla for a GGUF file (llama.cpp decides once, from the context it is started with).
void read_phi3_gguf(const GgufFile& g, ModelConfig& c) {
  c.fused_projections = true;
  c.sliding_window = g.find_int("phi3.attention.sliding_window").value_or(0);
  c.window_layers.assign(c.num_layers > 0 && c.num_layers <= kMaxLayers ? c.num_layers : 0, c.sliding_window > 0);
  const GgufTensorInfo* long_factors = g.find_tensor("rope_factors_long.weight");
  const GgufTensorInfo* short_factors = g.find_tensor("rope_factors_short.weight");
  if (!long_factors && !short_factors) return;
  if (!long_factors || !short_factors)
    throw std::runtime_error(g.path() + ": longrope needs both rope_factors_long.weight and rope_factors_short.weight");
  auto factors = [&](const GgufTensorInfo& info) {
    if (info.shape.rank() != 1 || info.shape[0] > kMaxHeadDim)
      throw std::runtime_error(g.path() + ": tensor '" + info.name + "' is not a list of RoPE factors");
    Tensor t = g.tensor(info).to_f32();
    return std::vector<float>(t.data_as<const float>(), t.data_as<const float>() + t.numel());
  };
  c.rope_scaling.type = "longrope";
  c.rope_scaling.factor = 0;  // the attention factor is given, or follows from the two contexts
  c.rope_scaling.long_factor = factors(*long_factors);
  c.rope_scaling.short_factor = factors(*short_factors);
  c.rope_scaling.original_max_position = g.get_int("phi3.rope.scaling.original_context_length");
  c.rope_scaling.attention_factor = g.find_float("phi3.rope.scaling.attn_factor").value_or(0.0);
}

void read_llama_gguf(const GgufFile& g, ModelConfig& c) {
  const std::string arch = c.arch;  // a copy: a Mixtral found below renames c.arch
  auto key = [&](const std::string& k) { return arch + "." + k; };
  c.hidden_size = g.get_int(key("embedding_length"));
  c.intermediate_size = g.get_int(key("feed_forward_length"));
  c.num_layers = g.get_int(key("block_count"));
  c.num_heads = g.get_int(key("attention.head_count"));
  c.num_kv_heads = g.find_int(key("attention.head_count_kv")).value_or(c.num_heads);
  // validate() refuses a head count of 0; the division waits for a positive one.
  c.head_dim = g.find_int(key("attention.key_length")).value_or(c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  c.max_position = g.find_int(key("context_length")).value_or(2048);
  // RoPE over part of each head: Phi-3's block turns the first rope.dimension_count values; the other blocks
  // rotate whole heads, so there it is refused, not ignored.
  if (auto rot = g.find_int(key("rope.dimension_count")); rot && *rot != c.head_dim) {
    if (arch != "phi3")
      throw std::runtime_error(g.path() + ": rope.dimension_count " + std::to_string(*rot) + " is not head_dim " +
                               std::to_string(c.head_dim) +
                               " (RoPE over part of each head is supported for phi3 only)");
    c.rotary_dim = *rot;  // validate() checks it against head_dim
  }
  c.norm_eps = g.get_float(key("attention.layer_norm_rms_epsilon"));
  read_gguf_rope(g, c);
  // llama.cpp's blocks add the biases a file holds (Qwen2's q/k/v; a Llama converted with attention_bias).
  c.qkv_bias = g.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.o_bias = g.find_tensor("blk.0.attn_output.bias") != nullptr;
  c.mlp_bias = g.find_tensor("blk.0.ffn_up.bias") != nullptr;
  c.qk_norm = arch == "qwen3";
  if (arch == "phi3") read_phi3_gguf(g, c);
  // llama.cpp writes Mixtral as a "llama" with experts.
  if (const auto experts = g.find_int(key("expert_count")); experts && *experts > 0 && arch == "llama") {
    c.arch = "mixtral";
    c.num_experts = *experts;
    c.experts_per_token = g.get_int(key("expert_used_count"));
  }
  if (const GgufTensorInfo* f = g.find_tensor("rope_freqs.weight")) {
    Tensor factors = g.tensor(*f).to_f32();
    c.rope_freq_factors.assign(factors.data_as<const float>(), factors.data_as<const float>() + factors.numel());
  }
}

// Gemma 2 as llama.cpp's converter writes it and llama.cpp reads it: the llama keys, the window (4096 unless given)
// on the even layers, the soft caps (50 and 30 unless given), the tanh GELU. The file has no query_pre_attn_scalar:
// llama.cpp scales queries by (hidden / heads)^-0.5 for a model of 46 blocks (Gemma 2 27B) and by head_dim^-0.5
// otherwise, and so does Corolla. Its norm weights hold 1 + weight already (the weight source takes the 1 off).
void read_gemma2_gguf(const GgufFile& g, ModelConfig& c) {
  read_llama_gguf(g, c);
  c.hidden_act = "gelu_tanh";
  c.norm_plus_one = c.scale_embeddings = c.post_norms = true;
  c.sliding_window = g.find_int("gemma2.attention.sliding_window").value_or(4096);
  for (int64_t i = 0; c.num_layers <= kMaxLayers && i < c.num_layers; ++i) c.window_layers.push_back(i % 2 == 0);
  c.attn_softcap = g.find_float("gemma2.attn_logit_softcapping").value_or(50.0);
  c.final_softcap = g.find_float("gemma2.final_logit_softcapping").value_or(30.0);
  c.query_pre_attn_scalar =
      static_cast<double>(c.num_layers == 46 && c.num_heads > 0 ? c.hidden_size / c.num_heads : c.head_dim);
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const GgufFile& g) {
  ModelConfig c;
  const std::string arch = g.get_string("general.architecture");
  c.arch = arch;
  auto key = [&](const std::string& k) { return arch + "." + k; };
  if (!supported(arch, kGgufArchitectures))
    throw std::runtime_error(g.path() + ": " + unsupported_architecture(arch, kGgufArchitectures) + " in a GGUF file");
  if (arch == "falcon")
    read_falcon_gguf(g, c);
  else if (arch == "bloom")
    read_bloom_gguf(g, c);
  else if (arch == "gemma2")
    read_gemma2_gguf(g, c);
  else
    read_llama_gguf(g, c);
  const GgufTensorInfo* embd = g.find_tensor("token_embd.weight");
  if (!embd) throw std::runtime_error(g.path() + ": tensor 'token_embd.weight' is missing");
  c.vocab_size = g.find_int(key("vocab_size")).value_or(embd->shape[0]);
  c.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;
  if (auto b = g.find_int("tokenizer.ggml.bos_token_id"))
    c.bos_token_id = token_id(*b, "tokenizer.ggml.bos_token_id", g.path());
  if (auto e = g.find_int("tokenizer.ggml.eos_token_id"))
    c.eos_token_ids.push_back(token_id(*e, "tokenizer.ggml.eos_token_id", g.path()));
  if (auto e = g.find_int("tokenizer.ggml.eot_token_id"); e && (c.eos_token_ids.empty() || *e != c.eos_token_ids[0]))
    c.eos_token_ids.push_back(token_id(*e, "tokenizer.ggml.eot_token_id", g.path()));
  c.validate(g.path());
  return c;
}

}  // namespace corolla
