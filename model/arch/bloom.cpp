// BLOOM block (BigScience's BLOOM and BLOOMZ, the models Petals was built for):
//
//   h = x + dense(attention(q, k, v) with ALiBi)     q, k, v = query_key_value(n), n = layer_norm(x)
//   y = h + dense_4h_to_h(gelu_tanh(dense_h_to_4h(m)))  with m = layer_norm(h)
//
// Every projection has a bias, both norms are LayerNorms with biases, and positions enter only as ALiBi: head h's
// score for key slot s gains slope(h) · s (AttentionSpec::alibi_slope), so there is no RoPE. query_key_value is
// stored interleaved head by head ([heads, 3, head_dim] rows); it is regrouped on load into all q rows, all k, all v
// and used as three row views, and kept in that form (self_attention.qkv.weight) by the weights cache.
//
// Checkpoints name the tensors h.N.… (BloomModel) or transformer.h.N.… (BloomForCausalLM); both load.
#include <array>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "model/arch/bloom_names.hpp"
#include "model/arch/registry.hpp"
#include "model/arch/attention_runs.hpp"
#include "model/weights/load_weight.hpp"

namespace corolla {
namespace {

struct BloomWeights {
  Tensor ln1_w, ln1_b, wqkv, bqkv, wq, wk, wv, bq, bk, bv, wo, bo, ln2_w, ln2_b, w_up, b_up, w_down, b_down;
};

// Row i of the regrouped q/k/v is row qkv_order[i] of BLOOM's [heads, 3, head_dim] layout.
std::vector<int64_t> qkv_order(int64_t heads, int64_t head_dim) {
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(3 * heads * head_dim));
  for (int64_t part = 0; part < 3; ++part)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < head_dim; ++i) order.push_back((h * 3 + part) * head_dim + i);
  return order;
}

class BloomBlock final : public Block {
 public:
  BloomBlock(const WeightSource& src, int64_t index, Backend& backend, const BlockLoadOptions& opt)
      : index_(index),
        backend_(backend),
        c_(src.config()),
        names_(src, BloomNames::block_name(index, "input_layernorm.weight")),
        attention_{1.0f / std::sqrt(static_cast<float>(c_.head_dim)), 0, c_.num_heads} {
    const int64_t d = c_.hidden_size, qd = c_.num_heads * c_.head_dim, ff = c_.intermediate_size;
    auto name = [&](const char* suffix) { return names_.block(index, suffix); };
    auto& w = w_;
    w.ln1_w = load_vector(src, name("input_layernorm.weight"), d, backend);
    w.ln1_b = load_vector(src, name("input_layernorm.bias"), d, backend);
    if (src.has(name("self_attention.qkv.weight"))) {  // regrouped already (a weights cache entry)
      w.wqkv = load_matrix(src, name("self_attention.qkv.weight"), {3 * qd, d}, opt.dtype, backend);
      w.bqkv = load_vector(src, name("self_attention.qkv.bias"), 3 * qd, backend);
    } else {
      const std::vector<int64_t> order = qkv_order(c_.num_heads, c_.head_dim);
      w.wqkv = load_matrix(src, name("self_attention.query_key_value.weight"), {3 * qd, d}, opt.dtype, backend, order);
      w.bqkv = load_vector(src, name("self_attention.query_key_value.bias"), 3 * qd, backend, order);
    }
    w.wq = w.wqkv.slice_rows(0, qd);
    w.wk = w.wqkv.slice_rows(qd, 2 * qd);
    w.wv = w.wqkv.slice_rows(2 * qd, 3 * qd);
    w.bq = w.bqkv.slice_rows(0, qd);
    w.bk = w.bqkv.slice_rows(qd, 2 * qd);
    w.bv = w.bqkv.slice_rows(2 * qd, 3 * qd);
    w.wo = load_matrix(src, name("self_attention.dense.weight"), {d, qd}, opt.dtype, backend);
    w.bo = load_vector(src, name("self_attention.dense.bias"), d, backend);
    w.ln2_w = load_vector(src, name("post_attention_layernorm.weight"), d, backend);
    w.ln2_b = load_vector(src, name("post_attention_layernorm.bias"), d, backend);
    w.w_up = load_matrix(src, name("mlp.dense_h_to_4h.weight"), {ff, d}, opt.dtype, backend);
    w.b_up = load_vector(src, name("mlp.dense_h_to_4h.bias"), ff, backend);
    w.w_down = load_matrix(src, name("mlp.dense_4h_to_h.weight"), {d, ff}, opt.dtype, backend);
    w.b_down = load_vector(src, name("mlp.dense_4h_to_h.bias"), d, backend);
  }

