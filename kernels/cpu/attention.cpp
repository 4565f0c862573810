#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/vector_math.hpp"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

extern "C" void omp_set_num_threads(int);

namespace corolla {
namespace {


struct Dims {
  int64_t b, t, hq, hd, slots, hkv, group;
};

// scores[rows, span] = scale · q · kᵀ for rows of q (row stride ldq) against `span` cached keys (row stride ldk).
void attention_scores(int64_t rows, int64_t span, int64_t hd, float scale, const float* q, int64_t ldq,
                      const float* k, int64_t ldk, float* scores) {
  if (dnnl_sgemm('N', 'T', rows, span, hd, scale, q, ldq, k, ldk, 0.f, scores, span) != dnnl_success)
    throw std::runtime_error("attention: oneDNN sgemm failed");
}

// out[rows, hd] (row stride ldo) = p[rows, span] · v for `span` cached values (row stride ldv).
void attention_values(int64_t rows, int64_t span, int64_t hd, const float* p, const float* v, int64_t ldv,
                      float* out, int64_t ldo) {
  if (dnnl_sgemm('N', 'N', rows, hd, span, 1.f, p, span, v, ldv, 0.f, out, ldo) != dnnl_success)
    throw std::runtime_error("attention: oneDNN sgemm failed");
}

// Gemma 2's soft cap on the `span` scores of a row (nothing without one).
void cap_scores(float* row, int64_t span, const AttentionSpec& spec) {
  if (spec.softcap > 0.0f)
    for (int64_t s = 0; s < span; ++s) row[s] = spec.capped(row[s]);
}

// ALiBi: row[s] += slope · (first + s) over the `span` slots from `first` (nothing when slope is 0).
void add_alibi(float* row, int64_t span, float slope, int64_t first) {
  if (slope == 0.0f) return;
  for (int64_t s = 0; s < span; ++s) row[s] += slope * static_cast<float>(first + s);
}

// Few queries (decode): per token and KV head, the query heads that share it (contiguous in q and out) as one
// block of rows, scores = Q·Kᵀ and out = P·V as two oneDNN sgemm calls over the cache in place. The keys and
// values are read once per group rather than once per query head (Hq / Hkv = 8 times for TinyLlama), and the
// products run as GEMMs rather than one dot product at a time: at 1500 cached tokens that took a TinyLlama-shaped
// decode step's attention from 50 to 13.5 ms on 2 threads (docs/PERFORMANCE.md). When there are fewer groups
// than two per thread, each group's heads are split into as many pieces as give every thread two (each piece
// reads the group's keys and values again; pieces never outnumber the group's heads, so none is empty).
void attention_by_group(ThreadPool& pool, const Dims& d, const float* pq, const float* pk, const float* pv,
                        std::span<const int32_t> positions, const AttentionSpec& spec, float* po) {
  const auto softmax_row = best_vector_kernels().softmax_row;
  const int64_t groups = d.b * d.t * d.hkv;
  const int64_t pieces = std::clamp<int64_t>((2 * pool.size() + groups - 1) / groups, 1, d.group);
  pool.parallel_for(groups * pieces, 1, [&](int64_t w0, int64_t w1) {
    omp_set_num_threads(1);  // oneDNN computes in this thread only
    thread_local std::vector<float> scores;
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t g = w / pieces, piece = w % pieces;
      const int64_t token = g / d.hkv, kvh = g % d.hkv, bi = token / d.t;
      const int64_t h0 = kvh * d.group + piece * d.group / pieces, h1 = kvh * d.group + (piece + 1) * d.group / pieces;
      const int64_t last = positions[static_cast<size_t>(token)], first = spec.first_slot(last);
      const int64_t rows = h1 - h0, span = last - first + 1;
      const float* q0 = pq + (token * d.hq + h0) * d.hd;
      const float* k0 = pk + ((bi * d.slots + first) * d.hkv + kvh) * d.hd;
      const float* v0 = pv + ((bi * d.slots + first) * d.hkv + kvh) * d.hd;
      float* o0 = po + (token * d.hq + h0) * d.hd;
      scores.resize(static_cast<size_t>(rows * span));
      attention_scores(rows, span, d.hd, spec.scale, q0, d.hd, k0, d.hkv * d.hd, scores.data());
      for (int64_t r = 0; r < rows; ++r) {
        cap_scores(scores.data() + r * span, span, spec);
        add_alibi(scores.data() + r * span, span, spec.alibi_slope(h0 + r), first);
        softmax_row(scores.data() + r * span, span);
      }
      attention_values(rows, span, d.hd, scores.data(), v0, d.hkv * d.hd, o0, d.hd);
    }
  });
}

// One (sequence, head) at a time with two GEMMs per block of queries over the strided cache (prefill). A block
// multiplies the slots from the first any of its queries sees to the last; each row's softmax covers its own.
void attention_by_gemm(ThreadPool& pool, const Dims& d, const float* pq, const float* pk, const float* pv,
                       std::span<const int32_t> positions, const AttentionSpec& spec, float* po) {
  const auto softmax_row = best_vector_kernels().softmax_row;
  pool.parallel_for(d.b * d.hq, 1, [&](int64_t w0, int64_t w1) {
    omp_set_num_threads(1);  // oneDNN computes in this thread only
    thread_local std::vector<float> scores;
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t bi = w / d.hq, h = w % d.hq, kvh = h / d.group;
      const float slope = spec.alibi_slope(h);
      for (int64_t t0 = 0; t0 < d.t; t0 += kAttentionQueryBlock) {
        const int64_t rows = std::min(kAttentionQueryBlock, d.t - t0);
        const int32_t* pos = positions.data() + bi * d.t + t0;
        const auto [lowest, highest] = std::minmax_element(pos, pos + rows);
        const int64_t from = spec.first_slot(*lowest), span = *highest + 1 - from;  // slots any query of the block sees
        const float* k0 = pk + ((bi * d.slots + from) * d.hkv + kvh) * d.hd;
        const float* v0 = pv + ((bi * d.slots + from) * d.hkv + kvh) * d.hd;
        scores.resize(static_cast<size_t>(rows * span));
        const float* q0 = pq + ((bi * d.t + t0) * d.hq + h) * d.hd;
        float* o0 = po + ((bi * d.t + t0) * d.hq + h) * d.hd;
        // scores[t, s] = scale · q_t · k_(from + s)
        attention_scores(rows, span, d.hd, spec.scale, q0, d.hq * d.hd, k0, d.hkv * d.hd, scores.data());
        for (int64_t ti = 0; ti < rows; ++ti) {
          float* row = scores.data() + ti * span;
          const int64_t first = spec.first_slot(pos[ti]) - from, last = pos[ti] - from;
          cap_scores(row + first, last - first + 1, spec);
          add_alibi(row + first, last - first + 1, slope, from + first);
          std::fill(row, row + first, 0.f);  // before the window: no weight
          softmax_row(row + first, last - first + 1);
          std::fill(row + last + 1, row + span, 0.f);  // causal mask: later slots get no weight
        }
        // out[t, :] = Σ_s p[t, s] · v_(from + s)
        attention_values(rows, span, d.hd, scores.data(), v0, d.hkv * d.hd, o0, d.hq * d.hd);
      }
    }
  });
}

}  // namespace

void cpu_attention(ThreadPool& pool, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                   std::span<const int32_t> positions, const AttentionSpec& spec, Tensor& out) {
  const Dims d{q.dim(0), q.dim(1), q.dim(2), q.dim(3), k_cache.dim(1), k_cache.dim(2), q.dim(2) / k_cache.dim(2)};
  for (int32_t p : positions)
    if (p < 0 || p >= d.slots)
      throw std::invalid_argument("attention: position " + std::to_string(p) + " outside the cache of " +
                                  std::to_string(d.slots) + " tokens");
  const float* pq = q.data_as<const float>();
  const float* pk = k_cache.data_as<const float>();
  const float* pv = v_cache.data_as<const float>();
  float* po = out.data_as<float>();
  if (d.t >= kAttentionGemmTokens) attention_by_gemm(pool, d, pq, pk, pv, positions, spec, po);
  else attention_by_group(pool, d, pq, pk, pv, positions, spec, po);
}

}  // namespace corolla
