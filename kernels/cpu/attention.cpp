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
  int64_t b, t, hq, hd, hkv, group;
};

// The slots [from, from + span) of sequence `seq`'s KV head `kvh`, walked as the runs of consecutive pool rows
// they lie in (usually one: a sequence's pages are usually consecutive in the pool): each run's first key and
// value and its length, and where it starts within the span.
template <class F>
void for_each_run(const KvPages& cache, int64_t seq, int64_t kvh, int64_t hd, int64_t from, int64_t span, F&& f) {
  const int64_t hkv = cache.k.dim(2);
  const float* pk = cache.k.data_as<const float>();
  const float* pv = cache.v.data_as<const float>();
  for (int64_t at = 0; at < span;) {
    const int64_t len = cache.run(seq, from + at, span - at);
    const int64_t row = cache.row(seq, from + at);
    f(at, len, pk + (row * hkv + kvh) * hd, pv + (row * hkv + kvh) * hd);
    at += len;
  }
}

// scores[rows, span] = scale · q · kᵀ for rows of q (row stride ldq) against the `span` cached keys of
// sequence `seq`'s KV head `kvh` from slot `from`: one sgemm per run of consecutive pool rows.
void attention_scores(const KvPages& cache, int64_t seq, int64_t kvh, int64_t from, int64_t rows, int64_t span,
                      int64_t hd, float scale, const float* q, int64_t ldq, float* scores) {
  const int64_t ldk = cache.k.dim(2) * hd;
  for_each_run(cache, seq, kvh, hd, from, span, [&](int64_t at, int64_t len, const float* k, const float*) {
    if (dnnl_sgemm('N', 'T', rows, len, hd, scale, q, ldq, k, ldk, 0.f, scores + at, span) != dnnl_success)
      throw std::runtime_error("attention: oneDNN sgemm failed");
  });
}

// out[rows, hd] (row stride ldo) = p[rows, span] · v over the same slots: the runs' products summed.
void attention_values(const KvPages& cache, int64_t seq, int64_t kvh, int64_t from, int64_t rows, int64_t span,
                      int64_t hd, const float* p, float* out, int64_t ldo) {
  const int64_t ldv = cache.v.dim(2) * hd;
  for_each_run(cache, seq, kvh, hd, from, span, [&](int64_t at, int64_t len, const float*, const float* v) {
    if (dnnl_sgemm('N', 'N', rows, hd, len, 1.f, p + at, span, v, ldv, at == 0 ? 0.f : 1.f, out, ldo) != dnnl_success)
      throw std::runtime_error("attention: oneDNN sgemm failed");
  });
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
// products run as GEMMs rather than one dot product at a time (at 1500 cached tokens, 13.5 against 50.4 ms of a
// TinyLlama-shaped decode step on 2 threads: docs/PERFORMANCE.md, "Attention over a paged KV cache"). When a
// sequence has fewer groups than two per thread, each group's heads are split into as many pieces as give every
// thread two (each piece reads the group's keys and values again; pieces never outnumber the group's heads, so none
// is empty). The split is the sequence's, not the batch's: a product of fewer rows may round otherwise, and a
// session's tokens must not depend on the sessions batched with it (a batch's decode steps are one call).
void attention_by_group(ThreadPool& pool, const Dims& d, const float* pq, const KvPages& cache,
                        std::span<const int32_t> positions, const AttentionSpec& spec, float* po) {
  const auto softmax_row = best_vector_kernels().softmax_row;
  const int64_t groups = d.b * d.t * d.hkv, per_sequence = d.t * d.hkv;
  const int64_t pieces = std::clamp<int64_t>((2 * pool.size() + per_sequence - 1) / per_sequence, 1, d.group);
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
      float* o0 = po + (token * d.hq + h0) * d.hd;
      scores.resize(static_cast<size_t>(rows * span));
      attention_scores(cache, bi, kvh, first, rows, span, d.hd, spec.scale, q0, d.hd, scores.data());
      for (int64_t r = 0; r < rows; ++r) {
        cap_scores(scores.data() + r * span, span, spec);
        add_alibi(scores.data() + r * span, span, spec.alibi_slope(h0 + r), first);
        softmax_row(scores.data() + r * span, span);
      }
      attention_values(cache, bi, kvh, first, rows, span, d.hd, scores.data(), o0, d.hd);
    }
  });
}

// One (sequence, head) at a time with two GEMMs per block of queries over the strided cache (prefill). A block
// multiplies the slots from the first any of its queries sees to the last; each row's softmax covers its own.
void attention_by_gemm(ThreadPool& pool, const Dims& d, const float* pq, const KvPages& cache,
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
        scores.resize(static_cast<size_t>(rows * span));
        const float* q0 = pq + ((bi * d.t + t0) * d.hq + h) * d.hd;
        float* o0 = po + ((bi * d.t + t0) * d.hq + h) * d.hd;
        // scores[t, s] = scale · q_t · k_(from + s)
        attention_scores(cache, bi, kvh, from, rows, span, d.hd, spec.scale, q0, d.hq * d.hd, scores.data());
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
        attention_values(cache, bi, kvh, from, rows, span, d.hd, scores.data(), o0, d.hq * d.hd);
      }
    }
  });
}

}  // namespace

void cpu_attention(ThreadPool& pool, const Tensor& q, const KvPages& cache, std::span<const int32_t> positions,
                   const AttentionSpec& spec, Tensor& out) {
  const Dims d{q.dim(0), q.dim(1), q.dim(2), q.dim(3), cache.k.dim(2), q.dim(2) / cache.k.dim(2)};
  const float* pq = q.data_as<const float>();
  float* po = out.data_as<float>();
  if (d.t >= kAttentionGemmTokens)
    attention_by_gemm(pool, d, pq, cache, positions, spec, po);
  else
    attention_by_group(pool, d, pq, cache, positions, spec, po);
}

}  // namespace corolla
