#include "model/weights/weight_source.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <stdexcept>

#include "model/arch/bloom_names.hpp"
#include "model/weights/gguf_file.hpp"
#include "model/weights/safetensors_file.hpp"
#include "model/weights/safetensors_index.hpp"

namespace corolla {
namespace fs = std::filesystem;

std::string block_tensor_name(int64_t block, const std::string& suffix) {
  return "model.layers." + std::to_string(block) + "." + suffix;
}

std::optional<int64_t> checkpoint_block_of(std::string_view name) {
  size_t start = 0;
  std::string_view previous;
  while (start < name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    const std::string_view part = name.substr(start, dot - start);
    if ((previous == "layers" || previous == "h") && dot < name.size())
      if (auto block = parse_block_number(part)) return block;
    previous = part;
    start = dot + 1;
  }
  return std::nullopt;
}

int64_t first_block_held(const WeightSource& source) {
  std::optional<int64_t> first;
  for (const std::string& name : source.names())
    if (auto b = checkpoint_block_of(name); b && (!first || *b < *first)) first = b;
  return first.value_or(0);
}

std::string stored_dtype_name(const WeightSource& source) {
  const int64_t first = first_block_held(source);
  std::map<DType, int64_t> elements;
  for (const std::string& name : source.names())
    if (checkpoint_block_of(name) == first) {
      const WeightSource::TensorMeta meta = source.meta(name);
      if (meta.shape.rank() == 2) elements[meta.dtype] += meta.shape.numel();
    }
  if (elements.empty()) return "auto";
  const auto most = std::max_element(elements.begin(), elements.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
  return std::string(dtype_name(most->first));
}

std::optional<int64_t> parse_block_number(std::string_view digits) {
  if (digits.empty() || digits.size() > 9) return std::nullopt;  // far past any model's block count
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return n;
}

namespace {

// config.json plus one or more safetensors files (sharded through model.safetensors.index.json).
class SafetensorsSource final : public WeightSource {
 public:
  explicit SafetensorsSource(const fs::path& dir) : dir_(dir) {
    config_ = ModelConfig::from_hf_json((dir / "config.json").string());
    const fs::path index = dir / "model.safetensors.index.json";
    if (fs::exists(index)) {
      if (fs::file_size(index) > kMaxSafetensorsIndexBytes)
        throw std::runtime_error(index.string() + ": index of " + std::to_string(fs::file_size(index)) +
                                 " bytes is too large");
      std::ifstream in(index, std::ios::binary);
      const std::string text{std::istreambuf_iterator<char>(in), {}};
      for (auto& [name, file] : parse_safetensors_index(text, index.string())) {
        auto& shard = shards_[file];
        if (!shard) shard = SafetensorsFile::open((dir / file).string());
        files_[name] = shard.get();
      }
      for (auto& [name, file] : files_)
        if (!file->find(name))
          throw std::runtime_error(file->path() + ": index lists tensor '" + name + "' but the shard lacks it");
    } else {
      const fs::path single = dir / "model.safetensors";
      if (!fs::exists(single))
        throw std::runtime_error(dir.string() + ": no model.safetensors or model.safetensors.index.json");
      auto& shard = shards_["model.safetensors"];
      shard = SafetensorsFile::open(single.string());
      for (auto& [name, info] : shard->tensors()) files_[name] = shard.get();
    }
  }

  const ModelConfig& config() const override { return config_; }
  bool has(const std::string& name) const override { return files_.count(name) != 0; }
  Tensor get(const std::string& name) const override {
    auto it = files_.find(name);
    if (it == files_.end()) throw std::runtime_error(dir_.string() + ": tensor '" + name + "' is missing");
    Tensor t = it->second->tensor(name);
    count(t);
    return t;
  }
  void release(const Tensor& t) const override {
    for (auto& [name, shard] : shards_) shard->release(t);
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (auto& [name, file] : files_) out.push_back(name);
    return out;
  }
  std::string origin() const override { return dir_.string(); }
  std::vector<std::string> files() const override {
    std::vector<std::string> out = {(dir_ / "config.json").string()};
    const fs::path index = dir_ / "model.safetensors.index.json";
    if (fs::exists(index)) out.push_back(index.string());
    for (auto& [name, shard] : shards_) out.push_back(shard->path());
    return out;
  }
  TensorMeta meta(const std::string& name) const override {
    auto it = files_.find(name);
    if (it == files_.end()) throw std::runtime_error(dir_.string() + ": tensor '" + name + "' is missing");
    const SafetensorsInfo* info = it->second->find(name);
    return {info->dtype, info->shape};
  }

 private:
  fs::path dir_;
  ModelConfig config_;
  std::map<std::string, std::shared_ptr<SafetensorsFile>> shards_;
  std::map<std::string, SafetensorsFile*> files_;
};

// GGUF with llama.cpp's tensor names. llama.cpp's converter permutes the rows of Q and K of "llama" models so
// that RoPE rotates adjacent pairs; Corolla's kernels rotate halves (as Hugging Face does), so those rows are
// put back in Hugging Face order here. Row permutations keep quantized blocks intact. Its Gemma 2 norms hold
// 1 + weight (the converter adds the 1); the 1 is taken off again, in f32, so that they read as Hugging Face's.
class GgufSource final : public WeightSource {
 public:
  explicit GgufSource(const std::string& path) : gguf_(GgufFile::open(path)) {
    config_ = ModelConfig::from_gguf(*gguf_);
    permuted_qk_ = gguf_->get_string("general.architecture") == "llama";
    const bool bloom_names = config_.arch == "falcon" || config_.arch == "bloom";
    for (const auto& info : gguf_->tensors()) {
      if (auto experts = expert_stack(info.name)) {
        add_experts(info, *experts);
        continue;
      }
      const std::string hf = bloom_names ? bloom_to_hf(info.name) : to_hf(info.name);
      if (!hf.empty()) hf_to_gguf_[hf] = {info.name, -1};
    }
  }

  const ModelConfig& config() const override { return config_; }
  bool has(const std::string& name) const override { return hf_to_gguf_.count(name) != 0; }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (auto& [hf, g] : hf_to_gguf_) out.push_back(hf);
    return out;
  }
  std::string origin() const override { return gguf_->path(); }
  std::shared_ptr<const GgufFile> gguf() const override { return gguf_; }
  std::vector<std::string> files() const override { return {gguf_->path()}; }
  void release(const Tensor& t) const override { gguf_->release(t); }
  TensorMeta meta(const std::string& name) const override {
    auto it = hf_to_gguf_.find(name);
    if (it == hf_to_gguf_.end())
      throw std::runtime_error(gguf_->path() + ": tensor '" + name + "' is missing (no GGUF tensor maps to it)");
    const GgufTensorInfo* info = gguf_->find_tensor(it->second.name);
    if (it->second.expert >= 0) return {info->dtype, Shape{info->shape[1], info->shape[2]}};
    if (shifted_norm(it->second.name)) return {DType::f32, info->shape};
    return {info->dtype, info->shape};  // un-permuting Q/K rows keeps dtype and shape
  }

  Tensor get(const std::string& name) const override {
    auto it = hf_to_gguf_.find(name);
    if (it == hf_to_gguf_.end())
      throw std::runtime_error(gguf_->path() + ": tensor '" + name + "' is missing (no GGUF tensor maps to it)");
    const std::string& g = it->second.name;
    Tensor t = gguf_->tensor(*gguf_->find_tensor(g));
    if (const int64_t e = it->second.expert; e >= 0) {
      // One expert of a stack [E, rows, cols]: its rows are contiguous (whole quantized blocks), a view.
      const int64_t rows = t.dim(1);
      t = t.reshaped({t.dim(0) * rows, t.dim(2)}).slice_rows(e * rows, (e + 1) * rows);
    }
    count(t);
    if (shifted_norm(g)) {
      Tensor w = t.to_f32().clone();
      for (int64_t i = 0; i < w.numel(); ++i) w.data_as<float>()[i] -= 1.0f;
      return w;
    }
    if (!permuted_qk_) return t;
    // Q and K rows are permuted, and so are their biases' entries (a Llama with attention_bias).
    const bool is_q = g.ends_with("attn_q.weight") || g.ends_with("attn_q.bias");
    if (!is_q && !g.ends_with("attn_k.weight") && !g.ends_with("attn_k.bias")) return t;
    return unpermute_rows(t, is_q ? config_.num_heads : config_.num_kv_heads);
  }

 private:
  // GGUF row (i·2 + j) of a head holds Hugging Face row (j·half + i), half = head_dim / 2.
  static Tensor unpermute_rows(const Tensor& t, int64_t heads) {
    const int64_t rows = t.dim(0), head_rows = rows / heads, half = head_rows / 2;
    const int64_t row_bytes = t.nbytes() / rows;
    Tensor out = Tensor::empty(t.dtype(), t.shape());
    auto* src = static_cast<const char*>(t.data());
    auto* dst = static_cast<char*>(out.data());
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < half; ++i)
        for (int64_t j = 0; j < 2; ++j)
          std::memcpy(dst + (h * head_rows + j * half + i) * row_bytes, src + (h * head_rows + i * 2 + j) * row_bytes,
                      static_cast<size_t>(row_bytes));
    return out;
  }

  // llama.cpp stores a block's experts stacked, one tensor [E, rows, cols] per projection: which projection (the
  // Hugging Face name of one expert's weight) and block a name is, or nullopt for any other tensor.
  struct ExpertStack {
    int64_t block;
    const char* weight;  // "w1" (gate), "w3" (up), "w2" (down)
  };
  std::optional<ExpertStack> expert_stack(const std::string& g) const {
    static const std::regex stack(R"(blk\.(\d+)\.ffn_(gate|up|down)_exps\.weight)");
    std::smatch m;
    if (!std::regex_match(g, m, stack)) return std::nullopt;
    const auto block = parse_block_number(m[1].str());
    if (!block)
      throw std::runtime_error(gguf_->path() + ": tensor '" + g + "' names block " + m[1].str() + ", out of range");
    const std::string p = m[2].str();
    return ExpertStack{*block, p == "gate" ? "w1" : p == "up" ? "w3" : "w2"};
  }
  void add_experts(const GgufTensorInfo& info, const ExpertStack& s) {
    if (info.shape.rank() != 3 || info.shape[0] != config_.num_experts)
      throw std::runtime_error(gguf_->path() + ": tensor '" + info.name + "' is not a stack of " +
                               std::to_string(config_.num_experts) + " experts");
    for (int64_t e = 0; e < info.shape[0]; ++e)
      hf_to_gguf_[block_tensor_name(
          s.block, "block_sparse_moe.experts." + std::to_string(e) + "." + s.weight + ".weight")] = {info.name, e};
  }

  // A Gemma 2 norm weight stored as 1 + weight.
  bool shifted_norm(const std::string& g) const { return config_.norm_plus_one && g.ends_with("norm.weight"); }

  // The Llama family's tensors under Hugging Face's names; Phi-3 keeps q/k/v and gate/up fused, as its checkpoints.
  std::string to_hf(const std::string& g) const {
    static const std::map<std::string, std::string> globals = {
        {"token_embd.weight", "model.embed_tokens.weight"},
        {"output_norm.weight", "model.norm.weight"},
        {"output.weight", "lm_head.weight"},
    };
    static const std::map<std::string, std::string> per_block = {
        {"attn_norm.weight", "input_layernorm.weight"},
        {"attn_q.weight", "self_attn.q_proj.weight"},
        {"attn_k.weight", "self_attn.k_proj.weight"},
        {"attn_v.weight", "self_attn.v_proj.weight"},
        {"attn_q.bias", "self_attn.q_proj.bias"},
        {"attn_k.bias", "self_attn.k_proj.bias"},
        {"attn_v.bias", "self_attn.v_proj.bias"},
        {"attn_output.weight", "self_attn.o_proj.weight"},
        {"ffn_norm.weight", "post_attention_layernorm.weight"},
        {"ffn_gate.weight", "mlp.gate_proj.weight"},
        {"ffn_up.weight", "mlp.up_proj.weight"},
        {"ffn_down.weight", "mlp.down_proj.weight"},
        {"attn_output.bias", "self_attn.o_proj.bias"},
        {"ffn_gate.bias", "mlp.gate_proj.bias"},
        {"ffn_up.bias", "mlp.up_proj.bias"},
        {"ffn_down.bias", "mlp.down_proj.bias"},
        {"attn_q_norm.weight", "self_attn.q_norm.weight"},
        {"attn_k_norm.weight", "self_attn.k_norm.weight"},
        {"ffn_gate_inp.weight", "block_sparse_moe.gate.weight"},
    };
    static const std::map<std::string, std::string> phi3_fused = {{"attn_qkv.weight", "self_attn.qkv_proj.weight"},
                                                                  {"ffn_up.weight", "mlp.gate_up_proj.weight"}};
    // Gemma 2's four norms: ffn_norm is the MLP's input norm, which Hugging Face calls pre_feedforward_layernorm.
    static const std::map<std::string, std::string> gemma2 = {
        {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
        {"post_attention_norm.weight", "post_attention_layernorm.weight"},
        {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
    };
    if (auto it = globals.find(g); it != globals.end()) return it->second;
    const auto [block, suffix] = block_and_suffix(g);
    if (block < 0) return {};
    const auto& names = config_.arch == "phi3" && phi3_fused.count(suffix) ? phi3_fused
                        : config_.arch == "gemma2" && gemma2.count(suffix) ? gemma2
                                                                           : per_block;
    if (auto it = names.find(suffix); it != names.end()) return block_tensor_name(block, it->second);
    return {};
  }

  // Falcon's and BLOOM's tensors under the names of their Hugging Face checkpoints (FalconModel's and BloomModel's,
  // without "transformer."); attn_qkv, already all q, all k, all v, is the blocks' regrouped self_attention.qkv.
  std::string bloom_to_hf(const std::string& g) const {
    static const std::map<std::string, std::string> globals = {
        {"token_embd.weight", "word_embeddings.weight"},
        {"token_embd_norm.weight", "word_embeddings_layernorm.weight"},
        {"token_embd_norm.bias", "word_embeddings_layernorm.bias"},
        {"output_norm.weight", "ln_f.weight"},
        {"output_norm.bias", "ln_f.bias"},
        {"output.weight", "lm_head.weight"},
    };
    const std::string attn_norm = config_.separate_mlp_norm ? "ln_attn" : "input_layernorm";
    const std::map<std::string, std::string> per_block = {
        {"attn_norm.weight", attn_norm + ".weight"},
        {"attn_norm.bias", attn_norm + ".bias"},
        {"attn_norm_2.weight", "ln_mlp.weight"},
        {"attn_norm_2.bias", "ln_mlp.bias"},
        {"ffn_norm.weight", "post_attention_layernorm.weight"},
        {"ffn_norm.bias", "post_attention_layernorm.bias"},
        {"attn_qkv.weight", "self_attention.qkv.weight"},
        {"attn_qkv.bias", "self_attention.qkv.bias"},
        {"attn_output.weight", "self_attention.dense.weight"},
        {"attn_output.bias", "self_attention.dense.bias"},
        {"ffn_up.weight", "mlp.dense_h_to_4h.weight"},
        {"ffn_up.bias", "mlp.dense_h_to_4h.bias"},
        {"ffn_down.weight", "mlp.dense_4h_to_h.weight"},
        {"ffn_down.bias", "mlp.dense_4h_to_h.bias"},
    };
    if (auto it = globals.find(g); it != globals.end()) return it->second;
    const auto [block, suffix] = block_and_suffix(g);
    if (block < 0) return {};
    if (auto it = per_block.find(suffix); it != per_block.end()) return BloomNames::block_name(block, it->second);
    return {};
  }

  // "blk.N.rest" as (N, rest); (-1, "") for a tensor outside the blocks.
  std::pair<int64_t, std::string> block_and_suffix(const std::string& g) const {
    static const std::regex block(R"(blk\.(\d+)\.(.+))");
    std::smatch m;
    if (!std::regex_match(g, m, block)) return {-1, ""};
    const auto n = parse_block_number(m[1].str());
    if (!n)
      throw std::runtime_error(gguf_->path() + ": tensor '" + g + "' names block " + m[1].str() + ", out of range");
    return {*n, m[2].str()};
  }

  std::shared_ptr<GgufFile> gguf_;
  ModelConfig config_;
  bool permuted_qk_ = false;
  // Hugging Face name -> the GGUF tensor holding it (and which expert of a stack, or -1).
  struct Mapped {
    std::string name;
    int64_t expert = -1;
  };
  std::map<std::string, Mapped> hf_to_gguf_;
};

}  // namespace

std::shared_ptr<WeightSource> open_weights(const std::string& path) {
  const fs::path p(path);
  if (fs::is_directory(p)) return std::make_shared<SafetensorsSource>(p);
  if (!fs::exists(p)) throw std::runtime_error(path + ": no such model file or directory");
  if (p.extension() == ".gguf") return std::make_shared<GgufSource>(path);
  throw std::runtime_error(path + ": not a model directory or a .gguf file");
}

}  // namespace corolla
