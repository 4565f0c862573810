// Gradient kernels (training through frozen blocks): RMSNorm, SwiGLU, GeGLU and causal self-attention (with ALiBi
// and a soft cap where the spec has them). f32 throughout,
// the CPU backend's formulas.
//
// Attention backward in three passes, each a warp per row (lanes split the head dimension, ≤ 256 = 32 · 8):
//   1. per (token, head): the softmax's log-sum-exp and D = rowsum(dO ∘ O), O recomputed;
//   2. per (token, head): dQ = scale · Σ_s P (dP − D) k_s over s ≤ t;
//   3. per (token, KV head): dK, dV summed over the heads of the group and the queries t ≥ s.
// O(T² · Dh) per head, no atomics: each output row belongs to one warp.
#include "kernels/backend.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/gelu.hpp"

namespace corolla::gpu {
namespace {

constexpr int kRowThreads = 256;
constexpr int kElemThreads = 256;
constexpr int kWarpsPerBlock = 8;
constexpr int kMaxElemsPerLane = 8;  // head_dim ≤ 256

__global__ void rms_norm_backward_kernel(const float* __restrict__ x, const float* __restrict__ w, float eps,
                                         const float* __restrict__ dy, float* __restrict__ dx, int64_t d) {
  __shared__ float scratch[kWarp];
  const float* xr = x + blockIdx.x * d;
  const float* gr = dy + blockIdx.x * d;
  float* out = dx + blockIdx.x * d;
  float ss = 0.f, s = 0.f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    ss = fmaf(xr[i], xr[i], ss);
    s = fmaf(xr[i] * w[i], gr[i], s);
  }
  ss = block_sum(ss, scratch);
  s = block_sum(s, scratch);
  const float inv = 1.f / sqrtf(ss / static_cast<float>(d) + eps);
  const float c = s / static_cast<float>(d) * inv * inv * inv;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) out[i] = inv * w[i] * gr[i] - xr[i] * c;
}

// One block per row: dx = r · (g − mean(g) − x̂ · mean(g ∘ x̂)), g = w ∘ dy, x̂ = (x − mean) · r.
__global__ void layer_norm_backward_kernel(const float* __restrict__ x, const float* __restrict__ w, float eps,
                                           const float* __restrict__ dy, float* __restrict__ dx, int64_t d) {
  __shared__ float scratch[kWarp];
  const float* xr = x + blockIdx.x * d;
  const float* gr = dy + blockIdx.x * d;
  float* out = dx + blockIdx.x * d;
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) s += xr[i];
  const float mean = block_sum(s, scratch) / static_cast<float>(d);
  float v = 0.f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) v = fmaf(xr[i] - mean, xr[i] - mean, v);
  const float inv = 1.f / sqrtf(block_sum(v, scratch) / static_cast<float>(d) + eps);
  float g_sum = 0.f, gx_sum = 0.f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float g = w[i] * gr[i];
    g_sum += g;
    gx_sum = fmaf(g, (xr[i] - mean) * inv, gx_sum);
  }
  const float g_mean = block_sum(g_sum, scratch) / static_cast<float>(d);
  const float gx_mean = block_sum(gx_sum, scratch) / static_cast<float>(d);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    out[i] = inv * (w[i] * gr[i] - g_mean - (xr[i] - mean) * inv * gx_mean);
}

// dx may alias d_out.
__global__ void gelu_backward_kernel(const float* x, Gelu form, const float* d_out, float* dx, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dx[i] = gelu_derivative(x[i], form) * d_out[i];
}

// A gated MLP's activation and its derivative at g: silu(g) = g·s, s = sigmoid(g), silu'(g) = s · (1 + g · (1 − s));
// and gelu.
struct SiluGrad {
  __device__ float2 operator()(float g) const {
    const float s = 1.f / (1.f + expf(-g));
    return make_float2(g * s, s * (1.f + g * (1.f - s)));
  }
};
struct GeluGrad {
  Gelu form;
  __device__ float2 operator()(float g) const { return make_float2(gelu_value(g, form), gelu_derivative(g, form)); }
};

