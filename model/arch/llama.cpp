// Llama block (Llama 2/3, Mistral, SmolLM2; Qwen2 adds q/k/v biases):
//
//   h = x + o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n)))   with n = rms_norm(x)
//   y = h + down_proj(silu(gate_proj(m)) · up_proj(m))                         with m = rms_norm(h)
//
// Each projection has a bias where the config says so (ModelConfig::qkv_bias, o_bias, mlp_bias), the attention
// slides over the last sliding_window tokens on the layers the config marks, and with qk_norm (Qwen3) each head's
// query and key pass an RMSNorm of their own before RoPE. Mixtral's block is this one with a mixture of experts
// (model/arch/sparse_moe.hpp) in place of the MLP; Phi-3's stores q/k/v and gate/up fused (row slices are used).
// Gemma 2's (model/arch/gemma2.cpp) adds post-norms: attention's and the MLP's outputs each pass an RMSNorm before
// their residual add (post_norms; the MLP's input norm is then pre_feedforward_layernorm), every norm scales by
// 1 + weight (norm_plus_one), the MLP is GeGLU (hidden_act gelu_tanh), the scores are scaled by
// query_pre_attn_scalar^-0.5 and soft-capped (attn_softcap):
//
//   h = x + post_attention_norm(o_proj(attention(...)))
//   y = h + post_feedforward_norm(down_proj(gelu(gate_proj(m)) · up_proj(m)))   with m = pre_feedforward_norm(h)
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <vector>

#include "model/arch/registry.hpp"
#include "model/arch/attention_runs.hpp"
#include "model/arch/sparse_moe.hpp"
#include "model/weights/load_weight.hpp"

