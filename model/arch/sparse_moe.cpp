#include "model/arch/sparse_moe.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "model/weights/load_weight.hpp"

namespace corolla {
namespace {

std::string moe_name(int64_t index, const std::string& suffix) {
  return block_tensor_name(index, "block_sparse_moe." + suffix);
}

std::string expert_name(int64_t index, int64_t expert, const char* w) {
  return moe_name(index, "experts." + std::to_string(expert) + "." + w + ".weight");
}

}  // namespace

SparseMoe::SparseMoe(const WeightSource& src, int64_t index, Backend& backend, std::optional<DType> dtype)
    : backend_(backend),
      index_(index),
      experts_per_token_(src.config().experts_per_token),
      hidden_(src.config().hidden_size),
      intermediate_(src.config().intermediate_size) {
  const int64_t e = src.config().num_experts, d = hidden_, f = intermediate_;
  router_ = load_matrix(src, moe_name(index, "gate.weight"), {e, d}, DType::f32, backend);
  experts_.reserve(static_cast<size_t>(e));
  for (int64_t i = 0; i < e; ++i)
    experts_.push_back({load_matrix(src, expert_name(index, i, "w1"), {f, d}, dtype, backend),
                        load_matrix(src, expert_name(index, i, "w3"), {f, d}, dtype, backend),
                        load_matrix(src, expert_name(index, i, "w2"), {d, f}, dtype, backend)});
}

SparseMoe::Routing SparseMoe::route(const Tensor& n) {
  const int64_t m = n.numel() / hidden_, e = static_cast<int64_t>(experts_.size()), k = experts_per_token_;
  Tensor logits = backend_.alloc(DType::f32, {m, e});
  backend_.matmul(n, router_, nullptr, logits);
  const Tensor host = backend_.download(logits);
  const float* l = host.data_as<const float>();
  Routing r;
  r.rows = m;
  r.probs.resize(static_cast<size_t>(m * e));
  r.chosen.resize(static_cast<size_t>(m * k));
  r.weights.resize(static_cast<size_t>(m * k));
  r.by_expert.resize(static_cast<size_t>(e));
  r.weight_of.resize(static_cast<size_t>(e));
  r.slot_of.resize(static_cast<size_t>(e));
  std::vector<int32_t> order(static_cast<size_t>(e));
  for (int64_t i = 0; i < m; ++i) {
    float* p = r.probs.data() + i * e;
    const float* li = l + i * e;
    const float top = *std::max_element(li, li + e);
    float sum = 0.f;
    for (int64_t j = 0; j < e; ++j) sum += (p[j] = std::exp(li[j] - top));
    for (int64_t j = 0; j < e; ++j) p[j] /= sum;
    // The k most probable experts, the lower id first among equals.
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float kept = 0.f;
    for (int64_t j = 0; j < k; ++j) kept += p[order[static_cast<size_t>(j)]];
    for (int64_t j = 0; j < k; ++j) {
      const int32_t x = order[static_cast<size_t>(j)];
      const float w = p[x] / kept;
      r.chosen[static_cast<size_t>(i * k + j)] = x;
      r.weights[static_cast<size_t>(i * k + j)] = w;
      r.by_expert[static_cast<size_t>(x)].push_back(static_cast<int32_t>(i));
      r.weight_of[static_cast<size_t>(x)].push_back(w);
      r.slot_of[static_cast<size_t>(x)].push_back(static_cast<int32_t>(j));
    }
  }
  return r;
}

Tensor SparseMoe::forward(const Tensor& n) {
  Backend& be = backend_;
  const Routing r = route(n);
  Tensor y = be.alloc(DType::f32, {r.rows, hidden_});  // zeros: the experts' outputs are added into it
  for (size_t x = 0; x < experts_.size(); ++x) {
    const auto& rows = r.by_expert[x];
    if (rows.empty()) continue;  // an expert no token chose is never read
    const int64_t count = static_cast<int64_t>(rows.size());
    const Expert& ex = experts_[x];
    Tensor in = be.alloc(DType::f32, {count, hidden_});
    be.gather_rows(n, rows, in);
    Tensor gate = be.alloc(DType::f32, {count, intermediate_}), up = be.alloc(DType::f32, {count, intermediate_});
    const std::array<const Tensor*, 2> ws{&ex.gate, &ex.up}, bs{nullptr, nullptr};
    const std::array<Tensor*, 2> outs{&gate, &up};
    be.matmul_many(in, ws, bs, outs);
    be.silu_mul(gate, up, gate);
    Tensor out = be.alloc(DType::f32, {count, hidden_});
    be.matmul(gate, ex.down, nullptr, out);
    be.scatter_add_rows(out, rows, r.weight_of[x], y);
  }
  return y;
}

Tensor SparseMoe::backward(const Tensor& n, const Tensor& dy) {
  Backend& be = backend_;
  const Routing r = route(n);
  const int64_t m = r.rows, e = static_cast<int64_t>(experts_.size()), k = experts_per_token_;
  Tensor dn = be.alloc(DType::f32, {m, hidden_});
  // dL/dw for each (row, choice): the output gradient · the expert's unweighted output.
  std::vector<float> d_weight(static_cast<size_t>(m * k), 0.f);
  for (size_t x = 0; x < experts_.size(); ++x) {
    const auto& rows = r.by_expert[x];
    if (rows.empty()) continue;
    const int64_t count = static_cast<int64_t>(rows.size());
    const Expert& ex = experts_[x];
    Tensor in = be.alloc(DType::f32, {count, hidden_});
    be.gather_rows(n, rows, in);
    Tensor gate = be.alloc(DType::f32, {count, intermediate_}), up = be.alloc(DType::f32, {count, intermediate_});
    const std::array<const Tensor*, 2> ws{&ex.gate, &ex.up}, bs{nullptr, nullptr};
    const std::array<Tensor*, 2> outs{&gate, &up};
    be.matmul_many(in, ws, bs, outs);
    Tensor act = be.alloc(DType::f32, {count, intermediate_});
    be.silu_mul(gate, up, act);
    Tensor out = be.alloc(DType::f32, {count, hidden_});
    be.matmul(act, ex.down, nullptr, out);

    Tensor d_out_rows = be.alloc(DType::f32, {count, hidden_});
    be.gather_rows(dy, rows, d_out_rows);
    const Tensor g_host = be.download(d_out_rows), y_host = be.download(out);
    for (int64_t i = 0; i < count; ++i) {
      const float* gi = g_host.data_as<const float>() + i * hidden_;
      const float* yi = y_host.data_as<const float>() + i * hidden_;
      float dot = 0.f;
      for (int64_t j = 0; j < hidden_; ++j) dot += gi[j] * yi[j];
      d_weight[static_cast<size_t>(rows[static_cast<size_t>(i)] * k + r.slot_of[x][static_cast<size_t>(i)])] = dot;
    }
    // Through the expert: its output was scaled by w.
    std::vector<int32_t> own(static_cast<size_t>(count));
    std::iota(own.begin(), own.end(), 0);
    Tensor d_expert = be.alloc(DType::f32, {count, hidden_});
    be.scatter_add_rows(d_out_rows, own, r.weight_of[x], d_expert);
    Tensor d_act = be.alloc(DType::f32, {count, intermediate_});
    be.matmul_backward(d_expert, ex.down, d_act);
    Tensor d_gate = be.alloc(DType::f32, {count, intermediate_}), d_up = be.alloc(DType::f32, {count, intermediate_});
    be.silu_mul_backward(gate, up, d_act, d_gate, d_up);
    Tensor d_in = be.alloc(DType::f32, {count, hidden_}), tmp = be.alloc(DType::f32, {count, hidden_});
    be.matmul_backward(d_gate, ex.gate, d_in);
    be.matmul_backward(d_up, ex.up, tmp);
    be.add(d_in, tmp, d_in);
    const std::vector<float> ones(static_cast<size_t>(count), 1.f);
    be.scatter_add_rows(d_in, rows, ones, dn);
  }
  // Through the router: w_j = p_j / S over the chosen experts (S = Σ chosen p), p = softmax(logits).
  Tensor d_logits = Tensor::empty(DType::f32, {m, e});
  float* dl = d_logits.data_as<float>();
  std::vector<float> dp(static_cast<size_t>(e));
  for (int64_t i = 0; i < m; ++i) {
    const float* p = r.probs.data() + i * e;
    float kept = 0.f, gw = 0.f;
    for (int64_t j = 0; j < k; ++j) {
      kept += p[r.chosen[static_cast<size_t>(i * k + j)]];
      gw += d_weight[static_cast<size_t>(i * k + j)] * r.weights[static_cast<size_t>(i * k + j)];
    }
    std::fill(dp.begin(), dp.end(), 0.f);
    for (int64_t j = 0; j < k; ++j)
      dp[static_cast<size_t>(r.chosen[static_cast<size_t>(i * k + j)])] =
          (d_weight[static_cast<size_t>(i * k + j)] - gw) / kept;
    float pdp = 0.f;
    for (int64_t x = 0; x < e; ++x) pdp += p[x] * dp[static_cast<size_t>(x)];
    for (int64_t x = 0; x < e; ++x) dl[i * e + x] = p[x] * (dp[static_cast<size_t>(x)] - pdp);
  }
  Tensor d_router_in = be.alloc(DType::f32, dn.shape());
  be.matmul_backward(be.upload(d_logits), router_, d_router_in);
  be.add(dn, d_router_in, dn);
  return dn;
}

int64_t SparseMoe::weight_bytes() const {
  int64_t n = router_.nbytes();
  for (const Expert& x : experts_) n += x.gate.nbytes() + x.up.nbytes() + x.down.nbytes();
  return n;
}

std::vector<std::pair<std::string, Tensor>> SparseMoe::named_weights() const {
  std::vector<std::pair<std::string, Tensor>> out = {{moe_name(index_, "gate.weight"), router_}};
  for (size_t i = 0; i < experts_.size(); ++i) {
    const auto x = static_cast<int64_t>(i);
    out.emplace_back(expert_name(index_, x, "w1"), experts_[i].gate);
    out.emplace_back(expert_name(index_, x, "w3"), experts_[i].up);
    out.emplace_back(expert_name(index_, x, "w2"), experts_[i].down);
  }
  return out;
}

}  // namespace corolla
