// Falcon block (TII's Falcon 7B/40B/180B and Falcon 2), in the three layouts its config describes:
//
//   parallel (7B, 40B, 180B, Falcon 2):
//     y = x + dense(attention(rope(q), rope(k), v)) + dense_4h_to_h(gelu(dense_h_to_4h(m)))
//     with q, k, v = query_key_value(n), n = layer_norm(x), and m = n (one input_layernorm) or m = ln_mlp(x) when
//     attention and MLP have LayerNorms of their own (ln_attn, ln_mlp: the 40B/180B "new decoder architecture")
//   sequential (parallel_attn false):
//     h = x + dense(attention(...)) of n = input_layernorm(x);  y = h + dense_4h_to_h(gelu(dense_h_to_4h(
//     post_attention_layernorm(h))))
//
// Norms are LayerNorms with biases; the projections all have biases or none (`bias`); the GELU is the exact one
// (erf) unless the config names the tanh form. query_key_value is stored per KV group: the group's query heads,
// then its key, then its value ([kv_heads, heads/kv_heads + 2, head_dim] rows). Multi-query attention (7B) is the
// case of one group, and the old per-head interleaved q, k, v the case of one query head per group, so one
// regrouping on load serves every layout: all q rows, all k, all v, used as three row views and kept in that form
// (self_attention.qkv.weight) by the weights cache.
//
// Checkpoints name the tensors transformer.h.N.… (FalconForCausalLM) or h.N.… (FalconModel), as BLOOM's do.
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

struct FalconWeights {
  Tensor ln1_w, ln1_b, ln2_w, ln2_b;  // ln2: post_attention_layernorm (sequential) or ln_mlp; absent when shared
  Tensor wqkv, bqkv, wq, wk, wv, bq, bk, bv, wo, bo, w_up, b_up, w_down, b_down;
};

// Row i of the regrouped q/k/v is row qkv_order[i] of the [kv_heads, heads/kv_heads + 2, head_dim] layout.
std::vector<int64_t> qkv_order(int64_t heads, int64_t kv_heads, int64_t head_dim) {
  const int64_t per_group = heads / kv_heads, group_rows = (per_group + 2) * head_dim;
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>((heads + 2 * kv_heads) * head_dim));
  for (int64_t g = 0; g < kv_heads; ++g)  // query head g·per_group + j, as the grouped attention pairs them
    for (int64_t j = 0; j < per_group; ++j)
      for (int64_t i = 0; i < head_dim; ++i) order.push_back(g * group_rows + j * head_dim + i);
  for (int64_t part = 0; part < 2; ++part)  // keys, then values
    for (int64_t g = 0; g < kv_heads; ++g)
      for (int64_t i = 0; i < head_dim; ++i) order.push_back(g * group_rows + (per_group + part) * head_dim + i);
  return order;
}