namespace corolla {
namespace {

struct LlamaWeights {
  Tensor attn_norm, wq, wk, wv, wo, bq, bk, bv, bo, q_norm, k_norm, ffn_norm, w_gate, w_up, w_down, b_gate, b_up,
      b_down;
  Tensor post_attn_norm, post_ffn_norm;  // Gemma 2's post-norms (undefined without post_norms)
  Tensor wqkv, w_gate_up;  // the stored matrices when q/k/v and gate/up are fused (wq... are views into them)
};

class LlamaBlock final : public Block {
 public:
  LlamaBlock(const WeightSource& src, int64_t index, Backend& backend, const BlockLoadOptions& opt)
      : index_(index),
        backend_(backend),
        c_(src.config()),
        inv_freq_(c_.rope_inv_freq()),
        inv_freq_long_(c_.rope_depends_on_length() ? c_.rope_inv_freq(c_.max_position) : std::vector<float>{}),
        rope_scale_(c_.rope_dim() != c_.head_dim ? static_cast<float>(c_.rope_attention_factor()) : 1.0f),
        attention_{
            .scale = static_cast<float>(
                (rope_scale_ == 1.0f ? c_.rope_attention_factor() * c_.rope_attention_factor() : 1.0) /
                std::sqrt(c_.query_pre_attn_scalar > 0 ? c_.query_pre_attn_scalar : static_cast<double>(c_.head_dim))),
            .window = c_.attention_window(index),
            .softcap = static_cast<float>(c_.attn_softcap)},
        gelu_(c_.hidden_act == "silu"        ? std::nullopt
              : c_.hidden_act == "gelu_tanh" ? std::optional{Gelu::tanh}
                                             : std::optional{Gelu::erf}) {
    const int64_t d = c_.hidden_size, q = c_.num_heads * c_.head_dim, kv = c_.num_kv_heads * c_.head_dim;
    const int64_t ff = c_.intermediate_size;
    auto name = [&](const char* suffix) { return block_tensor_name(index, suffix); };
    auto& w = w_;
    // A norm's weight as the kernels multiply by it (Gemma's 1 + weight); the stored one is kept for named_weights.
    auto norm = [&](const char* suffix) {
      if (!c_.norm_plus_one) return load_vector(src, name(suffix), d, backend);
      NormPlusOne both = load_norm_plus_one(src, name(suffix), d, backend);
      stored_norms_[name(suffix)] = both.stored;
      return both.plus_one;
    };
    w.attn_norm = norm("input_layernorm.weight");
    if (c_.fused_projections) {  // Phi-3: views of the rows of one [q + 2·kv, d] matrix
      w.wqkv = load_matrix(src, name("self_attn.qkv_proj.weight"), {q + 2 * kv, d}, opt.dtype, backend);
      w.wq = w.wqkv.slice_rows(0, q);
      w.wk = w.wqkv.slice_rows(q, q + kv);
      w.wv = w.wqkv.slice_rows(q + kv, q + 2 * kv);
    } else {
      w.wq = load_matrix(src, name("self_attn.q_proj.weight"), {q, d}, opt.dtype, backend);
      w.wk = load_matrix(src, name("self_attn.k_proj.weight"), {kv, d}, opt.dtype, backend);
      w.wv = load_matrix(src, name("self_attn.v_proj.weight"), {kv, d}, opt.dtype, backend);
    }
    w.wo = load_matrix(src, name("self_attn.o_proj.weight"), {d, q}, opt.dtype, backend);
    if (c_.qkv_bias) {
      w.bq = load_vector(src, name("self_attn.q_proj.bias"), q, backend);
      w.bk = load_vector(src, name("self_attn.k_proj.bias"), kv, backend);
      w.bv = load_vector(src, name("self_attn.v_proj.bias"), kv, backend);
    }
    if (c_.o_bias) w.bo = load_vector(src, name("self_attn.o_proj.bias"), d, backend);
    if (c_.qk_norm) {
      w.q_norm = load_vector(src, name("self_attn.q_norm.weight"), c_.head_dim, backend);
      w.k_norm = load_vector(src, name("self_attn.k_norm.weight"), c_.head_dim, backend);
    }
    w.ffn_norm = norm(ffn_norm_name());
    if (c_.post_norms) {
      w.post_attn_norm = norm("post_attention_layernorm.weight");
      w.post_ffn_norm = norm("post_feedforward_layernorm.weight");
    }
    if (c_.num_experts > 0) {
      moe_.emplace(src, index, backend, opt.dtype);
      return;
    }
    if (c_.fused_projections) {  // gate rows first, then up
      w.w_gate_up = load_matrix(src, name("mlp.gate_up_proj.weight"), {2 * ff, d}, opt.dtype, backend);
      w.w_gate = w.w_gate_up.slice_rows(0, ff);
      w.w_up = w.w_gate_up.slice_rows(ff, 2 * ff);
    } else {
      w.w_gate = load_matrix(src, name("mlp.gate_proj.weight"), {ff, d}, opt.dtype, backend);
      w.w_up = load_matrix(src, name("mlp.up_proj.weight"), {ff, d}, opt.dtype, backend);
    }
    w.w_down = load_matrix(src, name("mlp.down_proj.weight"), {d, ff}, opt.dtype, backend);
    if (c_.mlp_bias) {
      w.b_gate = load_vector(src, name("mlp.gate_proj.bias"), ff, backend);
      w.b_up = load_vector(src, name("mlp.up_proj.bias"), ff, backend);
      w.b_down = load_vector(src, name("mlp.down_proj.bias"), d, backend);
    }
  }

  int64_t index() const override { return index_; }
  Backend& backend() const override { return backend_; }

  int64_t weight_bytes() const override {
    int64_t n = 0;
    for (const Tensor* t : {&w_.attn_norm,
                            &w_.wq,
                            &w_.wk,
                            &w_.wv,
                            &w_.wo,
                            &w_.bq,
                            &w_.bk,
                            &w_.bv,
                            &w_.bo,
                            &w_.q_norm,
                            &w_.k_norm,
                            &w_.ffn_norm,
                            &w_.w_gate,
                            &w_.w_up,
                            &w_.w_down,
                            &w_.b_gate,
                            &w_.b_up,
                            &w_.b_down,
                            &w_.post_attn_norm,
                            &w_.post_ffn_norm})
      n += t->nbytes();
    return n + (moe_ ? moe_->weight_bytes() : 0);
  }

