#include "sim/cost_backend.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <cmath>

#include "sim/virtual_tensor.hpp"

namespace corolla::sim {
namespace {

double f32_bytes(const Tensor& t) { return 4.0 * static_cast<double>(t.numel()); }

// --- digests ---------------------------------------------------------------------------------------------------

uint64_t mix(uint64_t h, uint64_t v) {  // splitmix64's finalizer over h ^ v
  uint64_t z = (h ^ v) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Whether t carries digests: real f32 memory.
bool carries(const Tensor& t) { return t.dtype() == DType::f32 && t.numel() > 0 && !is_virtual(t); }

// Every row an operation writes is drawn from one hash (fill), so its first few values (23 random bits each)
// stand for all of it: a digest reads only those. Rows are read whole (a token's) or in parts (a head's, at
// multiples of the head size, kDigestGroup at least): fill writes the first kDigestValues of every group of
// kDigestGroup values from a row's start, a quarter of them, and leaves the rest (zeros).
constexpr int64_t kDigestValues = 4;
constexpr int64_t kDigestGroup = 16;

// The digest of elements [first, first + n) of t (0 where t carries none).
uint64_t digest_of(const Tensor& t, int64_t first, int64_t n) {
  if (!carries(t)) return 0;
  const auto* p = t.data_as<const float>() + first;
  uint64_t h = 0x243F6A8885A308D3ull;
  for (int64_t i = 0; i < std::min(n, kDigestValues); ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, sizeof bits);
    h = mix(h, bits);
  }
  return h;
}

// Fills elements [first, first + n) of t (the first kDigestValues of each kDigestGroup) with values in [1, 2)
// drawn from h by xorshift (nothing where t carries none): a logits row's largest value, the token a greedy
// sampler picks, falls on any of a quarter of the vocabulary.
void fill(Tensor& t, int64_t first, int64_t n, uint64_t h) {
  if (!carries(t)) return;
  float* p = t.data_as<float>() + first;
  uint64_t x = mix(h, 0) | 1;
  for (int64_t g = 0; g < n; g += kDigestGroup)
    for (int64_t i = g; i < std::min(n, g + kDigestValues); ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      p[i] = 1.0f + static_cast<float>(x >> 41) * 0x1.0p-23f;
    }
}

// Op tags keep different operations on the same input apart.
enum Tag : uint64_t { kMatmul = 1, kNorm, kRope, kGate, kGelu, kAdd, kSoftmax, kKv, kAttention, kEmbed, kScatter };

// Each row (the last dimension) of out from the same row of the inputs.
void rowwise(Tag tag, uint64_t salt, std::initializer_list<const Tensor*> inputs, Tensor& out) {
  if (!carries(out)) return;
  const int64_t n = out.dim(-1), rows = out.rows();
  std::vector<uint64_t> h(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    uint64_t x = mix(tag, salt);
    for (const Tensor* in : inputs) {
      const int64_t w = in->dim(-1);
      x = mix(x, r < in->rows() ? digest_of(*in, r * w, w) : 0);
    }
    h[static_cast<size_t>(r)] = x;
  }
  for (int64_t r = 0; r < rows; ++r) fill(out, r * n, n, h[static_cast<size_t>(r)]);  // out may be an input
}

}  // namespace

Tensor CostBackend::alloc_in(VirtualSpace space, DType dtype, Shape shape) {
  if (digests_ && dtype == DType::f32 && storage_bytes(dtype, shape.numel()) <= kDigestRowsBytes) {
    Tensor t = Tensor::empty(dtype, shape);
    if (t.numel() > 0) std::memset(t.data(), 0, static_cast<size_t>(t.nbytes()));
    return t;
  }
  return virtual_tensor(dtype, shape, space);
}

Tensor CostBackend::alloc(DType dtype, Shape shape) { return alloc_in(VirtualSpace::device, dtype, shape); }
Tensor CostBackend::alloc_host(DType dtype, Shape shape) { return alloc_in(VirtualSpace::host, dtype, shape); }

Tensor CostBackend::alloc_reserve(DType dtype, Shape shape) { return virtual_tensor(dtype, shape); }

Tensor CostBackend::upload(const Tensor& host) {
  if (is_virtual(host) && !is_virtual_host(host)) return host;  // on the device already
  account(0, static_cast<double>(host.nbytes()));               // the copy to the device
  if (digests_ && carries(host) && host.nbytes() <= kDigestRowsBytes) return host.clone();
  return virtual_tensor(host.dtype(), host.shape());
}

Tensor CostBackend::copy(const Tensor& t) {
  if (digests_ && carries(t)) return t.clone();
  return virtual_tensor(t.dtype(), t.shape());
}

void CostBackend::copy_host_rows(const Tensor& src, int64_t src_row, Tensor& dst, int64_t dst_row, int64_t rows) {
  if (!is_virtual(dst)) Backend::copy_host_rows(src, src_row, dst, dst_row, rows);  // a virtual source reads zeros
}

void CostBackend::account(double flop, double bytes) {
  pending_s_ += std::max(flop / device_.flops, bytes / device_.bytes_per_second) + device_.op_overhead_s;
}

void CostBackend::account_matmul(int64_t m, int64_t n, int64_t k, DType weight_dtype) {
  const double weights = static_cast<double>(storage_bytes(weight_dtype, n * k));
  const double activations = 4.0 * static_cast<double>(m * k + m * n);
  account(2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k), weights + activations);
}