class FalconBlock final : public Block {
 public:
  FalconBlock(const WeightSource& src, int64_t index, Backend& backend, const BlockLoadOptions& opt)
      : index_(index),
        backend_(backend),
        c_(src.config()),
        names_(src, BloomNames::block_name(index, "self_attention.dense.weight")),
        inv_freq_(c_.rope_inv_freq()),
        attention_{static_cast<float>(c_.rope_attention_factor() * c_.rope_attention_factor() /
                                      std::sqrt(static_cast<double>(c_.head_dim))),
                   0},
        gelu_(c_.hidden_act == "gelu_tanh" ? Gelu::tanh : Gelu::erf) {
    const int64_t d = c_.hidden_size, qd = c_.num_heads * c_.head_dim, kvd = c_.num_kv_heads * c_.head_dim;
    const int64_t ff = c_.intermediate_size, rows = qd + 2 * kvd;
    auto name = [&](const std::string& suffix) { return names_.block(index, suffix); };
    auto& w = w_;
    w.ln1_w = load_vector(src, name(norm1() + ".weight"), d, backend);
    w.ln1_b = load_vector(src, name(norm1() + ".bias"), d, backend);
    if (!norm2().empty()) {
      w.ln2_w = load_vector(src, name(norm2() + ".weight"), d, backend);
      w.ln2_b = load_vector(src, name(norm2() + ".bias"), d, backend);
    }
    if (src.has(name("self_attention.qkv.weight"))) {  // regrouped already (a weights cache entry)
      w.wqkv = load_matrix(src, name("self_attention.qkv.weight"), {rows, d}, opt.dtype, backend);
      if (c_.qkv_bias) w.bqkv = load_vector(src, name("self_attention.qkv.bias"), rows, backend);
    } else {
      const std::vector<int64_t> order = qkv_order(c_.num_heads, c_.num_kv_heads, c_.head_dim);
      w.wqkv = load_matrix(src, name("self_attention.query_key_value.weight"), {rows, d}, opt.dtype, backend, order);
      if (c_.qkv_bias) w.bqkv = load_vector(src, name("self_attention.query_key_value.bias"), rows, backend, order);
    }
    w.wq = w.wqkv.slice_rows(0, qd);
    w.wk = w.wqkv.slice_rows(qd, qd + kvd);
    w.wv = w.wqkv.slice_rows(qd + kvd, rows);
    if (c_.qkv_bias) {
      w.bq = w.bqkv.slice_rows(0, qd);
      w.bk = w.bqkv.slice_rows(qd, qd + kvd);
      w.bv = w.bqkv.slice_rows(qd + kvd, rows);
    }
    w.wo = load_matrix(src, name("self_attention.dense.weight"), {d, qd}, opt.dtype, backend);
    w.w_up = load_matrix(src, name("mlp.dense_h_to_4h.weight"), {ff, d}, opt.dtype, backend);
    w.w_down = load_matrix(src, name("mlp.dense_4h_to_h.weight"), {d, ff}, opt.dtype, backend);
    if (c_.o_bias) w.bo = load_vector(src, name("self_attention.dense.bias"), d, backend);
    if (c_.mlp_bias) {
      w.b_up = load_vector(src, name("mlp.dense_h_to_4h.bias"), ff, backend);
      w.b_down = load_vector(src, name("mlp.dense_4h_to_h.bias"), d, backend);
    }
  }

  int64_t index() const override { return index_; }
  Backend& backend() const override { return backend_; }

  int64_t weight_bytes() const override {
    int64_t n = 0;
    for (const auto& [name, t] : named_weights()) n += t.nbytes();
    return n;
  }

  std::vector<std::pair<std::string, Tensor>> named_weights() const override {
    auto name = [&](const std::string& suffix) { return names_.block(index_, suffix); };
    std::vector<std::pair<std::string, Tensor>> out = {
        {name(norm1() + ".weight"), w_.ln1_w},        {name(norm1() + ".bias"), w_.ln1_b},
        {name("self_attention.qkv.weight"), w_.wqkv}, {name("self_attention.dense.weight"), w_.wo},
        {name("mlp.dense_h_to_4h.weight"), w_.w_up},  {name("mlp.dense_4h_to_h.weight"), w_.w_down}};
    if (!norm2().empty()) {
      out.emplace_back(name(norm2() + ".weight"), w_.ln2_w);
      out.emplace_back(name(norm2() + ".bias"), w_.ln2_b);
    }
    const std::pair<const char*, const Tensor*> biases[] = {{"self_attention.qkv.bias", &w_.bqkv},
                                                            {"self_attention.dense.bias", &w_.bo},
                                                            {"mlp.dense_h_to_4h.bias", &w_.b_up},
                                                            {"mlp.dense_4h_to_h.bias", &w_.b_down}};
    for (const auto& [suffix, t] : biases)
      if (t->defined()) out.emplace_back(name(suffix), *t);
    return out;
  }

  bool recordable() const override { return true; }