  std::vector<std::pair<std::string, Tensor>> named_weights() const override {
    auto name = [&](const char* suffix) { return block_tensor_name(index_, suffix); };
    std::vector<std::pair<std::string, Tensor>> out = {
        {name("input_layernorm.weight"), w_.attn_norm}, {name("self_attn.q_proj.weight"), w_.wq},
        {name("self_attn.k_proj.weight"), w_.wk},       {name("self_attn.v_proj.weight"), w_.wv},
        {name("self_attn.o_proj.weight"), w_.wo},       {name(ffn_norm_name()), w_.ffn_norm},
        {name("mlp.gate_proj.weight"), w_.w_gate},      {name("mlp.up_proj.weight"), w_.w_up},
        {name("mlp.down_proj.weight"), w_.w_down}};
    const std::pair<const char*, const Tensor*> biases[] = {{"self_attn.q_proj.bias", &w_.bq},
                                                            {"self_attn.k_proj.bias", &w_.bk},
                                                            {"self_attn.v_proj.bias", &w_.bv},
                                                            {"self_attn.o_proj.bias", &w_.bo},
                                                            {"mlp.gate_proj.bias", &w_.b_gate},
                                                            {"mlp.up_proj.bias", &w_.b_up},
                                                            {"mlp.down_proj.bias", &w_.b_down},
                                                            {"self_attn.q_norm.weight", &w_.q_norm},
                                                            {"self_attn.k_norm.weight", &w_.k_norm},
                                                            {"post_attention_layernorm.weight", &w_.post_attn_norm},
                                                            {"post_feedforward_layernorm.weight", &w_.post_ffn_norm}};
    for (const auto& [suffix, t] : biases)
      if (t->defined()) out.emplace_back(name(suffix), *t);
    for (auto& [n, t] : out)  // norms as stored, not plus one
      if (auto it = stored_norms_.find(n); it != stored_norms_.end()) t = it->second;
    if (c_.fused_projections) {  // the stored matrices, not the views
      std::erase_if(out, [&](const auto& named) {
        for (const char* view : {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                 "mlp.gate_proj.weight", "mlp.up_proj.weight"})
          if (named.first == name(view)) return true;
        return false;
      });
      out.emplace_back(name("self_attn.qkv_proj.weight"), w_.wqkv);
      out.emplace_back(name("mlp.gate_up_proj.weight"), w_.w_gate_up);
    }
    if (moe_) {
      std::erase_if(out, [](const auto& named) { return !named.second.defined(); });  // no dense MLP
      for (auto& named : moe_->named_weights()) out.push_back(std::move(named));
    }
    return out;
  }

  // A mixture routes tokens on the host.
  // A recording keeps the frequencies it was made with: not longrope's, which change with the positions.
  bool recordable() const override { return !moe_ && inv_freq_long_.empty(); }

  // Which rows an adapter applies to: one adapter to every row (the stateless forward and backward), or each
  // segment's own to its rows (a batch of sessions, possibly with different adapters).
  struct RowLoras {
    const BlockLora* all = nullptr;
    std::span<const BlockSegment> segments;
    RowLoras(const BlockLora* lora) : all(lora) {}  // NOLINT: implicit, every single-adapter call site
    explicit RowLoras(std::span<const BlockSegment> s) : segments(s) {}
  };

  int64_t kv_heads() const override { return c_.num_kv_heads; }
  int64_t kv_head_dim() const override { return c_.head_dim; }
  int64_t kv_window() const override { return attention_.window; }

