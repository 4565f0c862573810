// Writes a random-weight model of TinyLlama-1.1B's shape (vocabulary 32000, hidden 2048, 22 blocks, 32 heads with
// 4 KV heads, intermediate 5632) as a Hugging Face directory: config.json + model.safetensors in bf16 (2.2 GB).
// With --experts=E (and --experts-per-token=K, default 2) a Mixtral of that shape instead: each block's MLP is E
// SwiGLU experts of intermediate 5632 and a router choosing K of them per token (bf16: 553 MB of experts per block).
//
//   make_bench_model --out=DIR [--layers=22] [--dtype=bf16|f16|f32] [--experts=0] [--experts-per-token=2]
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "bench/bench_util.hpp"
#include "model/weights/safetensors_file.hpp"

using namespace corolla;

namespace {

// Weights ~ U(-a, a) with a chosen so activations stay O(1) through the blocks; norms are 1.
Tensor random_matrix(int64_t rows, int64_t cols, DType dtype, uint64_t seed, float scale) {
  Tensor f = Tensor::empty(DType::f32, {rows, cols});
  float* p = f.data_as<float>();
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i < f.numel(); ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    p[i] = scale * (static_cast<float>(s >> 40) / static_cast<float>(1 << 24) * 2.f - 1.f);
  }
  return dtype == DType::f32 ? f : f.cast(dtype);
}

Tensor ones(int64_t n) {
  Tensor t = Tensor::empty(DType::f32, {n});
  for (int64_t i = 0; i < n; ++i) t.data_as<float>()[i] = 1.f;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string out = bench::arg(argc, argv, "out", "");
  if (out.empty()) {
    std::fprintf(stderr,
                 "usage: make_bench_model --out=DIR [--layers=22] [--dtype=bf16] [--experts=0] "
                 "[--experts-per-token=2]\n");
    return 2;
  }
  const int64_t layers = std::stoll(bench::arg(argc, argv, "layers", "22"));
  const auto dtype = parse_dtype(bench::arg(argc, argv, "dtype", "bf16"));
  if (!dtype) throw std::invalid_argument("--dtype: unknown dtype");
  const int64_t experts = std::stoll(bench::arg(argc, argv, "experts", "0"));
  const int64_t per_token = std::stoll(bench::arg(argc, argv, "experts-per-token", "2"));
  if (experts < 0 || (experts > 0 && (per_token < 1 || per_token > experts)))
    throw std::invalid_argument("--experts-per-token must be in 1..--experts");
  const int64_t vocab = 32000, hidden = 2048, inter = 5632, heads = 32, kv_heads = 4, head_dim = hidden / heads;
  std::filesystem::create_directories(out);
  const std::string arch = experts > 0 ? R"("architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
  "num_local_experts": )" + std::to_string(experts) +
                                             R"(, "num_experts_per_tok": )" + std::to_string(per_token) + ","
                                       : R"("architectures": ["LlamaForCausalLM"], "model_type": "llama",)";
  std::ofstream(out + "/config.json") << "{\n  " << arch << R"( "vocab_size": 32000, "hidden_size": 2048,
  "intermediate_size": 5632, "num_hidden_layers": )"
                                      << layers << R"(, "num_attention_heads": 32,
  "num_key_value_heads": 4, "max_position_embeddings": 2048, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"
})";
  std::vector<std::pair<std::string, Tensor>> tensors;
  uint64_t seed = 1;
  const float a_h = 1.7f / std::sqrt(static_cast<float>(hidden)), a_i = 1.7f / std::sqrt(static_cast<float>(inter));
  tensors.emplace_back("model.embed_tokens.weight", random_matrix(vocab, hidden, *dtype, seed++, 1.0f));
  for (int64_t l = 0; l < layers; ++l) {
    auto name = [&](const char* s) { return "model.layers." + std::to_string(l) + "." + s; };
    tensors.emplace_back(name("input_layernorm.weight"), ones(hidden));
    tensors.emplace_back(name("self_attn.q_proj.weight"), random_matrix(hidden, hidden, *dtype, seed++, a_h));
    tensors.emplace_back(name("self_attn.k_proj.weight"),
                         random_matrix(kv_heads * head_dim, hidden, *dtype, seed++, a_h));
    tensors.emplace_back(name("self_attn.v_proj.weight"),
                         random_matrix(kv_heads * head_dim, hidden, *dtype, seed++, a_h));
    tensors.emplace_back(name("self_attn.o_proj.weight"), random_matrix(hidden, hidden, *dtype, seed++, a_h));
    tensors.emplace_back(name("post_attention_layernorm.weight"), ones(hidden));
    if (experts == 0) {
      tensors.emplace_back(name("mlp.gate_proj.weight"), random_matrix(inter, hidden, *dtype, seed++, a_h));
      tensors.emplace_back(name("mlp.up_proj.weight"), random_matrix(inter, hidden, *dtype, seed++, a_h));
      tensors.emplace_back(name("mlp.down_proj.weight"), random_matrix(hidden, inter, *dtype, seed++, a_i));
    }
    // The router's logits O(1) apart, so tokens spread over the experts.
    if (experts > 0)
      tensors.emplace_back(name("block_sparse_moe.gate.weight"),
                           random_matrix(experts, hidden, DType::f32, seed++, a_h));
    for (int64_t e = 0; e < experts; ++e) {
      auto expert = [&](const char* w) {
        return name("block_sparse_moe.experts.") + std::to_string(e) + "." + w + ".weight";
      };
      tensors.emplace_back(expert("w1"), random_matrix(inter, hidden, *dtype, seed++, a_h));
      tensors.emplace_back(expert("w3"), random_matrix(inter, hidden, *dtype, seed++, a_h));
      tensors.emplace_back(expert("w2"), random_matrix(hidden, inter, *dtype, seed++, a_i));
    }
    std::fprintf(stderr, "\rblock %lld/%lld", static_cast<long long>(l + 1), static_cast<long long>(layers));
  }
  tensors.emplace_back("model.norm.weight", ones(hidden));
  tensors.emplace_back("lm_head.weight", random_matrix(vocab, hidden, *dtype, seed++, a_h));
  write_safetensors(out + "/model.safetensors", tensors);
  std::fprintf(stderr, "\nwrote %s\n", out.c_str());
  return 0;
}