  int64_t kv_heads() const override { return c_.num_kv_heads; }
  int64_t kv_head_dim() const override { return c_.head_dim; }

  void forward_batch(Tensor& hidden, std::span<const BlockSegment> segments) override {
    Backend& be = backend_;
    check_segments(index_, c_.hidden_size, hidden, segments);
    for (const BlockSegment& s : segments) refuse_lora(s.lora);
    const int64_t m = hidden.dim(0), d = c_.hidden_size;
    const int64_t hq = c_.num_heads, hkv = c_.num_kv_heads;
    const float eps = static_cast<float>(c_.norm_eps);

    Tensor& x = hidden;
    Tensor n = be.alloc(DType::f32, {m, d});
    Tensor q = be.alloc(DType::f32, {m, hq * c_.head_dim}), att = be.alloc(DType::f32, {m, hq * c_.head_dim});
    Tensor k = be.alloc(DType::f32, {m, hkv * c_.head_dim}), v = be.alloc(DType::f32, {m, hkv * c_.head_dim});
    be.layer_norm(x, w_.ln1_w, w_.ln1_b, eps, n);
    // In parallel, the MLP reads the block's input: its own norm of x is taken before x changes.
    Tensor n_mlp = n;
    if (c_.parallel_attn && c_.separate_mlp_norm) {
      n_mlp = be.alloc(DType::f32, {m, d});
      be.layer_norm(x, w_.ln2_w, w_.ln2_b, eps, n_mlp);
    }
    project_qkv(n, q, k, v);
    for (const AttentionRun& a : AttentionRuns(*this, segments))
      attend(a, a.rows_of(q), a.rows_of(k), a.rows_of(v), a.rows_of(att));
    be.matmul_add(att, w_.wo, bias(w_.bo), x);

    if (!c_.parallel_attn) be.layer_norm(x, w_.ln2_w, w_.ln2_b, eps, n_mlp);  // of h, after attention
    Tensor up = be.alloc(DType::f32, {m, c_.intermediate_size});
    be.matmul(n_mlp, w_.w_up, bias(w_.b_up), up);
    be.gelu(up, gelu_, up);
    be.matmul_add(up, w_.w_down, bias(w_.b_down), x);
  }

  // One run's attention (model/arch/attention_runs.hpp): RoPE, its keys and values into its cache, its queries over
  // the cache (its rows of q [r, Hq·Dh], k, v [r, Hkv·Dh], att [r, Hq·Dh]).
  void attend(const AttentionRun& a, Tensor q, Tensor k, Tensor v, Tensor att) {
    Backend& be = backend_;
    const int64_t b = a.batch, t = a.tokens, r = a.rows();
    const int64_t hq = c_.num_heads, hkv = c_.num_kv_heads, hd = c_.head_dim;
    Tensor q3 = q.reshaped({r, hq, hd}), k3 = k.reshaped({r, hkv, hd});
    if (a.at_positions) {
      be.rope_kv_write(q3, k3, v.reshaped({r, hkv, hd}), a.positions, inv_freq_, a.pages);
    } else {
      be.rope(q3, a.positions, inv_freq_);
      be.rope(k3, a.positions, inv_freq_);
      be.kv_write(k.reshaped({b, t, hkv, hd}), v.reshaped({b, t, hkv, hd}), a.slots, a.pages);
    }
    be.attention(q.reshaped({b, t, hq, hd}), a.pages, a.slots, attention_, att);
  }