  void forward_batch(Tensor& hidden, std::span<const BlockSegment> segments) override {
    Backend& be = backend_;
    check_segments(index_, c_.hidden_size, hidden, segments);
    const RowLoras lora(segments);
    const int64_t m = hidden.dim(0), d = c_.hidden_size;
    const int64_t hq = c_.num_heads, hkv = c_.num_kv_heads, hd = c_.head_dim;

    Tensor& x = hidden;
    Tensor n = be.alloc(DType::f32, {m, d});
    Tensor q = be.alloc(DType::f32, {m, hq * hd});
    Tensor k = be.alloc(DType::f32, {m, hkv * hd});
    Tensor v = be.alloc(DType::f32, {m, hkv * hd});
    Tensor att = be.alloc(DType::f32, {m, hq * hd});

    be.rms_norm(x, w_.attn_norm, static_cast<float>(c_.norm_eps), n);
    project_many<3>(n, {Projection::q, Projection::k, Projection::v}, lora, {&q, &k, &v});
    if (c_.qk_norm) {
      q = head_norm(q, w_.q_norm, hq);
      k = head_norm(k, w_.k_norm, hkv);
    }
    for (const AttentionRun& a : AttentionRuns(*this, segments))
      attend(a, a.rows_of(q), a.rows_of(k), a.rows_of(v), a.rows_of(att));
    residual_add(att, Projection::o, lora, w_.post_attn_norm, x);

    be.rms_norm(x, w_.ffn_norm, static_cast<float>(c_.norm_eps), n);
    if (moe_) {
      refuse_mlp_lora(lora);
      be.add(x, moe_->forward(n), x);
      return;
    }
    Tensor gate = be.alloc(DType::f32, {m, c_.intermediate_size});
    Tensor up = be.alloc(DType::f32, {m, c_.intermediate_size});
    project_many<2>(n, {Projection::gate, Projection::up}, lora, {&gate, &up});
    activate(gate, up, gate);
    residual_add(gate, Projection::down, lora, w_.post_ffn_norm, x);
  }

  void backward(const Tensor& hidden_in, std::span<const int32_t> positions, Tensor& grad,
                const BlockLora* lora) override {
    Backend& be = backend_;
    check_shapes(hidden_in, positions);
    if (grad.shape() != hidden_in.shape())
      throw std::invalid_argument("block " + std::to_string(index_) + ": gradient " + grad.describe() +
                                  " does not match the hidden states " + hidden_in.describe());
    const int64_t b = hidden_in.dim(0), t = hidden_in.dim(1), d = c_.hidden_size, m = b * t;
    const int64_t hq = c_.num_heads, hkv = c_.num_kv_heads, hd = c_.head_dim, ff = c_.intermediate_size;
    const float eps = static_cast<float>(c_.norm_eps);
    const Tensor x = hidden_in.reshaped({m, d});
    const Saved s = recompute(x, b, t, positions, lora);
    Tensor dy = grad.reshaped({m, d});  // becomes dL/dh, then dL/dx, in place
    Tensor dn = be.alloc(DType::f32, {m, d}), tmp = be.alloc(DType::f32, {m, d});

    // y = h + down(silu(gate) · up), gate = n2·Wgᵀ, up = n2·Wuᵀ, n2 = rms_norm(h); or y = h + moe(n2); with post-norms
    // y = h + rms_norm(down(gelu(gate) · up))
    if (moe_) {
      dn = moe_->backward(s.moe_in, dy);
    } else {
      Tensor d_gate = be.alloc(DType::f32, {m, ff}), d_up = be.alloc(DType::f32, {m, ff});
      project_backward(post_norm_backward(s.mlp_out, w_.post_ffn_norm, dy), Projection::down, lora, d_gate);
      if (gelu_)
        be.gelu_mul_backward(s.gate, s.up, *gelu_, d_gate, d_gate, d_up);
      else
        be.silu_mul_backward(s.gate, s.up, d_gate, d_gate, d_up);
      project_backward(d_gate, Projection::gate, lora, dn);
      project_backward(d_up, Projection::up, lora, tmp);
      be.add(dn, tmp, dn);
    }
    be.rms_norm_backward(s.h, w_.ffn_norm, eps, dn, tmp);
    be.add(dy, tmp, dy);

    // h = x + o_proj(attention(rope(q), rope(k), v)) (through a post-norm: rms_norm(o_proj(...))), q, k, v
    // projections of n1 = rms_norm(x)
    Tensor d_att = be.alloc(DType::f32, {m, hq * hd});
    project_backward(post_norm_backward(s.attn_out, w_.post_attn_norm, dy), Projection::o, lora, d_att);
    Tensor dq = be.alloc(DType::f32, {m, hq * hd}), dk = be.alloc(DType::f32, {m, hkv * hd});
    Tensor dv = be.alloc(DType::f32, {m, hkv * hd});
    be.attention_backward(s.q.reshaped({b, t, hq, hd}), s.k.reshaped({b, t, hkv, hd}), s.v.reshaped({b, t, hkv, hd}),
                          d_att, attention_, dq, dk, dv);
    std::vector<int32_t> back(positions.begin(), positions.end());
    for (int32_t& p : back) p = -p;  // the inverse rotation is the gradient of RoPE
    Tensor dq3 = dq.reshaped({m, hq, hd}), dk3 = dk.reshaped({m, hkv, hd});
    be.rope(dq3, back, frequencies(positions), rope_scale_);  // the transpose of scale · R(θ) is scale · R(-θ)
    be.rope(dk3, back, frequencies(positions), rope_scale_);
    if (c_.qk_norm) {
      dq = head_norm_backward(s.q_raw, w_.q_norm, dq, hq);
      dk = head_norm_backward(s.k_raw, w_.k_norm, dk, hkv);
    }
    project_backward(dq, Projection::q, lora, dn);
    project_backward(dk, Projection::k, lora, tmp);
    be.add(dn, tmp, dn);
    project_backward(dv, Projection::v, lora, tmp);
    be.add(dn, tmp, dn);
    be.rms_norm_backward(x, w_.attn_norm, eps, dn, tmp);
    be.add(dy, tmp, dy);
  }