  int64_t index() const override { return index_; }
  Backend& backend() const override { return backend_; }

  int64_t weight_bytes() const override {
    int64_t n = 0;
    for (const auto& [name, t] : named_weights()) n += t.nbytes();
    return n;
  }

  std::vector<std::pair<std::string, Tensor>> named_weights() const override {
    auto name = [&](const char* suffix) { return names_.block(index_, suffix); };
    return {{name("input_layernorm.weight"), w_.ln1_w},          {name("input_layernorm.bias"), w_.ln1_b},
            {name("self_attention.qkv.weight"), w_.wqkv},        {name("self_attention.qkv.bias"), w_.bqkv},
            {name("self_attention.dense.weight"), w_.wo},        {name("self_attention.dense.bias"), w_.bo},
            {name("post_attention_layernorm.weight"), w_.ln2_w}, {name("post_attention_layernorm.bias"), w_.ln2_b},
            {name("mlp.dense_h_to_4h.weight"), w_.w_up},         {name("mlp.dense_h_to_4h.bias"), w_.b_up},
            {name("mlp.dense_4h_to_h.weight"), w_.w_down},       {name("mlp.dense_4h_to_h.bias"), w_.b_down}};
  }

  // ALiBi is computed on the device from the slots.
  bool recordable() const override { return true; }

  int64_t kv_heads() const override { return c_.num_heads; }
  int64_t kv_head_dim() const override { return c_.head_dim; }

  void forward_batch(Tensor& hidden, std::span<const BlockSegment> segments) override {
    Backend& be = backend_;
    check_segments(index_, c_.hidden_size, hidden, segments);
    for (const BlockSegment& s : segments) refuse_lora(s.lora);
    const int64_t m = hidden.dim(0), d = c_.hidden_size;
    const int64_t heads = c_.num_heads, hd = c_.head_dim;
    Tensor& x = hidden;
    Tensor n = be.alloc(DType::f32, {m, d});
    Tensor q = be.alloc(DType::f32, {m, heads * hd}), k = be.alloc(DType::f32, {m, heads * hd});
    Tensor v = be.alloc(DType::f32, {m, heads * hd}), att = be.alloc(DType::f32, {m, heads * hd});
    const float eps = static_cast<float>(c_.norm_eps);
    be.layer_norm(x, w_.ln1_w, w_.ln1_b, eps, n);
    project_qkv(n, q, k, v);
    // ALiBi in place of RoPE: keys and values go to the cache as they are (model/arch/attention_runs.hpp).
    for (const AttentionRun& a : AttentionRuns(*this, segments)) {
      const Shape shape{a.batch, a.tokens, heads, hd};
      be.kv_write(a.rows_of(k).reshaped(shape), a.rows_of(v).reshaped(shape), a.slots, a.pages);
      Tensor out = a.rows_of(att);
      be.attention(a.rows_of(q).reshaped(shape), a.pages, a.slots, attention_, out);
    }
    be.matmul_add(att, w_.wo, &w_.bo, x);

    be.layer_norm(x, w_.ln2_w, w_.ln2_b, eps, n);
    Tensor up = be.alloc(DType::f32, {m, c_.intermediate_size});
    be.matmul(n, w_.w_up, &w_.b_up, up);
    be.gelu(up, Gelu::tanh, up);
    be.matmul_add(up, w_.w_down, &w_.b_down, x);
  }

