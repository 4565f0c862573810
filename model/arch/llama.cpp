// Llama block (Llama 2/3, Mistral, SmolLM2; Qwen2 adds q/k/v biases):
//
//   h = x + o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n)))   with n = rms_norm(x)
//   y = h + down_proj(silu(gate_proj(m)) · up_proj(m))                         with m = rms_norm(h)
#include <cmath>
#include <numeric>
#include <vector>

#include "model/arch/registry.hpp"
#include "model/weights/load_weight.hpp"

namespace corolla {
namespace {

struct LlamaWeights {
  Tensor attn_norm, wq, wk, wv, wo, bq, bk, bv, ffn_norm, w_gate, w_up, w_down;
};

class LlamaBlock final : public Block {
 public:
  LlamaBlock(const WeightSource& src, int64_t index, Backend& backend, const BlockLoadOptions& opt, bool qkv_bias)
      : index_(index), backend_(backend), c_(src.config()), inv_freq_(c_.rope_inv_freq()) {
    const int64_t d = c_.hidden_size, q = c_.num_heads * c_.head_dim, kv = c_.num_kv_heads * c_.head_dim;
    const int64_t ff = c_.intermediate_size;
    auto name = [&](const char* suffix) { return block_tensor_name(index, suffix); };
    auto& w = w_;
    w.attn_norm = load_vector(src, name("input_layernorm.weight"), d, backend);
    w.wq = load_matrix(src, name("self_attn.q_proj.weight"), {q, d}, opt.dtype, backend);
    w.wk = load_matrix(src, name("self_attn.k_proj.weight"), {kv, d}, opt.dtype, backend);
    w.wv = load_matrix(src, name("self_attn.v_proj.weight"), {kv, d}, opt.dtype, backend);
    w.wo = load_matrix(src, name("self_attn.o_proj.weight"), {d, q}, opt.dtype, backend);
    if (qkv_bias) {
      w.bq = load_vector(src, name("self_attn.q_proj.bias"), q, backend);
      w.bk = load_vector(src, name("self_attn.k_proj.bias"), kv, backend);
      w.bv = load_vector(src, name("self_attn.v_proj.bias"), kv, backend);
    }
    w.ffn_norm = load_vector(src, name("post_attention_layernorm.weight"), d, backend);
    w.w_gate = load_matrix(src, name("mlp.gate_proj.weight"), {ff, d}, opt.dtype, backend);
    w.w_up = load_matrix(src, name("mlp.up_proj.weight"), {ff, d}, opt.dtype, backend);
    w.w_down = load_matrix(src, name("mlp.down_proj.weight"), {d, ff}, opt.dtype, backend);
  }

  int64_t index() const override { return index_; }

  int64_t weight_bytes() const override {
    int64_t n = 0;
    for (const Tensor* t : {&w_.attn_norm, &w_.wq, &w_.wk, &w_.wv, &w_.wo, &w_.bq, &w_.bk, &w_.bv, &w_.ffn_norm,
                            &w_.w_gate, &w_.w_up, &w_.w_down})
      n += t->nbytes();
    return n;
  }

  std::vector<std::pair<std::string, Tensor>> named_weights() const override {
    auto name = [&](const char* suffix) { return block_tensor_name(index_, suffix); };
    std::vector<std::pair<std::string, Tensor>> out = {
        {name("input_layernorm.weight"), w_.attn_norm},         {name("self_attn.q_proj.weight"), w_.wq},
        {name("self_attn.k_proj.weight"), w_.wk},               {name("self_attn.v_proj.weight"), w_.wv},
        {name("self_attn.o_proj.weight"), w_.wo},               {name("post_attention_layernorm.weight"), w_.ffn_norm},
        {name("mlp.gate_proj.weight"), w_.w_gate},              {name("mlp.up_proj.weight"), w_.w_up},
        {name("mlp.down_proj.weight"), w_.w_down}};
    if (w_.bq.defined()) {
      out.emplace_back(name("self_attn.q_proj.bias"), w_.bq);
      out.emplace_back(name("self_attn.k_proj.bias"), w_.bk);
      out.emplace_back(name("self_attn.v_proj.bias"), w_.bv);
    }
    return out;
  }

