// Causal grouped-query attention over a KV cache: one block per (token, query head).
//
// Each warp walks a share of the cache slots positions[token] - window + 1 .. positions[token] (from slot 0 without a
// window) with an online softmax (running max, running sum,
// running weighted sum of V held across the warp's lanes), so the number of slots is limited only by the cache;
// the block's warps are merged at the end. A warp takes four slots per step to keep several loads in flight.
#include "kernels/backend.hpp"
#include "kernels/cuda/common.cuh"

namespace corolla::gpu {
namespace {

constexpr int kAttnWarps = 8;
constexpr int kAttnThreads = kAttnWarps * kWarp;
constexpr int kSlotsPerStep = 4;

// E: elements of a head vector per lane (head_dim ≤ 32·E).
template <int E>
__global__ void __launch_bounds__(kAttnThreads)
    attention_kernel(const float* __restrict__ q, const float* __restrict__ k_cache,
                     const float* __restrict__ v_cache, const int32_t* __restrict__ positions, float scale,
                     int64_t window, int64_t alibi_heads, float* __restrict__ out, int64_t tokens, int hq, int hkv, int64_t slots, int hd) {
  extern __shared__ float merged[];  // [kAttnWarps, hd]
  __shared__ float warp_max_s[kAttnWarps], warp_sum_s[kAttnWarps];

  const int64_t bt = blockIdx.x / hq;  // b · tokens + t
  const int h = static_cast<int>(blockIdx.x % hq);
  const int64_t b = bt / tokens;
  const int kvh = h / (hq / hkv);
  const int64_t n = static_cast<int64_t>(positions[bt]) + 1;  // one past the last slot seen
  const int64_t first = window > 0 && n > window ? n - window : 0;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const float slope = AttentionSpec{scale, window, alibi_heads}.alibi_slope(h);  // 0 without ALiBi

  const float* qv = q + (bt * hq + h) * hd;
  float qr[E], acc[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = lane + kWarp * e;
    qr[e] = d < hd ? qv[d] : 0.f;
    acc[e] = 0.f;
  }
  const int64_t stride = static_cast<int64_t>(hkv) * hd;  // between consecutive slots
  const float* kb = k_cache + (b * slots * hkv + kvh) * hd;
  const float* vb = v_cache + (b * slots * hkv + kvh) * hd;

  float m = -INFINITY, l = 0.f;
  for (int64_t s0 = first + static_cast<int64_t>(warp) * kSlotsPerStep; s0 < n; s0 += kAttnWarps * kSlotsPerStep) {
    float score[kSlotsPerStep];
#pragma unroll
    for (int u = 0; u < kSlotsPerStep; ++u) {
      float p = 0.f;
      if (s0 + u < n) {
        const float* kr = kb + (s0 + u) * stride;
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const int d = lane + kWarp * e;
          if (d < hd) p = fmaf(qr[e], kr[d], p);
        }
      }
      score[u] = p;
    }
#pragma unroll
    for (int u = 0; u < kSlotsPerStep; ++u) score[u] = warp_sum(score[u]);
#pragma unroll
    for (int u = 0; u < kSlotsPerStep; ++u) {
      if (s0 + u >= n) break;
      const float x = score[u] * scale + slope * static_cast<float>(s0 + u);
      const float m_new = fmaxf(m, x);
      const float correction = expf(m - m_new);  // 0 for the first slot (m = -inf)
      const float p = expf(x - m_new);
      l = l * correction + p;
      const float* vr = vb + (s0 + u) * stride;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int d = lane + kWarp * e;
        if (d < hd) acc[e] = fmaf(p, vr[d], acc[e] * correction);
      }
      m = m_new;
    }
  }

  // Merge the warps: rescale each to the block's max.
  if (lane == 0) {
    warp_max_s[warp] = m;
    warp_sum_s[warp] = l;
  }
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = lane + kWarp * e;
    if (d < hd) merged[warp * hd + d] = acc[e];
  }
  __syncthreads();
  float block_m = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) block_m = fmaxf(block_m, warp_max_s[w]);
  float weight[kAttnWarps], total = 0.f;
#pragma unroll
  for (int w = 0; w < kAttnWarps; ++w) {
    weight[w] = warp_max_s[w] == -INFINITY ? 0.f : expf(warp_max_s[w] - block_m);  // warps that saw no slot
    total += warp_sum_s[w] * weight[w];
  }
  const float inv = 1.f / total;
  float* o = out + (bt * hq + h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kAttnWarps; ++w) s = fmaf(merged[w * hd + d], weight[w], s);
    o[d] = s * inv;
  }
}

template <int E>
void launch(const float* q, const float* k_cache, const float* v_cache, const int32_t* positions, float scale,
            int64_t window, int64_t alibi_heads, float* out, int64_t batch, int64_t tokens, int64_t hq, int64_t hkv, int64_t slots, int64_t head_dim,
            cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(kAttnWarps) * head_dim * sizeof(float);
  attention_kernel<E><<<static_cast<unsigned>(batch * tokens * hq), kAttnThreads, smem, stream>>>(
      q, k_cache, v_cache, positions, scale, window, alibi_heads, out, tokens, static_cast<int>(hq), static_cast<int>(hkv), slots,
      static_cast<int>(head_dim));
}

}  // namespace

void attention(const float* q, const float* k_cache, const float* v_cache, const int32_t* positions, float scale,
               int64_t window, int64_t alibi_heads, float* out, int64_t batch, int64_t tokens, int64_t hq, int64_t hkv, int64_t slots, int64_t head_dim,
               cudaStream_t stream) {
  if (batch * tokens * hq == 0 || head_dim == 0) return;
  if (head_dim <= 32)
    launch<1>(q, k_cache, v_cache, positions, scale, window, alibi_heads, out, batch, tokens, hq, hkv, slots, head_dim, stream);
  else if (head_dim <= 64)
    launch<2>(q, k_cache, v_cache, positions, scale, window, alibi_heads, out, batch, tokens, hq, hkv, slots, head_dim, stream);
  else if (head_dim <= 128)
    launch<4>(q, k_cache, v_cache, positions, scale, window, alibi_heads, out, batch, tokens, hq, hkv, slots, head_dim, stream);
  else
    launch<8>(q, k_cache, v_cache, positions, scale, window, alibi_heads, out, batch, tokens, hq, hkv, slots, head_dim, stream);
  check_launch("attention");
}

}  // namespace corolla::gpu