  void backward(const Tensor& hidden_in, std::span<const int32_t> positions, Tensor& grad,
                const BlockLora* lora) override {
    Backend& be = backend_;
    check(hidden_in, positions, lora);
    if (grad.shape() != hidden_in.shape())
      throw std::invalid_argument("block " + std::to_string(index_) + ": gradient " + grad.describe() +
                                  " does not match the hidden states " + hidden_in.describe());
    const int64_t b = hidden_in.dim(0), t = hidden_in.dim(1), d = c_.hidden_size, m = b * t;
    const int64_t heads = c_.num_heads, hd = c_.head_dim, ff = c_.intermediate_size;
    const float eps = static_cast<float>(c_.norm_eps);
    const Tensor x = hidden_in.reshaped({m, d});

    // The stateless forward again, keeping q, k, v, h and the MLP's pre-activation u.
    Tensor q = be.alloc(DType::f32, {m, heads * hd}), k = be.alloc(DType::f32, {m, heads * hd});
    Tensor v = be.alloc(DType::f32, {m, heads * hd}), att = be.alloc(DType::f32, {m, heads * hd});
    Tensor n = be.alloc(DType::f32, {m, d}), h = be.alloc(DType::f32, {m, d}), u = be.alloc(DType::f32, {m, ff});
    be.layer_norm(x, w_.ln1_w, w_.ln1_b, eps, n);
    project_qkv(n, q, k, v);
    ContiguousKv own(k.reshaped({b, t, heads, hd}), v.reshaped({b, t, heads, hd}));
    be.attention(q.reshaped({b, t, heads, hd}), own.pages(), sequence_slots(b, t), attention_, att);
    be.matmul(att, w_.wo, &w_.bo, n);
    be.add(x, n, h);
    be.layer_norm(h, w_.ln2_w, w_.ln2_b, eps, n);
    be.matmul(n, w_.w_up, &w_.b_up, u);

    Tensor dy = grad.reshaped({m, d});  // becomes dL/dh, then dL/dx, in place
    Tensor dn = be.alloc(DType::f32, {m, d}), tmp = be.alloc(DType::f32, {m, d});
    // y = h + down(gelu(u)) + b, u = up(m2) + b, m2 = layer_norm(h)
    Tensor du = be.alloc(DType::f32, {m, ff});
    be.matmul_backward(dy, w_.w_down, du);
    be.gelu_backward(u, Gelu::tanh, du, du);
    be.matmul_backward(du, w_.w_up, dn);
    be.layer_norm_backward(h, w_.ln2_w, eps, dn, tmp);
    be.add(dy, tmp, dy);
    // h = x + dense(attention(q, k, v)) + b, q/k/v = query_key_value(n1), n1 = layer_norm(x)
    Tensor d_att = be.alloc(DType::f32, {m, heads * hd});
    be.matmul_backward(dy, w_.wo, d_att);
    Tensor dq = be.alloc(DType::f32, {m, heads * hd}), dk = be.alloc(DType::f32, {m, heads * hd});
    Tensor dv = be.alloc(DType::f32, {m, heads * hd});
    be.attention_backward(q.reshaped({b, t, heads, hd}), k.reshaped({b, t, heads, hd}), v.reshaped({b, t, heads, hd}),
                          d_att, attention_, dq, dk, dv);
    be.matmul_backward(dq, w_.wq, dn);
    be.matmul_backward(dk, w_.wk, tmp);
    be.add(dn, tmp, dn);
    be.matmul_backward(dv, w_.wv, tmp);
    be.add(dn, tmp, dn);
    be.layer_norm_backward(x, w_.ln1_w, eps, dn, tmp);
    be.add(dy, tmp, dy);
  }

 private:
  void check(const Tensor& hidden, std::span<const int32_t> positions, const BlockLora* lora) const {
    if (hidden.rank() != 3 || hidden.dim(2) != c_.hidden_size)
      throw std::invalid_argument("block " + std::to_string(index_) + ": hidden states " + hidden.describe() +
                                  " are not [batch, tokens, " + std::to_string(c_.hidden_size) + "]");
    if (static_cast<int64_t>(positions.size()) != hidden.dim(0) * hidden.dim(1))
      throw std::invalid_argument("block " + std::to_string(index_) + ": " + std::to_string(positions.size()) +
                                  " positions for " + std::to_string(hidden.dim(0) * hidden.dim(1)) + " tokens");
    refuse_lora(lora);
  }
  // Adapters name Llama's projections (q_proj, gate_proj...); BLOOM's fused query_key_value has none of them.
  void refuse_lora(const BlockLora* lora) const {
    if (lora)
      for (size_t p = 0; p < kProjections; ++p)
        if (lora->pairs[p].a.defined())
          throw std::invalid_argument("block " + std::to_string(index_) +
                                      ": LoRA adapters on BLOOM blocks are not supported");
  }

  void project_qkv(const Tensor& n, Tensor& q, Tensor& k, Tensor& v) {
    const std::array<const Tensor*, 3> ws{&w_.wq, &w_.wk, &w_.wv}, bs{&w_.bq, &w_.bk, &w_.bv};
    const std::array<Tensor*, 3> ys{&q, &k, &v};
    backend_.matmul_many(n, ws, bs, ys);
  }

  int64_t index_;
  Backend& backend_;
  ModelConfig c_;
  BloomNames names_;
  AttentionSpec attention_;  // scale 1/sqrt(head_dim), ALiBi over every head
  BloomWeights w_;
};

}  // namespace

std::unique_ptr<Block> make_bloom_block(const WeightSource& src, int64_t index, Backend& backend,
                                        const BlockLoadOptions& opt) {
  return std::make_unique<BloomBlock>(src, index, backend, opt);
}

}  // namespace corolla
