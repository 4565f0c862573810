// Causal grouped-query attention over a paged KV cache: `splits` blocks per (token, query head).
//
// The slots a query sees, positions[token] - window + 1 .. positions[token] (from slot 0 without a window), are cut
// into up to `splits` equal parts of at least kMinSlotsPerSplit slots, one block each; the blocks a short history
// leaves without a part return at once. Each warp of a block walks a share of its part with an online softmax
// (running max, running sum, running weighted sum of V held across the warp's lanes), so the number of slots is
// limited only by the cache; the block's warps are merged at the end. A warp takes four slots per step to keep
// several loads in flight. With one part the block writes the output; with more (decode: too few (token, head)
// pairs to fill the GPU, so a long context would be walked by a few SMs) each block writes its part's max, sum and
// weighted sum, and the last block of each (token, head) to finish merges them. The launch depends on shapes only,
// never on the positions (read on the device), so a recorded step (a CUDA graph) stays right at any position.
#include <algorithm>

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
    attention_kernel(const float* __restrict__ q, DevicePages cache, const int32_t* __restrict__ positions,
                     AttentionSpec spec, float* __restrict__ out, int64_t tokens, int hq, int hkv, int hd, int splits,
                     float* __restrict__ partials, int* __restrict__ counters) {
  wait_for_prior_grid();
  allow_next_grid();
  extern __shared__ float merged[];  // [kAttnWarps, hd]
  __shared__ float warp_max_s[kAttnWarps], warp_sum_s[kAttnWarps];

  const int64_t pair = blockIdx.x / splits;  // (b · tokens + t) · hq + h
  const int split = static_cast<int>(blockIdx.x % splits);
  const int64_t bt = pair / hq;  // b · tokens + t
  const int h = static_cast<int>(pair % hq);
  const int64_t b = bt / tokens;
  const int kvh = h / (hq / hkv);
  const int64_t seen_end = static_cast<int64_t>(positions[bt]) + 1;  // one past the last slot seen
  const int64_t seen_first = spec.first_slot(seen_end - 1);
  // The parts in use for this query: no more than one per kMinSlotsPerSplit slots it sees (a short history is one
  // block's work; the launch's other blocks for it leave at once).
  const int active = static_cast<int>(
      min(static_cast<int64_t>(splits), (seen_end - seen_first + kMinSlotsPerSplit - 1) / kMinSlotsPerSplit));
  if (split >= active) return;
  const int64_t part = (seen_end - seen_first + active - 1) / active;
  const int64_t first = seen_first + split * part;
  const int64_t n = min(seen_end, first + part);  // this block's slots: first .. n - 1 (none if first >= n)
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const float slope = spec.alibi_slope(h);  // 0 without ALiBi

  const float* qv = q + (bt * hq + h) * hd;
  float qr[E], acc[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int d = lane + kWarp * e;
    qr[e] = d < hd ? qv[d] : 0.f;
    acc[e] = 0.f;
  }
  const int64_t stride = static_cast<int64_t>(hkv) * hd;  // between consecutive pool rows
  const float* kb = cache.k + static_cast<int64_t>(kvh) * hd;
  const float* vb = cache.v + static_cast<int64_t>(kvh) * hd;

  float m = -INFINITY, l = 0.f;
  for (int64_t s0 = first + static_cast<int64_t>(warp) * kSlotsPerStep; s0 < n; s0 += kAttnWarps * kSlotsPerStep) {
    // The step's pool rows: one page lookup, the next rows of the same page by adding (a step crosses a page
    // boundary at most once, and then looks the next page up).
    int64_t row[kSlotsPerStep];
    row[0] = cache.row(b, s0);
    const uint32_t in_page = static_cast<uint32_t>(s0) % cache.page_tokens;
#pragma unroll
    for (int u = 1; u < kSlotsPerStep; ++u)
      row[u] = in_page + u < cache.page_tokens ? row[0] + u : cache.row(b, s0 + u);
    float score[kSlotsPerStep];
#pragma unroll
    for (int u = 0; u < kSlotsPerStep; ++u) {
      float p = 0.f;
      if (s0 + u < n) {
        const float* kr = kb + row[u] * stride;
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
      const float x = spec.capped(score[u] * spec.scale) + slope * static_cast<float>(s0 + u);
      const float m_new = fmaxf(m, x);
      const float correction = expf(m - m_new);  // 0 for the first slot (m = -inf)
      const float p = expf(x - m_new);
      l = l * correction + p;
      const float* vr = vb + row[u] * stride;
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
  if (active == 1) {
    const float inv = 1.f / total;
    float* o = out + pair * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
      float s = 0.f;
#pragma unroll
      for (int w = 0; w < kAttnWarps; ++w) s = fmaf(merged[w * hd + d], weight[w], s);
      o[d] = s * inv;
    }
    return;
  }
  // This part's max, sum and unnormalised weighted sum of V (max -inf, sums 0 for a part with no slot); the last
  // block of the pair to finish merges all parts (counters[pair] counts the finished ones and is left at 0).
  float* p = partials + (pair * splits + split) * (hd + 2);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kAttnWarps; ++w) s = fmaf(merged[w * hd + d], weight[w], s);
    p[2 + d] = s;
  }
  if (threadIdx.x == 0) {
    p[0] = block_m;
    p[1] = total;
  }
  __threadfence();  // this part is visible before the count says so
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(&counters[pair], 1) == active - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const float* parts = partials + pair * splits * (hd + 2);  // read past L1: other blocks wrote them
  float m_all = -INFINITY;
  for (int s = 0; s < active; ++s) m_all = fmaxf(m_all, __ldcg(parts + s * (hd + 2)));
  float l_all = 0.f;
  for (int s = 0; s < active; ++s) {
    const float ms = __ldcg(parts + s * (hd + 2));
    if (ms != -INFINITY) l_all += __ldcg(parts + s * (hd + 2) + 1) * expf(ms - m_all);
  }
  const float inv_all = 1.f / l_all;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc_all = 0.f;
    for (int s = 0; s < active; ++s) {
      const float ms = __ldcg(parts + s * (hd + 2));
      if (ms != -INFINITY) acc_all = fmaf(__ldcg(parts + s * (hd + 2) + 2 + d), expf(ms - m_all), acc_all);
    }
    out[pair * hd + d] = acc_all * inv_all;
  }
  if (threadIdx.x == 0) counters[pair] = 0;
}