  void backward(const Tensor& hidden_in, std::span<const int32_t> positions, Tensor& grad,
                const BlockLora* lora) override {
    Backend& be = backend_;
    check(hidden_in, positions, lora);
    if (grad.shape() != hidden_in.shape())
      throw std::invalid_argument("block " + std::to_string(index_) + ": gradient " + grad.describe() +
                                  " does not match the hidden states " + hidden_in.describe());
    const int64_t b = hidden_in.dim(0), t = hidden_in.dim(1), d = c_.hidden_size, m = b * t;
    const int64_t hq = c_.num_heads, hkv = c_.num_kv_heads, hd = c_.head_dim, ff = c_.intermediate_size;
    const float eps = static_cast<float>(c_.norm_eps);
    const Tensor x = hidden_in.reshaped({m, d});

    // The stateless forward again, keeping q and k after RoPE, v, the MLP's input norm's input (x in parallel, h
    // sequentially) and its pre-activation u.
    Tensor q = be.alloc(DType::f32, {m, hq * hd}), att = be.alloc(DType::f32, {m, hq * hd});
    Tensor k = be.alloc(DType::f32, {m, hkv * hd}), v = be.alloc(DType::f32, {m, hkv * hd});
    Tensor n = be.alloc(DType::f32, {m, d}), u = be.alloc(DType::f32, {m, ff});
    be.layer_norm(x, w_.ln1_w, w_.ln1_b, eps, n);
    project_qkv(n, q, k, v);
    Tensor q3 = q.reshaped({m, hq, hd}), k3 = k.reshaped({m, hkv, hd});
    be.rope(q3, positions, inv_freq_);
    be.rope(k3, positions, inv_freq_);
    ContiguousKv own(k.reshaped({b, t, hkv, hd}), v.reshaped({b, t, hkv, hd}));
    be.attention(q.reshaped({b, t, hq, hd}), own.pages(), sequence_slots(b, t), attention_, att);
    Tensor h;  // sequential: the residual stream after attention, which post_attention_layernorm reads
    Tensor n_mlp = n;
    if (!c_.parallel_attn) {
      h = be.alloc(DType::f32, {m, d});
      n_mlp = be.alloc(DType::f32, {m, d});
      be.matmul(att, w_.wo, bias(w_.bo), n_mlp);
      be.add(x, n_mlp, h);
      be.layer_norm(h, w_.ln2_w, w_.ln2_b, eps, n_mlp);
    } else if (c_.separate_mlp_norm) {
      n_mlp = be.alloc(DType::f32, {m, d});
      be.layer_norm(x, w_.ln2_w, w_.ln2_b, eps, n_mlp);
    }
    be.matmul(n_mlp, w_.w_up, bias(w_.b_up), u);

    Tensor dy = grad.reshaped({m, d});  // becomes dL/dx, in place (sequentially through dL/dh)
    Tensor dn_mlp = be.alloc(DType::f32, {m, d}), tmp = be.alloc(DType::f32, {m, d});
    // The MLP: y gains down(gelu(u)) + b, u = up(n_mlp) + b.
    Tensor du = be.alloc(DType::f32, {m, ff});
    be.matmul_backward(dy, w_.w_down, du);
    be.gelu_backward(u, gelu_, du, du);
    be.matmul_backward(du, w_.w_up, dn_mlp);
    if (!c_.parallel_attn) {  // through post_attention_layernorm into dL/dh
      be.layer_norm_backward(h, w_.ln2_w, eps, dn_mlp, tmp);
      be.add(dy, tmp, dy);
    } else if (c_.separate_mlp_norm) {  // through ln_mlp into dL/dx, which the attention's part joins below
      be.layer_norm_backward(x, w_.ln2_w, eps, dn_mlp, tmp);
    }
    // The attention: dense(attention(rope(q), rope(k), v)) + b, q/k/v = query_key_value(n), n = layer_norm(x).
    Tensor d_att = be.alloc(DType::f32, {m, hq * hd});
    be.matmul_backward(dy, w_.wo, d_att);
    if (c_.parallel_attn && c_.separate_mlp_norm) be.add(dy, tmp, dy);  // ln_mlp's part, now that dy was used
    Tensor dq = be.alloc(DType::f32, {m, hq * hd});
    Tensor dk = be.alloc(DType::f32, {m, hkv * hd}), dv = be.alloc(DType::f32, {m, hkv * hd});
    be.attention_backward(q.reshaped({b, t, hq, hd}), k.reshaped({b, t, hkv, hd}), v.reshaped({b, t, hkv, hd}), d_att,
                          attention_, dq, dk, dv);
    std::vector<int32_t> back(positions.begin(), positions.end());
    for (int32_t& p : back) p = -p;  // the inverse rotation is the gradient of RoPE
    Tensor dq3 = dq.reshaped({m, hq, hd}), dk3 = dk.reshaped({m, hkv, hd});
    be.rope(dq3, back, inv_freq_);
    be.rope(dk3, back, inv_freq_);
    Tensor dn = be.alloc(DType::f32, {m, d});
    be.matmul_backward(dq, w_.wq, dn);
    be.matmul_backward(dk, w_.wk, tmp);
    be.add(dn, tmp, dn);
    be.matmul_backward(dv, w_.wv, tmp);
    be.add(dn, tmp, dn);
    if (c_.parallel_attn && !c_.separate_mlp_norm) be.add(dn, dn_mlp, dn);  // one norm feeds both
    be.layer_norm_backward(x, w_.ln1_w, eps, dn, tmp);
    be.add(dy, tmp, dy);
  }

