#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/decode_attention.hpp"
#include "kernels/cpu/vector_math.hpp"
#include "kernels/dtype.hpp"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

extern "C" void omp_set_num_threads(int);

namespace corolla {
namespace {

struct Dims {
  int64_t b, t, hq, hd, hkv, group;
};

// The slots [from, from + span) of sequence `seq`, walked as the runs of consecutive pool rows they lie in
// (usually one: a sequence's pages are usually consecutive in the pool): each run's first pool row, its length, and
// where it starts within the span.
template <class F>
void for_each_run(const KvPages& cache, int64_t seq, int64_t from, int64_t span, F&& f) {
  for (int64_t at = 0; at < span;) {
    const int64_t len = cache.run(seq, from + at, span - at);
    f(at, len, cache.row(seq, from + at));
    at += len;
  }
}

// A run of `len` keys or values of one KV head from element `offset` of `pool` (rows `ld` apart) as f32 rows for
// oneDNN's sgemm: an f32 pool's in place (row stride ld), an f16 pool's widened into this thread's scratch (row
// stride hd).
std::pair<const float*, int64_t> f32_rows(const Tensor& pool, int64_t offset, int64_t ld, int64_t len, int64_t hd,
                                          std::vector<float>& scratch) {
  if (pool.dtype() == DType::f32) return {pool.data_as<const float>() + offset, ld};
  scratch.resize(static_cast<size_t>(len * hd));
  const uint16_t* src = pool.data_as<const uint16_t>() + offset;
  if (const DecodeAttentionKernels* simd = best_decode_attention_kernels()) {
    simd->widen_f16(src, ld, len, hd, scratch.data());
  } else {
    for (int64_t r = 0; r < len; ++r) to_f32(DType::f16, src + r * ld, scratch.data() + r * hd, hd);
  }
  return {scratch.data(), hd};
}

// scores[rows, span] (row stride lds) = scale · q · kᵀ for rows of q (row stride ldq) against the `span` cached keys
// of sequence `seq`'s KV head `kvh` from slot `from`: one product per run of consecutive pool rows, by `own`
// products (a decode step's few rows) or, without them, by oneDNN's sgemm.
void attention_scores(const KvPages& cache, int64_t seq, int64_t kvh, int64_t from, int64_t rows, int64_t span,
                      int64_t hd, float scale, const float* q, int64_t ldq, float* scores, int64_t lds,
                      const DecodeAttentionKernels* own) {
  const int64_t hkv = cache.k.dim(2), ld = hkv * hd;
  thread_local std::vector<float> scratch;
  for_each_run(cache, seq, from, span, [&](int64_t at, int64_t len, int64_t row) {
    const int64_t offset = (row * hkv + kvh) * hd;
    if (own && cache.k.dtype() == DType::f16)
      return own->scores_f16(q, ldq, rows, cache.k.data_as<const uint16_t>() + offset, ld, len, hd, scale, scores + at,
                             lds);
    if (own)
      return own->scores(q, ldq, rows, cache.k.data_as<const float>() + offset, ld, len, hd, scale, scores + at, lds);
    const auto [k, ldk] = f32_rows(cache.k, offset, ld, len, hd, scratch);
    if (dnnl_sgemm('N', 'T', rows, len, hd, scale, q, ldq, k, ldk, 0.f, scores + at, lds) != dnnl_success)
      throw std::runtime_error("attention: oneDNN sgemm failed");
  });
}

// out[rows, hd] (row stride ldo) (+)= p[rows, span] (row stride ldp) · v over the same slots: the runs' products
// summed, added to out where `accumulate`.
void attention_values(const KvPages& cache, int64_t seq, int64_t kvh, int64_t from, int64_t rows, int64_t span,
                      int64_t hd, const float* p, int64_t ldp, float* out, int64_t ldo, bool accumulate,
                      const DecodeAttentionKernels* own) {
  const int64_t hkv = cache.v.dim(2), ld = hkv * hd;
  thread_local std::vector<float> scratch;
  for_each_run(cache, seq, from, span, [&](int64_t at, int64_t len, int64_t row) {
    const int64_t offset = (row * hkv + kvh) * hd;
    const bool add = accumulate || at != 0;
    if (own && cache.v.dtype() == DType::f16)
      return own->values_f16(p + at, ldp, rows, cache.v.data_as<const uint16_t>() + offset, ld, len, hd, out, ldo, add);
    if (own) return own->values(p + at, ldp, rows, cache.v.data_as<const float>() + offset, ld, len, hd, out, ldo, add);
    const auto [v, ldv] = f32_rows(cache.v, offset, ld, len, hd, scratch);
    if (dnnl_sgemm('N', 'N', rows, hd, len, 1.f, p + at, ldp, v, ldv, add ? 1.f : 0.f, out, ldo) != dnnl_success)
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

// Slots a decode step's query heads read together, tile by tile (kernels' own products only): a tile's cache rows,
// which hold every KV head, come from memory once, for the first KV head that reads them, and from the core's caches
// for the others (48 KB of keys at the demo model's 3 KV heads of 64, 64 KB at TinyLlama's 4).
constexpr int64_t kKeyTile = 64;

// Few queries (decode): per token, its query heads in `parts` ranges, and in a range, the heads that share a KV head
// (contiguous in q and out) as one block of rows: scores = Q·Kᵀ, a softmax per row, out = P·V, over the cache in
// place. The keys and values are read once per block of rows rather than once per query head (Hq / Hkv = 8 times for
// TinyLlama), and the products run over many keys at once rather than one dot product at a time (at 1500 cached
// tokens, 13.5 against 50.4 ms of a TinyLlama-shaped decode step on 2 threads: docs/PERFORMANCE.md, "Attention over
// a paged KV cache").
// - With the kernels' own products (decode_attention.hpp), each row's results do not depend on the rows or keys
//   that share a call, so a token's heads are one range when the batch has two tokens per thread (more ranges, up
//   to one per head, when it has fewer), and a range reads its keys and values a tile of kKeyTile slots at a time,
//   every KV head of the range in turn: a KV head's slice of a cache row is a strided part of it (a quarter in
//   TinyLlama), and head by head over a long history each row came from memory once per KV head.
// - With oneDNN's sgemm, a product of fewer rows may round otherwise, so the ranges are KV groups, each split into
//   pieces only as the sequence's own tokens require (enough for two per thread), never as the batch does: a
//   session's tokens must not depend on the sessions batched with it (a batch's decode steps are one call).
void attention_by_group(ThreadPool& pool, const Dims& d, const float* pq, const KvPages& cache,
                        std::span<const int32_t> positions, const AttentionSpec& spec, float* po) {
  const auto softmax_row = best_vector_kernels().softmax_row;
  // Null where the CPU has no set or the heads' size is not a multiple of its vectors: oneDNN's sgemm then.
  const DecodeAttentionKernels* own = best_decode_attention_kernels();
  if (own && d.hd % own->lanes != 0) own = nullptr;
  const int64_t tokens = d.b * d.t, threads2 = 2 * static_cast<int64_t>(pool.size());
  const int64_t per_sequence = d.t * d.hkv;
  const int64_t pieces = own ? 0 : std::clamp<int64_t>((threads2 + per_sequence - 1) / per_sequence, 1, d.group);
  const int64_t parts = own ? std::clamp<int64_t>((threads2 + tokens - 1) / tokens, 1, d.hq) : d.hkv * pieces;
  // A token's query heads [h0, h1) in range `part` of `parts`.
  auto heads_of = [&](int64_t part) -> std::pair<int64_t, int64_t> {
    if (own) return {part * d.hq / parts, (part + 1) * d.hq / parts};
    const int64_t kvh = part / pieces, piece = part % pieces;
    return {kvh * d.group + piece * d.group / pieces, kvh * d.group + (piece + 1) * d.group / pieces};
  };
  pool.parallel_for(tokens * parts, 1, [&](int64_t w0, int64_t w1) {
    omp_set_num_threads(1);  // oneDNN computes in this thread only
    thread_local std::vector<float> scores;
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t token = w / parts, bi = token / d.t;
      const auto [h0, h1] = heads_of(w % parts);
      const int64_t last = positions[static_cast<size_t>(token)], first = spec.first_slot(last);
      const int64_t rows = h1 - h0, span = last - first + 1, tile = own ? kKeyTile : span;
      const float* q0 = pq + (token * d.hq + h0) * d.hd;
      float* o0 = po + (token * d.hq + h0) * d.hd;
      scores.resize(static_cast<size_t>(rows * span));
      // Each KV head's block of the range's rows: the KV head, its rows and its first row's place in the range.
      auto for_each_block = [&](auto&& f) {
        for (int64_t g0 = h0; g0 < h1;) {
          const int64_t kvh = g0 / d.group, g1 = std::min(h1, (kvh + 1) * d.group);
          f(kvh, g1 - g0, g0 - h0);
          g0 = g1;
        }
      };
      for (int64_t t0 = 0; t0 < span; t0 += tile)
        for_each_block([&](int64_t kvh, int64_t n, int64_t r) {
          attention_scores(cache, bi, kvh, first + t0, n, std::min(tile, span - t0), d.hd, spec.scale, q0 + r * d.hd,
                           d.hd, scores.data() + r * span + t0, span, own);
        });
      for (int64_t r = 0; r < rows; ++r) {
        cap_scores(scores.data() + r * span, span, spec);
        add_alibi(scores.data() + r * span, span, spec.alibi_slope(h0 + r), first);
        softmax_row(scores.data() + r * span, span);
      }
      for (int64_t t0 = 0; t0 < span; t0 += tile)
        for_each_block([&](int64_t kvh, int64_t n, int64_t r) {
          attention_values(cache, bi, kvh, first + t0, n, std::min(tile, span - t0), d.hd,
                           scores.data() + r * span + t0, span, o0 + r * d.hd, d.hd, t0 > 0, own);
        });
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
        attention_scores(cache, bi, kvh, from, rows, span, d.hd, spec.scale, q0, d.hq * d.hd, scores.data(), span,
                         nullptr);
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
        attention_values(cache, bi, kvh, from, rows, span, d.hd, scores.data(), span, o0, d.hq * d.hd, false, nullptr);
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