  KVCache make_cache(int64_t batch, int64_t max_length) override {
    return {backend_.alloc(DType::f32, {batch, max_length, c_.num_kv_heads, c_.head_dim}),
            backend_.alloc(DType::f32, {batch, max_length, c_.num_kv_heads, c_.head_dim})};
  }

  void forward(Tensor& hidden, std::span<const int32_t> positions, KVCache* cache) override {
    Backend& be = backend_;
    const int64_t b = hidden.dim(0), t = hidden.dim(1), d = c_.hidden_size, m = b * t;
    const int64_t hq = c_.num_heads, hkv = c_.num_kv_heads, hd = c_.head_dim;
    if (hidden.rank() != 3 || hidden.dim(2) != d)
      throw std::invalid_argument("block " + std::to_string(index_) + ": hidden states " + hidden.describe() +
                                  " are not [batch, tokens, " + std::to_string(d) + "]");
    if (static_cast<int64_t>(positions.size()) != m)
      throw std::invalid_argument("block " + std::to_string(index_) + ": " + std::to_string(positions.size()) +
                                  " positions for " + std::to_string(m) + " tokens");
    // Without a cache each sequence gets a scratch cache of its own t tokens (slot = index in the sequence), so
    // positions may have gaps: they only rotate queries and keys.
    KVCache scratch;
    std::vector<int32_t> local_slots;
    std::span<const int32_t> slots = positions;
    if (!cache) {
      scratch = make_cache(b, t);
      cache = &scratch;
      local_slots.resize(static_cast<size_t>(m));
      for (int64_t i = 0; i < m; ++i) local_slots[static_cast<size_t>(i)] = static_cast<int32_t>(i % t);
      slots = local_slots;
    } else if (cache->batch() != b) {
      throw std::invalid_argument("block " + std::to_string(index_) + ": batch of " + std::to_string(b) +
                                  " does not match the session's cache batch " + std::to_string(cache->batch()));
    }

    Tensor x = hidden.reshaped({m, d});
    Tensor n = be.alloc(DType::f32, {m, d});
    Tensor q = be.alloc(DType::f32, {m, hq * hd});
    Tensor k = be.alloc(DType::f32, {m, hkv * hd});
    Tensor v = be.alloc(DType::f32, {m, hkv * hd});
    Tensor att = be.alloc(DType::f32, {m, hq * hd});

    be.rms_norm(x, w_.attn_norm, static_cast<float>(c_.rms_norm_eps), n);
    be.matmul(n, w_.wq, w_.bq.defined() ? &w_.bq : nullptr, q);
    be.matmul(n, w_.wk, w_.bk.defined() ? &w_.bk : nullptr, k);
    be.matmul(n, w_.wv, w_.bv.defined() ? &w_.bv : nullptr, v);
    Tensor q3 = q.reshaped({m, hq, hd}), k3 = k.reshaped({m, hkv, hd});
    be.rope(q3, positions, inv_freq_);
    be.rope(k3, positions, inv_freq_);
    be.kv_write(k.reshaped({b, t, hkv, hd}), v.reshaped({b, t, hkv, hd}), slots, cache->k, cache->v);
    be.attention(q.reshaped({b, t, hq, hd}), cache->k, cache->v, slots, 1.0f / std::sqrt(static_cast<float>(hd)), att);
    be.matmul(att, w_.wo, nullptr, n);
    be.add(x, n, x);

    Tensor gate = be.alloc(DType::f32, {m, c_.intermediate_size});
    Tensor up = be.alloc(DType::f32, {m, c_.intermediate_size});
    be.rms_norm(x, w_.ffn_norm, static_cast<float>(c_.rms_norm_eps), n);
    be.matmul(n, w_.w_gate, nullptr, gate);
    be.matmul(n, w_.w_up, nullptr, up);
    be.silu_mul(gate, up, gate);
    be.matmul(gate, w_.w_down, nullptr, n);
    be.add(x, n, x);
  }

 private:
  int64_t index_;
  Backend& backend_;
  ModelConfig c_;
  std::vector<float> inv_freq_;
  LlamaWeights w_;
};

}  // namespace

std::unique_ptr<Block> make_llama_block(const WeightSource& src, int64_t index, Backend& backend,
                                        const BlockLoadOptions& opt) {
  return std::make_unique<LlamaBlock>(src, index, backend, opt, src.config().attention_bias);
}

}  // namespace corolla