// For o = act(g) · u: du = d · act(g), dg = d · u · act'(g). d_gate may alias d_out.
template <class Act>
__global__ void gated_backward_kernel(const float* g, const float* u, const float* d, float* dg, float* du, int64_t n,
                                      Act act) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float2 a = act(g[i]);
    const float grad = d[i];
    du[i] = grad * a.x;
    dg[i] = grad * u[i] * a.y;
  }
}

struct AttnDims {
  int64_t b, t;
  int hq, hkv, hd;
  float scale;
  int64_t window;       // > 0: query t sees keys t - window + 1 .. t
  int64_t alibi_heads;  // hq with ALiBi, else 0
  float softcap;        // > 0: scores pass softcap · tanh(score / softcap)
  __device__ AttentionSpec spec() const { return AttentionSpec{scale, window, alibi_heads, softcap}; }
  __device__ float slope(int h) const { return spec().alibi_slope(h); }
  // The score the softmax reads for q·k = qk and this slot's ALiBi bias.
  __device__ float logit(float qk, float bias) const { return spec().capped(qk * scale) + bias; }
  // d logit / d (scale · q·k): the cap's derivative 1 − tanh²(scale · q·k / softcap), 1 without one.
  __device__ float cap_grad(float qk) const {
    if (softcap <= 0.f) return 1.f;
    const float th = tanhf(qk * scale / softcap);
    return 1.f - th * th;
  }
  __host__ __device__ int64_t first_key(int64_t t) const { return window > 0 && t >= window ? t - window + 1 : 0; }
  __host__ __device__ int64_t last_query(int64_t s) const {
    return window > 0 && s + window - 1 < t ? s + window - 1 : t - 1;
  }
  __host__ __device__ int64_t qrow() const { return static_cast<int64_t>(hq) * hd; }
  __host__ __device__ int64_t kvrow() const { return static_cast<int64_t>(hkv) * hd; }
};

// A head vector held across a warp's lanes: element d = lane + 32·e.
struct LaneVec {
  float v[kMaxElemsPerLane];
  __device__ void load(const float* p, int hd) {
    const int lane = threadIdx.x % kWarp;
#pragma unroll
    for (int e = 0; e < kMaxElemsPerLane; ++e) {
      const int d = lane + kWarp * e;
      v[e] = d < hd ? p[d] : 0.f;
    }
  }
  __device__ void zero() {
#pragma unroll
    for (int e = 0; e < kMaxElemsPerLane; ++e) v[e] = 0.f;
  }
  // The full dot product with p (every lane gets it).
  __device__ float dot(const float* p, int hd) const {
    const int lane = threadIdx.x % kWarp;
    float s = 0.f;
#pragma unroll
    for (int e = 0; e < kMaxElemsPerLane; ++e) {
      const int d = lane + kWarp * e;
      if (d < hd) s = fmaf(v[e], p[d], s);
    }
    return warp_sum(s);
  }
  __device__ void axpy(float a, const float* p, int hd) {
    const int lane = threadIdx.x % kWarp;
#pragma unroll
    for (int e = 0; e < kMaxElemsPerLane; ++e) {
      const int d = lane + kWarp * e;
      if (d < hd) v[e] = fmaf(a, p[d], v[e]);
    }
  }
  __device__ void store(float* p, int hd) const {
    const int lane = threadIdx.x % kWarp;
#pragma unroll
    for (int e = 0; e < kMaxElemsPerLane; ++e) {
      const int d = lane + kWarp * e;
      if (d < hd) p[d] = v[e];
    }
  }
};

__device__ int64_t warp_row() { return static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; }

