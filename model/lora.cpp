#include "model/lora.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <stdexcept>

#include "model/bounded_file.hpp"
#include "model/weights/safetensors_file.hpp"
#include "model/weights/weight_source.hpp"

namespace corolla {
namespace {

struct ProjectionInfo {
  const char* name;
  Projection p;
};
constexpr ProjectionInfo kNames[] = {{"q_proj", Projection::q},       {"k_proj", Projection::k},
                                     {"v_proj", Projection::v},       {"o_proj", Projection::o},
                                     {"gate_proj", Projection::gate}, {"up_proj", Projection::up},
                                     {"down_proj", Projection::down}};

bool find_projection(const std::string& name, Projection& out) {
  for (const auto& n : kNames)
    if (name == n.name) {
      out = n.p;
      return true;
    }
  return false;
}

// [out, in] of a projection's weight.
std::pair<int64_t, int64_t> projection_shape(Projection p, const ModelConfig& c) {
  const int64_t d = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t ff = c.intermediate_size;
  switch (p) {
    case Projection::q: return {q, d};
    case Projection::k: return {kv, d};
    case Projection::v: return {kv, d};
    case Projection::o: return {d, q};
    case Projection::gate: return {ff, d};
    case Projection::up: return {ff, d};
    case Projection::down: return {d, ff};
  }
  return {0, 0};
}

// A key of the config that must be absent, null, false, empty or equal to `fine`.
void refuse_unless_default(const nlohmann::json& cfg, const char* key, const std::string& what,
                           const std::string& where) {
  if (!cfg.contains(key)) return;
  const auto& v = cfg.at(key);
  if (v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_object() && v.empty()) || (v.is_array() && v.empty()))
    return;
  throw std::runtime_error(where + ": " + what + " (" + key + " = " + v.dump() + ") is not supported");
}

// Ranks of real adapters are at most a few hundred; the bound keeps the scale's arithmetic meaningful.
constexpr int64_t kMaxRank = int64_t{1} << 16;

}  // namespace

std::string adapter_name(const std::string& dir) {
  std::string trimmed = dir;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  return trimmed.substr(trimmed.find_last_of('/') + 1);
}