// A weight is known by its shape only: the same matrix of another server (another virtual tensor) must give the
// same digest.
void CostBackend::do_matmul(const Tensor& x, const Tensor& w, const Tensor*, Tensor& y) {
  account_matmul(x.rows(), w.dim(0), w.dim(1), w.dtype());
  if (digests_) rowwise(kMatmul, mix(static_cast<uint64_t>(w.dim(0)), static_cast<uint64_t>(w.dim(1))), {&x}, y);
}
void CostBackend::do_rms_norm(const Tensor& x, const Tensor&, float, Tensor& y) {
  account(4.0 * static_cast<double>(x.numel()), 2 * f32_bytes(x));
  if (digests_) rowwise(kNorm, 0, {&x}, y);
}
void CostBackend::do_layer_norm(const Tensor& x, const Tensor&, const Tensor&, float, Tensor& y) {
  account(6.0 * static_cast<double>(x.numel()), 2 * f32_bytes(x));
  if (digests_) rowwise(kNorm, 1, {&x}, y);
}
// x [N, H, Dh] (or any shape whose rows split evenly over the positions): each row takes its token's position.
void CostBackend::do_rope(Tensor& x, std::span<const int32_t> positions, std::span<const float>, float) {
  account(3.0 * static_cast<double>(x.numel()), 2 * f32_bytes(x));
  if (!digests_ || !carries(x) || positions.empty()) return;
  const int64_t n = x.dim(-1), rows = x.rows(),
                per_token = std::max<int64_t>(1, rows / static_cast<int64_t>(positions.size()));
  for (int64_t r = 0; r < rows; ++r) {
    const auto p = positions[std::min(static_cast<size_t>(r / per_token), positions.size() - 1)];
    fill(x, r * n, n, mix(mix(kRope, static_cast<uint64_t>(static_cast<uint32_t>(p))), digest_of(x, r * n, n)));
  }
}
void CostBackend::do_silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  account(6.0 * static_cast<double>(gate.numel()), 3 * f32_bytes(gate));
  if (digests_) rowwise(kGate, 0, {&gate, &up}, out);
}
void CostBackend::do_gelu_mul(const Tensor& gate, const Tensor& up, Gelu, Tensor& out) {
  account(11.0 * static_cast<double>(gate.numel()), 3 * f32_bytes(gate));
  if (digests_) rowwise(kGate, 1, {&gate, &up}, out);
}
void CostBackend::do_gelu(const Tensor& x, Gelu, Tensor& out) {
  account(10.0 * static_cast<double>(x.numel()), 2 * f32_bytes(x));
  if (digests_) rowwise(kGelu, 0, {&x}, out);
}
void CostBackend::do_add(const Tensor& a, const Tensor& b, Tensor& out) {
  account(static_cast<double>(a.numel()), 3 * f32_bytes(a));
  if (digests_) rowwise(kAdd, 0, {&a, &b}, out);
}
void CostBackend::do_softmax(Tensor& x) {
  account(5.0 * static_cast<double>(x.numel()), 2 * f32_bytes(x));
  if (digests_) rowwise(kSoftmax, 0, {&x}, x);
}
// k, v [B, T, Hkv, Dh]: each token's key and value digest is kept for its slot of its sequence's pages.
void CostBackend::do_kv_write(const Tensor& k, const Tensor& v, std::span<const int32_t> slots, const KvPages& cache) {
  account(0, 2 * (f32_bytes(k) + f32_bytes(v)));
  if (!digests_ || k.rank() != 4 || cache.batch <= 0 || cache.page_tokens() <= 0) return;
  const int64_t b = k.dim(0), t = k.dim(1), n = k.dim(2) * k.dim(3);
  for (int64_t i = 0; i < b && i < cache.batch; ++i)
    for (int64_t j = 0; j < t; ++j) {
      const size_t at = static_cast<size_t>(i * t + j);
      if (at >= slots.size()) return;
      const int64_t first = (i * t + j) * n;
      slot_digests_[{cache.k.data(), cache.row(i, slots[at])}] =
          mix(mix(kKv, digest_of(k, first, n)), digest_of(v, first, n));
    }
}