 private:
  // What the backward needs of one stateless forward: q and k after RoPE, v, the residual stream h after
  // attention, and the MLP's gate and up projections (a mixture of experts: its input); with qk_norm, q and k as
  // projected, before their norms; with post-norms, what they normalized: o_proj's and down_proj's outputs.
  struct Saved {
    Tensor q, k, v, h, gate, up, q_raw, k_raw, moe_in, attn_out, mlp_out;
  };

  // The MLP's input norm: Gemma 2's pre_feedforward_layernorm where post-norms take post_attention_layernorm's name.
  const char* ffn_norm_name() const {
    return c_.post_norms ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight";
  }

  // out = act(gate) · up: SwiGLU, or GeGLU with the config's GELU.
  void activate(const Tensor& gate, const Tensor& up, Tensor& out) {
    if (gelu_)
      backend_.gelu_mul(gate, up, *gelu_, out);
    else
      backend_.silu_mul(gate, up, out);
  }

  // x += the projection p of `in` (with its adapter's part), through `post_norm` first where the block has one;
  // then `out`, when given, receives the projection before the norm (what the backward's recompute keeps).
  void residual_add(const Tensor& in, Projection p, const RowLoras& lora, const Tensor& post_norm, Tensor& x,
                    Tensor* out = nullptr) {
    if (!post_norm.defined()) return project_add(in, p, lora, x);
    Tensor projected = backend_.alloc(DType::f32, x.shape()), normed = backend_.alloc(DType::f32, x.shape());
    project(in, p, lora, projected);
    backend_.rms_norm(projected, post_norm, static_cast<float>(c_.norm_eps), normed);
    backend_.add(x, normed, x);
    if (out) *out = projected;
  }

  // The gradient with respect to a post-norm's input `in`, given that of its output (dy itself without a post-norm).
  Tensor post_norm_backward(const Tensor& in, const Tensor& post_norm, const Tensor& dy) {
    if (!post_norm.defined()) return dy;
    Tensor d = backend_.alloc(DType::f32, dy.shape());
    backend_.rms_norm_backward(in, post_norm, static_cast<float>(c_.norm_eps), dy, d);
    return d;
  }

  // Adapters target the dense MLP's projections by name; a mixture's experts have none of them.
  void refuse_mlp_lora(const RowLoras& loras) const {
    if (loras.segments.empty()) return refuse_mlp_lora(loras.all);
    for (const BlockSegment& s : loras.segments) refuse_mlp_lora(s.lora);
  }
  void refuse_mlp_lora(const BlockLora* lora) const {
    if (!lora) return;
    for (Projection p : {Projection::gate, Projection::up, Projection::down})
      if (lora->get(p))
        throw std::invalid_argument("block " + std::to_string(index_) +
                                    ": LoRA on a mixture of experts' projections is not supported");
  }