// Pass 1: row r = (b·T + t)·Hq + h.
__global__ void attention_stats_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                       const float* __restrict__ v, const float* __restrict__ d_out, AttnDims d,
                                       float* __restrict__ lse, float* __restrict__ delta) {
  const int64_t r = warp_row();
  if (r >= d.b * d.t * d.hq) return;
  const int h = static_cast<int>(r % d.hq);
  const int64_t bt = r / d.hq, bi = bt / d.t, ti = bt % d.t;
  const int g = h / (d.hq / d.hkv);
  const float slope = d.slope(h);
  LaneVec qv, o;
  qv.load(q + bt * d.qrow() + static_cast<int64_t>(h) * d.hd, d.hd);
  const float* kb = k + bi * d.t * d.kvrow() + static_cast<int64_t>(g) * d.hd;
  const float* vb = v + bi * d.t * d.kvrow() + static_cast<int64_t>(g) * d.hd;
  float m = -INFINITY, l = 0.f;
  for (int64_t s = d.first_key(ti); s <= ti; ++s) {
    const float sc = d.logit(qv.dot(kb + s * d.kvrow(), d.hd), slope * static_cast<float>(s));
    const float m2 = fmaxf(m, sc);
    l = l * expf(m - m2) + expf(sc - m2);
    m = m2;
  }
  const float lse_r = m + logf(l);
  o.zero();
  for (int64_t s = d.first_key(ti); s <= ti; ++s) {
    const float p = expf(d.logit(qv.dot(kb + s * d.kvrow(), d.hd), slope * static_cast<float>(s)) - lse_r);
    o.axpy(p, vb + s * d.kvrow(), d.hd);
  }
  LaneVec dov;
  dov.load(d_out + bt * d.qrow() + static_cast<int64_t>(h) * d.hd, d.hd);
  float dsum = 0.f;
#pragma unroll
  for (int e = 0; e < kMaxElemsPerLane; ++e) dsum = fmaf(dov.v[e], o.v[e], dsum);
  dsum = warp_sum(dsum);
  if (threadIdx.x % kWarp == 0) {
    lse[r] = lse_r;
    delta[r] = dsum;
  }
}

// Pass 2: dQ, row r = (b·T + t)·Hq + h.
__global__ void attention_dq_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                    const float* __restrict__ v, const float* __restrict__ d_out, AttnDims d,
                                    const float* __restrict__ lse, const float* __restrict__ delta,
                                    float* __restrict__ dq) {
  const int64_t r = warp_row();
  if (r >= d.b * d.t * d.hq) return;
  const int h = static_cast<int>(r % d.hq);
  const int64_t bt = r / d.hq, bi = bt / d.t, ti = bt % d.t;
  const int g = h / (d.hq / d.hkv);
  const float slope = d.slope(h);
  LaneVec qv, dov, acc;
  qv.load(q + bt * d.qrow() + static_cast<int64_t>(h) * d.hd, d.hd);
  dov.load(d_out + bt * d.qrow() + static_cast<int64_t>(h) * d.hd, d.hd);
  acc.zero();
  const float* kb = k + bi * d.t * d.kvrow() + static_cast<int64_t>(g) * d.hd;
  const float* vb = v + bi * d.t * d.kvrow() + static_cast<int64_t>(g) * d.hd;
  for (int64_t s = d.first_key(ti); s <= ti; ++s) {
    const float qk = qv.dot(kb + s * d.kvrow(), d.hd);
    const float p = expf(d.logit(qk, slope * static_cast<float>(s)) - lse[r]);
    const float dp = dov.dot(vb + s * d.kvrow(), d.hd);
    acc.axpy(d.scale * p * (dp - delta[r]) * d.cap_grad(qk), kb + s * d.kvrow(), d.hd);
  }
  acc.store(dq + bt * d.qrow() + static_cast<int64_t>(h) * d.hd, d.hd);
}

