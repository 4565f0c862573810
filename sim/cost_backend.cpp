#include "sim/cost_backend.hpp"

#include <algorithm>
#include <limits>
#include <cmath>

#include "sim/virtual_tensor.hpp"

namespace corolla::sim {
namespace {

int64_t rows_of(const Tensor& t) { return t.numel() / std::max<int64_t>(t.dim(-1), 1); }
double f32_bytes(const Tensor& t) { return 4.0 * static_cast<double>(t.numel()); }

}  // namespace

Tensor CostBackend::alloc(DType dtype, Shape shape) { return virtual_tensor(dtype, shape); }

Tensor CostBackend::upload(const Tensor& host) {
  if (is_virtual(host)) return host;
  account(0, static_cast<double>(host.nbytes()));  // the copy to the device
  return virtual_tensor(host.dtype(), host.shape());
}

Tensor CostBackend::copy(const Tensor& t) { return virtual_tensor(t.dtype(), t.shape()); }

void CostBackend::account(double flop, double bytes) {
  pending_s_ += std::max(flop / device_.flops, bytes / device_.bytes_per_second) + device_.op_overhead_s;
}

void CostBackend::account_matmul(int64_t m, int64_t n, int64_t k, DType weight_dtype) {
  const double weights = static_cast<double>(storage_bytes(weight_dtype, n * k));
  const double activations = 4.0 * static_cast<double>(m * k + m * n);
  account(2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k), weights + activations);
}

void CostBackend::matmul(const Tensor& x, const Tensor& w, const Tensor*, Tensor&) {
  account_matmul(rows_of(x), w.dim(0), w.dim(1), w.dtype());
}
void CostBackend::rms_norm(const Tensor& x, const Tensor&, float, Tensor&) {
  account(4.0 * static_cast<double>(x.numel()), 2 * f32_bytes(x));
}
void CostBackend::layer_norm(const Tensor& x, const Tensor&, const Tensor&, float, Tensor&) {
  account(6.0 * static_cast<double>(x.numel()), 2 * f32_bytes(x));
}
void CostBackend::rope(Tensor& x, std::span<const int32_t>, std::span<const float>, float) {
  account(3.0 * static_cast<double>(x.numel()), 2 * f32_bytes(x));
}
void CostBackend::silu_mul(const Tensor& gate, const Tensor&, Tensor&) {
  account(6.0 * static_cast<double>(gate.numel()), 3 * f32_bytes(gate));
}
void CostBackend::gelu_mul(const Tensor& gate, const Tensor&, Gelu, Tensor&) {
  account(11.0 * static_cast<double>(gate.numel()), 3 * f32_bytes(gate));
}
void CostBackend::gelu(const Tensor& x, Gelu, Tensor&) {
  account(10.0 * static_cast<double>(x.numel()), 2 * f32_bytes(x));
}
void CostBackend::add(const Tensor& a, const Tensor&, Tensor&) {
  account(static_cast<double>(a.numel()), 3 * f32_bytes(a));
}
void CostBackend::softmax(Tensor& x) { account(5.0 * static_cast<double>(x.numel()), 2 * f32_bytes(x)); }
void CostBackend::kv_write(const Tensor& k, const Tensor& v, std::span<const int32_t>, const KvPages&) {
  account(0, 2 * (f32_bytes(k) + f32_bytes(v)));
}