  // Per head of x [m, heads·head_dim]: RMSNorm over head_dim with weight w.
  Tensor head_norm(const Tensor& x, const Tensor& w, int64_t heads) {
    const int64_t m = x.dim(0), hd = c_.head_dim;
    Tensor y = backend_.alloc(DType::f32, {m, heads * hd});
    Tensor y2 = y.reshaped({m * heads, hd});
    backend_.rms_norm(x.reshaped({m * heads, hd}), w, static_cast<float>(c_.norm_eps), y2);
    return y;
  }
  // The gradient of head_norm at x, given that of its output.
  Tensor head_norm_backward(const Tensor& x, const Tensor& w, const Tensor& dy, int64_t heads) {
    const int64_t m = x.dim(0), hd = c_.head_dim;
    Tensor dx = backend_.alloc(DType::f32, {m, heads * hd});
    Tensor dx2 = dx.reshaped({m * heads, hd});
    backend_.rms_norm_backward(x.reshaped({m * heads, hd}), w, static_cast<float>(c_.norm_eps),
                               dy.reshaped({m * heads, hd}), dx2);
    return dx;
  }

  // One run's attention (model/arch/attention_runs.hpp): RoPE on its queries and keys, its keys and values into its
  // cache, and its queries over the cache. q [r, Hq·Dh], k, v [r, Hkv·Dh], att [r, Hq·Dh] are its rows.
  void attend(const AttentionRun& a, Tensor q, Tensor k, Tensor v, Tensor att) {
    Backend& be = backend_;
    const int64_t b = a.batch, t = a.tokens, r = a.rows();
    const int64_t hq = c_.num_heads, hkv = c_.num_kv_heads, hd = c_.head_dim;
    const std::span<const int32_t> positions = a.positions, slots = a.slots;
    Tensor q3 = q.reshaped({r, hq, hd}), k3 = k.reshaped({r, hkv, hd});
    const KvPages& kv = a.pages;
    // A ring (a windowed layer's cache, shorter than the session) takes a long step in pieces it can hold beside
    // what each piece's earliest query sees: a piece's keys written, then its queries attend, piece after piece.
    const int64_t piece = kv.ring ? kv.slots() - attention_.window + 1 : t;
    if (piece < t) {
      be.rope(q3, positions, frequencies(positions), rope_scale_);
      be.rope(k3, positions, frequencies(positions), rope_scale_);
      for (int64_t bi = 0; bi < b; ++bi)
        for (int64_t c0 = 0; c0 < t; c0 += piece) {
          const int64_t c = std::min(piece, t - c0), row = bi * t + c0;
          const std::span<const int32_t> at = slots.subspan(static_cast<size_t>(row), static_cast<size_t>(c));
          be.kv_write(k.slice_rows(row, row + c).reshaped({1, c, hkv, hd}),
                      v.slice_rows(row, row + c).reshaped({1, c, hkv, hd}), at, kv.sequence(bi));
          Tensor out = att.slice_rows(row, row + c);
          be.attention(q.slice_rows(row, row + c).reshaped({1, c, hq, hd}), kv.sequence(bi), at, attention_, out);
        }
      return;
    }
    if (a.at_positions && rope_scale_ == 1.0f) {
      be.rope_kv_write(q3, k3, v.reshaped({r, hkv, hd}), positions, frequencies(positions), kv);
    } else {
      be.rope(q3, positions, frequencies(positions), rope_scale_);
      be.rope(k3, positions, frequencies(positions), rope_scale_);
      be.kv_write(k.reshaped({b, t, hkv, hd}), v.reshaped({b, t, hkv, hd}), slots, kv);
    }
    be.attention(q.reshaped({b, t, hq, hd}), kv, slots, attention_, att);
  }

  void check_shapes(const Tensor& hidden, std::span<const int32_t> positions) const {
    if (hidden.rank() != 3 || hidden.dim(2) != c_.hidden_size)
      throw std::invalid_argument("block " + std::to_string(index_) + ": hidden states " + hidden.describe() +
                                  " are not [batch, tokens, " + std::to_string(c_.hidden_size) + "]");
    if (static_cast<int64_t>(positions.size()) != hidden.dim(0) * hidden.dim(1))
      throw std::invalid_argument("block " + std::to_string(index_) + ": " + std::to_string(positions.size()) +
                                  " positions for " + std::to_string(hidden.dim(0) * hidden.dim(1)) + " tokens");
  }