std::shared_ptr<const LoraAdapter> LoraAdapter::load(const std::string& dir, const ModelConfig& config,
                                                     int64_t first_block, int64_t last_block, Backend& backend) {
  namespace fs = std::filesystem;
  const fs::path root(dir);
  const std::string cfg_path = (root / "adapter_config.json").string();
  if (!fs::exists(cfg_path)) throw std::runtime_error(dir + ": no adapter_config.json (not a PEFT adapter directory?)");
  const std::string text = read_bounded_file(cfg_path, kMaxConfigFileBytes, "an adapter config");
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(cfg_path + ": not valid JSON (" + e.what() + ")");
  }
  auto adapter = std::make_shared<LoraAdapter>();
  adapter->name_ = adapter_name(dir);
  try {
    const std::string type = cfg.value("peft_type", "LORA");
    if (type != "LORA") throw std::runtime_error(cfg_path + ": peft_type '" + type + "' is not LORA");
    refuse_unless_default(cfg, "use_dora", "DoRA", cfg_path);
    refuse_unless_default(cfg, "fan_in_fan_out", "fan_in_fan_out", cfg_path);
    refuse_unless_default(cfg, "rank_pattern", "a per-module rank", cfg_path);
    refuse_unless_default(cfg, "alpha_pattern", "a per-module alpha", cfg_path);
    refuse_unless_default(cfg, "modules_to_save", "modules_to_save", cfg_path);
    refuse_unless_default(cfg, "lora_bias", "a LoRA bias", cfg_path);
    if (cfg.value("bias", "none") != "none")
      throw std::runtime_error(cfg_path + ": bias '" + cfg.value("bias", "") + "' is not supported (only 'none')");
    if (!cfg.contains("r") || !cfg.at("r").is_number_integer())
      throw std::runtime_error(cfg_path + ": r must be an integer");
    adapter->rank_ = cfg.at("r").get<int64_t>();
    if (adapter->rank_ < 1 || adapter->rank_ > kMaxRank)
      throw std::runtime_error(cfg_path + ": r must be in 1.." + std::to_string(kMaxRank));
    if (!cfg.contains("lora_alpha") || !cfg.at("lora_alpha").is_number())
      throw std::runtime_error(cfg_path + ": lora_alpha must be a number");
    const double alpha = cfg.at("lora_alpha").get<double>();
    if (!std::isfinite(alpha)) throw std::runtime_error(cfg_path + ": lora_alpha must be finite");
    const bool rslora = cfg.value("use_rslora", false);
    adapter->scale_ = static_cast<float>(
        alpha / (rslora ? std::sqrt(static_cast<double>(adapter->rank_)) : static_cast<double>(adapter->rank_)));
    if (cfg.contains("target_modules") && cfg.at("target_modules").is_string())
      throw std::runtime_error(cfg_path +
                               ": target_modules as a regular expression is not supported (list the "
                               "projections)");
    for (const auto& t : cfg.value("target_modules", nlohmann::json::array())) {
      Projection p;
      if (!find_projection(t.get<std::string>(), p))
        throw std::runtime_error(cfg_path + ": target module '" + t.get<std::string>() +
                                 "' is not one of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj");
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(cfg_path + ": " + e.what());
  }

  const fs::path weights = root / "adapter_model.safetensors";
  if (!fs::exists(weights))
    throw std::runtime_error(dir + ": no adapter_model.safetensors (other weight formats are not read)");
  auto file = SafetensorsFile::open(weights.string());
  adapter->first_block_ = first_block;
  adapter->blocks_.resize(static_cast<size_t>(last_block - first_block));
  adapter->touched_.assign(adapter->blocks_.size(), false);
  // base_model.model.model.layers.{i}.{self_attn|mlp}.{proj}.lora_{A|B}[.default].weight
  static const std::regex pattern(
      R"(^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_([AB])(\.\w+)?\.weight$)");
  struct Half {
    Tensor a, b;
  };
  std::map<std::pair<int64_t, Projection>, Half> found;
  for (const auto& [name, info] : file->tensors()) {
    std::smatch m;
    Projection p;
    if (!std::regex_match(name, m, pattern) || !find_projection(m[3].str(), p))
      throw std::runtime_error(weights.string() + ": tensor '" + name + "' is not a LoRA pair of a block projection");
    const auto parsed = parse_block_number(m[1].str());
    if (!parsed || *parsed >= config.num_layers)
      throw std::runtime_error(weights.string() + ": tensor '" + name + "' names block " + m[1].str() +
                               " of a model with " + std::to_string(config.num_layers));
    const int64_t block = *parsed;
    Half& h = found[{block, p}];
    (m[4].str() == "A" ? h.a : h.b) = file->tensor(info).to_f32();
  }
  for (auto& [key, h] : found) {
    const auto [block, p] = key;
    const std::string what =
        weights.string() + ": block " + std::to_string(block) + " " + kNames[static_cast<size_t>(p)].name;
    if (!h.a.defined() || !h.b.defined()) throw std::runtime_error(what + " has lora_A or lora_B but not both");
    const auto [out, in] = projection_shape(p, config);
    const int64_t r = h.a.rank() == 2 ? h.a.dim(0) : 0;
    if (r != adapter->rank_)
      throw std::runtime_error(what + ": lora_A " + h.a.describe() + " has rank " + std::to_string(r) +
                               ", adapter_config.json says r = " + std::to_string(adapter->rank_));
    if (h.a.rank() != 2 || h.a.dim(1) != in || h.b.rank() != 2 || h.b.dim(0) != out || h.b.dim(1) != r)
      throw std::runtime_error(what + ": lora_A " + h.a.describe() + " and lora_B " + h.b.describe() +
                               " do not fit the projection [" + std::to_string(out) + ", " + std::to_string(in) + "]");
    if (block < first_block || block >= last_block) continue;
    float* b = h.b.data_as<float>();
    for (int64_t i = 0; i < h.b.numel(); ++i) b[i] *= adapter->scale_;
    const size_t slot = static_cast<size_t>(block - first_block);
    adapter->blocks_[slot].pairs[static_cast<size_t>(p)] = {backend.upload(h.a), backend.upload(h.b)};
    adapter->touched_[slot] = true;
  }
  if (found.empty()) throw std::runtime_error(weights.string() + ": no LoRA tensors");
  return adapter;
}

const BlockLora* LoraAdapter::block(int64_t index) const {
  const int64_t i = index - first_block_;
  if (i < 0 || i >= static_cast<int64_t>(blocks_.size()) || !touched_[static_cast<size_t>(i)]) return nullptr;
  return &blocks_[static_cast<size_t>(i)];
}

}  // namespace corolla