 private:
  // The LayerNorm before attention, and the MLP's own one ("" when the MLP reads the same).
  std::string norm1() const { return c_.parallel_attn && c_.separate_mlp_norm ? "ln_attn" : "input_layernorm"; }
  std::string norm2() const {
    if (!c_.parallel_attn) return "post_attention_layernorm";
    return c_.separate_mlp_norm ? "ln_mlp" : "";
  }

  static const Tensor* bias(const Tensor& b) { return b.defined() ? &b : nullptr; }

  void check(const Tensor& hidden, std::span<const int32_t> positions, const BlockLora* lora) const {
    if (hidden.rank() != 3 || hidden.dim(2) != c_.hidden_size)
      throw std::invalid_argument("block " + std::to_string(index_) + ": hidden states " + hidden.describe() +
                                  " are not [batch, tokens, " + std::to_string(c_.hidden_size) + "]");
    if (static_cast<int64_t>(positions.size()) != hidden.dim(0) * hidden.dim(1))
      throw std::invalid_argument("block " + std::to_string(index_) + ": " + std::to_string(positions.size()) +
                                  " positions for " + std::to_string(hidden.dim(0) * hidden.dim(1)) + " tokens");
    refuse_lora(lora);
  }
  // Adapters name Llama's projections (q_proj, gate_proj...); Falcon's fused query_key_value has none of them.
  void refuse_lora(const BlockLora* lora) const {
    if (lora)
      for (size_t p = 0; p < kProjections; ++p)
        if (lora->pairs[p].a.defined())
          throw std::invalid_argument("block " + std::to_string(index_) +
                                      ": LoRA adapters on Falcon blocks are not supported");
  }

  void project_qkv(const Tensor& n, Tensor& q, Tensor& k, Tensor& v) {
    const std::array<const Tensor*, 3> ws{&w_.wq, &w_.wk, &w_.wv};
    const std::array<const Tensor*, 3> bs{bias(w_.bq), bias(w_.bk), bias(w_.bv)};
    const std::array<Tensor*, 3> ys{&q, &k, &v};
    backend_.matmul_many(n, ws, bs, ys);
  }

  int64_t index_;
  Backend& backend_;
  ModelConfig c_;
  BloomNames names_;
  std::vector<float> inv_freq_;
  AttentionSpec attention_;  // scale 1/sqrt(head_dim) (times yarn's attention factor squared), no window
  Gelu gelu_;
  FalconWeights w_;
};

}  // namespace

std::unique_ptr<Block> make_falcon_block(const WeightSource& src, int64_t index, Backend& backend,
                                         const BlockLoadOptions& opt) {
  return std::make_unique<FalconBlock>(src, index, backend, opt);
}

}  // namespace corolla