template <int E>
void launch(const float* q, const DevicePages& cache, const int32_t* positions, const AttentionSpec& spec, float* out,
            int64_t batch, int64_t tokens, int64_t hq, int64_t hkv, int64_t head_dim, int splits, float* partials,
            int* counters, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(kAttnWarps) * head_dim * sizeof(float);
  const int64_t pairs = batch * tokens * hq;
  launch_after(attention_kernel<E>, static_cast<unsigned>(pairs * splits), kAttnThreads, smem, stream, q, cache,
               positions, spec, out, tokens, static_cast<int>(hq), static_cast<int>(hkv), static_cast<int>(head_dim),
               splits, partials, counters);
}

}  // namespace

int attention_splits(int64_t pairs, int64_t slots, int64_t window, int sm_count) {
  if (pairs <= 0) return 1;
  const int64_t seen = window > 0 ? std::min(window, slots) : slots;  // the most slots a query sees
  const int64_t to_fill = (2 * static_cast<int64_t>(sm_count) + pairs - 1) / pairs;
  return static_cast<int>(std::clamp<int64_t>(std::min(to_fill, seen / kMinSlotsPerSplit), 1, kMaxAttentionSplits));
}

void attention(const float* q, const DevicePages& cache, const int32_t* positions, const AttentionSpec& spec,
               float* out, int64_t batch, int64_t tokens, int64_t hq, int64_t hkv, int64_t head_dim, int splits,
               float* partials, int* counters, cudaStream_t stream) {
  if (batch * tokens * hq == 0 || head_dim == 0) return;
  splits = std::max(splits, 1);
  auto go = [&]<int E>() {
    launch<E>(q, cache, positions, spec, out, batch, tokens, hq, hkv, head_dim, splits, partials, counters, stream);
  };
  if (head_dim <= 32)
    go.template operator()<1>();
  else if (head_dim <= 64)
    go.template operator()<2>();
  else if (head_dim <= 128)
    go.template operator()<4>();
  else
    go.template operator()<8>();
  check_launch("attention");
}

}  // namespace corolla::gpu