  // The stateless forward of x [b·t, D] up to the MLP's gate and up projections, keeping what backward needs.
  // Each sequence's keys and values are its own cache, slot = index in the sequence (as forward without cache).
  Saved recompute(const Tensor& x, int64_t b, int64_t t, std::span<const int32_t> positions, const BlockLora* lora) {
    Backend& be = backend_;
    const int64_t m = b * t, d = c_.hidden_size, hq = c_.num_heads, hkv = c_.num_kv_heads, hd = c_.head_dim;
    const float eps = static_cast<float>(c_.norm_eps);
    Saved s;
    s.q = be.alloc(DType::f32, {m, hq * hd});
    s.k = be.alloc(DType::f32, {m, hkv * hd});
    s.v = be.alloc(DType::f32, {m, hkv * hd});
    Tensor n = be.alloc(DType::f32, {m, d}), att = be.alloc(DType::f32, {m, hq * hd});
    be.rms_norm(x, w_.attn_norm, eps, n);
    project_many<3>(n, {Projection::q, Projection::k, Projection::v}, lora, {&s.q, &s.k, &s.v});
    if (c_.qk_norm) {
      s.q_raw = s.q;
      s.k_raw = s.k;
      s.q = head_norm(s.q_raw, w_.q_norm, hq);
      s.k = head_norm(s.k_raw, w_.k_norm, hkv);
    }
    Tensor q3 = s.q.reshaped({m, hq, hd}), k3 = s.k.reshaped({m, hkv, hd});
    be.rope(q3, positions, frequencies(positions), rope_scale_);
    be.rope(k3, positions, frequencies(positions), rope_scale_);
    const std::vector<int32_t> slots = sequence_slots(b, t);
    ContiguousKv own(s.k.reshaped({b, t, hkv, hd}), s.v.reshaped({b, t, hkv, hd}));
    be.attention(s.q.reshaped({b, t, hq, hd}), own.pages(), slots, attention_, att);
    s.h = be.copy(x);
    residual_add(att, Projection::o, lora, w_.post_attn_norm, s.h, &s.attn_out);
    be.rms_norm(s.h, w_.ffn_norm, eps, n);
    if (moe_) {
      refuse_mlp_lora(lora);
      s.moe_in = n;
      return s;
    }
    s.gate = be.alloc(DType::f32, {m, c_.intermediate_size});
    s.up = be.alloc(DType::f32, {m, c_.intermediate_size});
    project_many<2>(n, {Projection::gate, Projection::up}, lora, {&s.gate, &s.up});
    if (w_.post_ffn_norm.defined()) {  // the post-norm's backward needs its input, down_proj's output
      Tensor act = be.alloc(DType::f32, {m, c_.intermediate_size});
      activate(s.gate, s.up, act);
      s.mlp_out = be.alloc(DType::f32, {m, d});
      project(act, Projection::down, lora, s.mlp_out);
    }
    return s;
  }

  const Tensor& weight(Projection p) const {
    switch (p) {
      case Projection::q: return w_.wq;
      case Projection::k: return w_.wk;
      case Projection::v: return w_.wv;
      case Projection::o: return w_.wo;
      case Projection::gate: return w_.w_gate;
      case Projection::up: return w_.w_up;
      case Projection::down: return w_.w_down;
    }
    return w_.wq;
  }
  const Tensor* bias(Projection p) const {
    const Tensor* b = nullptr;
    switch (p) {
      case Projection::q: b = &w_.bq; break;
      case Projection::k: b = &w_.bk; break;
      case Projection::v: b = &w_.bv; break;
      case Projection::o: b = &w_.bo; break;
      case Projection::gate: b = &w_.b_gate; break;
      case Projection::up: b = &w_.b_up; break;
      case Projection::down: b = &w_.b_down; break;
    }
    return b->defined() ? b : nullptr;
  }

  // y = x·Wᵀ (+ bias), plus the adapter's (x·Aᵀ)·(scale·B)ᵀ when it targets this projection.
  void project(const Tensor& x, Projection p, const RowLoras& lora, Tensor& y) {
    backend_.matmul(x, weight(p), bias(p), y);
    add_lora(x, p, lora, y);
  }

  // y += the projection p of x (with its adapter's part): o_proj and down_proj into the residual stream.
  void project_add(const Tensor& x, Projection p, const RowLoras& lora, Tensor& y) {
    backend_.matmul_add(x, weight(p), bias(p), y);
    add_lora(x, p, lora, y);
  }