// Each query attends to slots 0..position: the arithmetic grows with the attended slots, the memory traffic with
// the longest history of each sequence (a fused kernel reads a sequence's keys and values once for its queries).
void CostBackend::do_attention(const Tensor& q, const KvPages& cache, std::span<const int32_t> positions,
                               const AttentionSpec& spec, Tensor& out) {
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
  const double flop =
      (4.0 * static_cast<double>(dh) + (spec.softcap > 0 ? 12.0 : 0.0)) * attended * static_cast<double>(hq);
  const double bytes = read_slots * static_cast<double>(hkv * dh) * 8.0 + 8.0 * static_cast<double>(q.numel());
  account(flop, bytes);
  if (!digests_ || !carries(out) || cache.batch <= 0 || cache.page_tokens() <= 0) return;
  // Each query's digest, then the digests of the slots it attends to, in order: a slot never written reads as 0
  // (and as whatever another sequence left there, if pages were shared wrongly).
  const int64_t per_token = hq * dh, out_n = out.numel() / std::max<int64_t>(b * t, 1);
  for (int64_t i = 0; i < b && i < cache.batch; ++i)
    for (int64_t j = 0; j < t; ++j) {
      const int32_t p = positions[static_cast<size_t>(i * t + j)];
      uint64_t h = mix(kAttention, digest_of(q, (i * t + j) * per_token, per_token));
      for (int32_t s = spec.first_slot(p); s <= p; ++s) {
        auto it = slot_digests_.find({cache.k.data(), cache.row(i, s)});
        h = mix(h, it == slot_digests_.end() ? 0 : it->second);
      }
      fill(out, (i * t + j) * out_n, out_n, h);
    }
}

void CostBackend::do_gather_rows(const Tensor& x, std::span<const int32_t> rows, Tensor& out) {
  account(0, 8.0 * static_cast<double>(out.numel()));
  if (!digests_ || !carries(out) || !carries(x)) return;
  const int64_t n = out.dim(-1);
  for (size_t i = 0; i < rows.size() && static_cast<int64_t>(i) < out.rows(); ++i)
    if (rows[i] >= 0 && rows[i] < x.rows())
      std::memcpy(out.data_as<float>() + static_cast<int64_t>(i) * n, x.data_as<const float>() + rows[i] * n,
                  static_cast<size_t>(n) * sizeof(float));
}

void CostBackend::do_scatter_add_rows(const Tensor& x, std::span<const int32_t> rows, std::span<const float> scale,
                                      Tensor& out) {
  account(2.0 * static_cast<double>(x.numel()), 12.0 * static_cast<double>(x.numel()));
  if (!digests_ || !carries(out)) return;
  const int64_t n = out.dim(-1), xn = x.dim(-1);
  for (size_t i = 0; i < rows.size() && static_cast<int64_t>(i) < x.rows(); ++i) {
    if (rows[i] < 0 || rows[i] >= out.rows()) continue;
    uint32_t s = 0;
    if (i < scale.size()) std::memcpy(&s, &scale[i], sizeof s);
    const uint64_t h =
        mix(mix(mix(kScatter, digest_of(out, rows[i] * n, n)), digest_of(x, static_cast<int64_t>(i) * xn, xn)), s);
    fill(out, rows[i] * n, n, h);
  }
}

void CostBackend::do_embed(const Tensor& table, std::span<const int32_t> ids, float, Tensor& out) {
  account(0, static_cast<double>(storage_bytes(table.dtype(), static_cast<int64_t>(ids.size()) * table.dim(1))) +
                 f32_bytes(out));
  if (!digests_ || !carries(out)) return;
  const int64_t n = out.numel() / std::max<int64_t>(static_cast<int64_t>(ids.size()), 1);
  for (size_t i = 0; i < ids.size(); ++i)
    fill(out, static_cast<int64_t>(i) * n, n, mix(kEmbed, static_cast<uint64_t>(static_cast<uint32_t>(ids[i]))));
}
void CostBackend::do_matmul_backward(const Tensor& dy, const Tensor& w, Tensor&) {
  account_matmul(dy.rows(), w.dim(1), w.dim(0), w.dtype());
}
void CostBackend::do_matmul_weight_grad(const Tensor& dy, const Tensor& x, Tensor&) {
  account_matmul(dy.dim(-1), x.dim(-1), dy.rows(), DType::f32);
}
void CostBackend::do_rms_norm_backward(const Tensor& x, const Tensor&, float, const Tensor&, Tensor&) {
  account(8.0 * static_cast<double>(x.numel()), 3 * f32_bytes(x));
}
void CostBackend::do_layer_norm_backward(const Tensor& x, const Tensor&, float, const Tensor&, Tensor&) {
  account(12.0 * static_cast<double>(x.numel()), 3 * f32_bytes(x));
}
void CostBackend::do_gelu_backward(const Tensor& x, Gelu, const Tensor&, Tensor&) {
  account(14.0 * static_cast<double>(x.numel()), 3 * f32_bytes(x));
}
void CostBackend::do_silu_mul_backward(const Tensor& gate, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  account(10.0 * static_cast<double>(gate.numel()), 5 * f32_bytes(gate));
}
void CostBackend::do_gelu_mul_backward(const Tensor& gate, const Tensor&, Gelu, const Tensor&, Tensor&, Tensor&) {
  account(16.0 * static_cast<double>(gate.numel()), 5 * f32_bytes(gate));
}
void CostBackend::do_attention_backward(const Tensor& q, const Tensor& k, const Tensor&, const Tensor&,
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

std::shared_ptr<CostBackend> make_cost_backend(DeviceModel device, bool digests) {
  return std::make_shared<CostBackend>(device, digests);
}

}  // namespace corolla::sim