// Pass 3: dK and dV, row r = (b·T + s)·Hkv + g.
__global__ void attention_dkv_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                     const float* __restrict__ v, const float* __restrict__ d_out, AttnDims d,
                                     const float* __restrict__ lse, const float* __restrict__ delta,
                                     float* __restrict__ dk, float* __restrict__ dv) {
  const int64_t r = warp_row();
  if (r >= d.b * d.t * d.hkv) return;
  const int g = static_cast<int>(r % d.hkv);
  const int64_t bs = r / d.hkv, bi = bs / d.t, si = bs % d.t;
  const int group = d.hq / d.hkv;
  LaneVec kv, vv, dkv, dvv;
  kv.load(k + bs * d.kvrow() + static_cast<int64_t>(g) * d.hd, d.hd);
  vv.load(v + bs * d.kvrow() + static_cast<int64_t>(g) * d.hd, d.hd);
  dkv.zero();
  dvv.zero();
  for (int h = g * group; h < (g + 1) * group; ++h) {
    const float bias = d.slope(h) * static_cast<float>(si);  // ALiBi of key si, whichever query
    for (int64_t ti = si; ti <= d.last_query(si); ++ti) {
      const int64_t bt = bi * d.t + ti, row = bt * d.hq + h;
      const float* qp = q + bt * d.qrow() + static_cast<int64_t>(h) * d.hd;
      const float* dop = d_out + bt * d.qrow() + static_cast<int64_t>(h) * d.hd;
      const float qk = kv.dot(qp, d.hd);
      const float p = expf(d.logit(qk, bias) - lse[row]);
      dvv.axpy(p, dop, d.hd);
      const float dp = vv.dot(dop, d.hd);
      dkv.axpy(d.scale * p * (dp - delta[row]) * d.cap_grad(qk), qp, d.hd);
    }
  }
  dkv.store(dk + bs * d.kvrow() + static_cast<int64_t>(g) * d.hd, d.hd);
  dvv.store(dv + bs * d.kvrow() + static_cast<int64_t>(g) * d.hd, d.hd);
}

unsigned warp_blocks(int64_t rows) { return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

void rms_norm_backward(const float* x, const float* w, float eps, const float* dy, float* dx, int64_t rows, int64_t d,
                       cudaStream_t stream) {
  if (rows == 0 || d == 0) return;
  rms_norm_backward_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(x, w, eps, dy, dx, d);
  check_launch("rms_norm_backward");
}

void layer_norm_backward(const float* x, const float* w, float eps, const float* dy, float* dx, int64_t rows, int64_t d,
                         cudaStream_t stream) {
  if (rows == 0 || d == 0) return;
  layer_norm_backward_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(x, w, eps, dy, dx, d);
  check_launch("layer_norm_backward");
}

void gelu_backward(const float* x, Gelu form, const float* d_out, float* dx, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<blocks_for(n, kElemThreads), kElemThreads, 0, stream>>>(x, form, d_out, dx, n);
  check_launch("gelu_backward");
}

void silu_mul_backward(const float* gate, const float* up, const float* d_out, float* d_gate, float* d_up, int64_t n,
                       cudaStream_t stream) {
  if (n == 0) return;
  gated_backward_kernel<<<blocks_for(n, kElemThreads), kElemThreads, 0, stream>>>(gate, up, d_out, d_gate, d_up, n,
                                                                                  SiluGrad{});
  check_launch("silu_mul_backward");
}

void gelu_mul_backward(const float* gate, const float* up, Gelu form, const float* d_out, float* d_gate, float* d_up,
                       int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gated_backward_kernel<<<blocks_for(n, kElemThreads), kElemThreads, 0, stream>>>(gate, up, d_out, d_gate, d_up, n,
                                                                                  GeluGrad{form});
  check_launch("gelu_mul_backward");
}

void attention_backward(const float* q, const float* k, const float* v, const float* d_out, const AttentionSpec& spec,
                        float* dq, float* dk, float* dv, float* lse, float* delta, int64_t batch, int64_t tokens,
                        int64_t hq, int64_t hkv, int64_t head_dim, cudaStream_t stream) {
  const AttnDims d{batch,      tokens,      static_cast<int>(hq), static_cast<int>(hkv), static_cast<int>(head_dim),
                   spec.scale, spec.window, spec.alibi_heads,     spec.softcap};
  const int64_t qrows = batch * tokens * hq, kvrows = batch * tokens * hkv;
  if (qrows == 0) return;
  const int threads = kWarpsPerBlock * kWarp;
  attention_stats_kernel<<<warp_blocks(qrows), threads, 0, stream>>>(q, k, v, d_out, d, lse, delta);
  check_launch("attention_backward (stats)");
  attention_dq_kernel<<<warp_blocks(qrows), threads, 0, stream>>>(q, k, v, d_out, d, lse, delta, dq);
  check_launch("attention_backward (dq)");
  attention_dkv_kernel<<<warp_blocks(kvrows), threads, 0, stream>>>(q, k, v, d_out, d, lse, delta, dk, dv);
  check_launch("attention_backward (dk, dv)");
}

}  // namespace corolla::gpu