  // Several projections of the same x (q/k/v, gate/up) as one backend call, each as project() computes it.
  template <size_t N>
  void project_many(const Tensor& x, const std::array<Projection, N>& ps, const RowLoras& lora,
                    const std::array<Tensor*, N>& ys) {
    std::array<const Tensor*, N> ws, bs;
    for (size_t i = 0; i < N; ++i) {
      ws[i] = &weight(ps[i]);
      bs[i] = bias(ps[i]);
    }
    backend_.matmul_many(x, ws, bs, ys);
    for (size_t i = 0; i < N; ++i) add_lora(x, ps[i], lora, *ys[i]);
  }

  // y += (x·Aᵀ)·(scale·B)ᵀ on the rows each adapter covers, when it targets projection p.
  void add_lora(const Tensor& x, Projection p, const RowLoras& loras, Tensor& y) {
    if (loras.segments.empty()) return add_lora(x, p, loras.all, y);
    for (const BlockSegment& s : loras.segments) {
      if (!s.lora) continue;
      Tensor ys = segment_rows(y, s);
      add_lora(segment_rows(x, s), p, s.lora, ys);
    }
  }
  void add_lora(const Tensor& x, Projection p, const BlockLora* lora, Tensor& y) {
    Backend& be = backend_;
    const LoraPair* pair = lora ? lora->get(p) : nullptr;
    if (!pair) return;
    const int64_t rows = x.numel() / x.dim(-1);
    Tensor low = be.alloc(DType::f32, {rows, pair->a.dim(0)}), delta = be.alloc(DType::f32, y.shape());
    be.matmul(x, pair->a, nullptr, low);
    be.matmul(low, pair->b, nullptr, delta);
    be.add(y, delta, y);
  }

  // dx = dy·W, plus dy·(scale·B)·A with the adapter.
  void project_backward(const Tensor& dy, Projection p, const BlockLora* lora, Tensor& dx) {
    Backend& be = backend_;
    be.matmul_backward(dy, weight(p), dx);
    const LoraPair* pair = lora ? lora->get(p) : nullptr;
    if (!pair) return;
    const int64_t rows = dy.numel() / dy.dim(-1);
    Tensor low = be.alloc(DType::f32, {rows, pair->a.dim(0)}), delta = be.alloc(DType::f32, dx.shape());
    be.matmul_backward(dy, pair->b, low);
    be.matmul_backward(low, pair->a, delta);
    be.add(dx, delta, dx);
  }

  int64_t index_;
  Backend& backend_;
  ModelConfig c_;
  // The frequencies of a forward at `positions`: longrope's long set (inv_freq_long_, else empty) once the forward's
  // last position passes the original context, for every position of that forward, as Hugging Face switches.
  const std::vector<float>& frequencies(std::span<const int32_t> positions) const {
    if (inv_freq_long_.empty() || positions.empty()) return inv_freq_;
    const int64_t length = int64_t{*std::max_element(positions.begin(), positions.end())} + 1;
    return length > c_.rope_scaling.original_max_position ? inv_freq_long_ : inv_freq_;
  }

  std::vector<float> inv_freq_, inv_freq_long_;
  // The RoPE scaling's attention factor on cos and sin where only part of each head turns (the passed values keep
  // their scale); 1 where the whole head turns and the factor squared is in the attention's scale instead.
  float rope_scale_;
  // scale 1/sqrt(head_dim) or Gemma 2's query_pre_attn_scalar (times the attention factor squared), this layer's
  // window, the soft cap
  AttentionSpec attention_;
  std::optional<Gelu> gelu_;                    // GeGLU's GELU; SwiGLU without
  std::map<std::string, Tensor> stored_norms_;  // with norm_plus_one: each norm's weight as stored
  LlamaWeights w_;
  std::optional<SparseMoe> moe_;  // in place of the dense MLP (Mixtral)
};

}  // namespace

std::unique_ptr<Block> make_llama_block(const WeightSource& src, int64_t index, Backend& backend,
                                        const BlockLoadOptions& opt) {
  return std::make_unique<LlamaBlock>(src, index, backend, opt);
}

}  // namespace corolla