// Each query attends to slots 0..position: the arithmetic grows with the attended slots, the memory traffic with
// the longest history of each sequence (a fused kernel reads a sequence's keys and values once for its queries).
void CostBackend::attention(const Tensor& q, const KvPages& cache, std::span<const int32_t> positions,
                            const AttentionSpec& spec, Tensor&) {
  const int64_t b = q.dim(0), t = q.dim(1), hq = q.dim(2), dh = q.dim(3), hkv = cache.k.dim(2);
  double attended = 0, read_slots = 0;
  for (int64_t i = 0; i < b; ++i) {
    int32_t longest = 0, earliest = std::numeric_limits<int32_t>::max();
    for (int64_t j = 0; j < t; ++j) {
      const int32_t p = positions[static_cast<size_t>(i * t + j)];
      attended += static_cast<double>(p + 1 - spec.first_slot(p));
      longest = std::max(longest, p);
      earliest = std::min(earliest, p);
    }
    if (t > 0) read_slots += static_cast<double>(longest + 1 - spec.first_slot(earliest));
  }
  // A soft cap: a division, a tanh and a product more per score.
  const double flop = (4.0 * static_cast<double>(dh) + (spec.softcap > 0 ? 12.0 : 0.0)) * attended *
                      static_cast<double>(hq);
  const double bytes = read_slots * static_cast<double>(hkv * dh) * 8.0 + 8.0 * static_cast<double>(q.numel());
  account(flop, bytes);
}

void CostBackend::gather_rows(const Tensor&, std::span<const int32_t>, Tensor& out) {
  account(0, 8.0 * static_cast<double>(out.numel()));
}

void CostBackend::scatter_add_rows(const Tensor& x, std::span<const int32_t>, std::span<const float>, Tensor&) {
  account(2.0 * static_cast<double>(x.numel()), 12.0 * static_cast<double>(x.numel()));
}

void CostBackend::embed(const Tensor& table, std::span<const int32_t> ids, float, Tensor& out) {
  account(0, static_cast<double>(storage_bytes(table.dtype(), static_cast<int64_t>(ids.size()) * table.dim(1))) +
                 f32_bytes(out));
}
void CostBackend::matmul_backward(const Tensor& dy, const Tensor& w, Tensor&) {
  account_matmul(rows_of(dy), w.dim(1), w.dim(0), w.dtype());
}
void CostBackend::matmul_weight_grad(const Tensor& dy, const Tensor& x, Tensor&) {
  account_matmul(dy.dim(-1), x.dim(-1), rows_of(dy), DType::f32);
}
void CostBackend::rms_norm_backward(const Tensor& x, const Tensor&, float, const Tensor&, Tensor&) {
  account(8.0 * static_cast<double>(x.numel()), 3 * f32_bytes(x));
}
void CostBackend::layer_norm_backward(const Tensor& x, const Tensor&, float, const Tensor&, Tensor&) {
  account(12.0 * static_cast<double>(x.numel()), 3 * f32_bytes(x));
}
void CostBackend::gelu_backward(const Tensor& x, Gelu, const Tensor&, Tensor&) {
  account(14.0 * static_cast<double>(x.numel()), 3 * f32_bytes(x));
}
void CostBackend::silu_mul_backward(const Tensor& gate, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  account(10.0 * static_cast<double>(gate.numel()), 5 * f32_bytes(gate));
}
void CostBackend::gelu_mul_backward(const Tensor& gate, const Tensor&, Gelu, const Tensor&, Tensor&, Tensor&) {
  account(16.0 * static_cast<double>(gate.numel()), 5 * f32_bytes(gate));
}
void CostBackend::attention_backward(const Tensor& q, const Tensor& k, const Tensor&, const Tensor&,
                                     const AttentionSpec&, Tensor&, Tensor&, Tensor&) {
  const double b = static_cast<double>(q.dim(0)), t = static_cast<double>(q.dim(1));
  const double hq = static_cast<double>(q.dim(2)), dh = static_cast<double>(q.dim(3));
  account(8.0 * b * t * t / 2 * hq * dh, 4 * (f32_bytes(q) + 2 * f32_bytes(k)));
}

std::chrono::nanoseconds CostBackend::take_modelled_time() {
  const auto ns = std::chrono::nanoseconds(static_cast<int64_t>(std::llround(pending_s_ * 1e9)));
  pending_s_ = 0;
  return ns;
}

std::shared_ptr<CostBackend> make_cost_backend(DeviceModel device) { return std::make_shared<CostBackend>(device); }

}  // namespace corolla::sim
