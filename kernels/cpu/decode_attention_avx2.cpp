// AVX2 decode-attention products (decode_attention.hpp). This file alone is compiled with AVX2/FMA flags; like the
// matrix-vector kernels it uses no inline function or template from a header shared with portable code.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/decode_attention.hpp"

namespace corolla {
namespace {

// 8 lanes of a cached key or value: f32 as stored, f16 widened (exactly) to f32.
inline __m256 load_lanes(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load_lanes(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Lane j of the result: the sum of v[j]'s 8 lanes, each key's in the same order whichever lane it lands in.
inline __m256 sums_of_8(const __m256 (&v)[8]) {
  __m256 x[4], y[2];
  for (int i = 0; i < 4; ++i)
    x[i] = _mm256_add_ps(_mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 2; ++i) {
    const __m256d a = _mm256_castps_pd(x[2 * i]), b = _mm256_castps_pd(x[2 * i + 1]);
    y[i] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)), _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
  }
  return _mm256_add_ps(_mm256_permute2f128_ps(y[0], y[1], 0x20), _mm256_permute2f128_ps(y[0], y[1], 0x31));
}

// Products of q with one key, lane by lane, over C vectors of 8 (C = 0: `chunks` of them, known at run time).
template <int C, class T>
inline __m256 lane_products(const float* q, const T* k, int64_t chunks) {
  const int64_t n = C > 0 ? C : chunks;
  __m256 a = _mm256_mul_ps(_mm256_loadu_ps(q), load_lanes(k));
  for (int64_t i = 1; i < n; ++i) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * i), load_lanes(k + 8 * i), a);
  return a;
}

template <int C, class T>
void scores_by(const float* q, int64_t ldq, int64_t rows, const T* k, int64_t ldk, int64_t keys, int64_t chunks,
               float scale, float* scores, int64_t lds) {
  const __m256 s = _mm256_set1_ps(scale);
  // A block of 8 keys stays in L1 while every row reads it.
  for (int64_t j0 = 0; j0 < keys; j0 += 8) {
    const int64_t n = keys - j0 < 8 ? keys - j0 : 8;
    for (int64_t r = 0; r < rows; ++r) {
      const float* qr = q + r * ldq;
      float* out = scores + r * lds;
      __m256 acc[8];
      for (int64_t j = 0; j < 8; ++j)
        acc[j] = j < n ? lane_products<C>(qr, k + (j0 + j) * ldk, chunks) : _mm256_setzero_ps();
      const __m256 sums = _mm256_mul_ps(sums_of_8(acc), s);
      if (n == 8) {
        _mm256_storeu_ps(out + j0, sums);
      } else {
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, sums);
        for (int64_t j = 0; j < n; ++j) out[j0 + j] = lanes[j];
      }
    }
  }
}

template <class T>
void scores(const float* q, int64_t ldq, int64_t rows, const T* k, int64_t ldk, int64_t keys, int64_t head_dim,
            float scale, float* out, int64_t lds) {
  const int64_t chunks = head_dim / 8;
  switch (chunks) {
    case 8: return scores_by<8>(q, ldq, rows, k, ldk, keys, chunks, scale, out, lds);
    case 16: return scores_by<16>(q, ldq, rows, k, ldk, keys, chunks, scale, out, lds);
    default: return scores_by<0>(q, ldq, rows, k, ldk, keys, chunks, scale, out, lds);
  }
}

// R rows by C vectors of 8 of the output, summed over the keys in order (one fused multiply-add per key and lane).
template <int R, int C, class T>
void values_block(const float* p, int64_t ldp, const T* v, int64_t ldv, int64_t keys, float* out, int64_t ldo,
                  bool accumulate) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = accumulate ? _mm256_loadu_ps(out + r * ldo + 8 * c) : _mm256_setzero_ps();
  for (int64_t s = 0; s < keys; ++s) {
    __m256 vs[C];
    for (int c = 0; c < C; ++c) vs[c] = load_lanes(v + s * ldv + 8 * c);
    for (int r = 0; r < R; ++r) {
      const __m256 w = _mm256_set1_ps(p[r * ldp + s]);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(w, vs[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(out + r * ldo + 8 * c, acc[r][c]);
}

// Blocks of up to 3 rows by 4 vectors: 12 sums, 4 values and a weight in the 16 registers.
template <int R, class T>
void values_rows(const float* p, int64_t ldp, const T* v, int64_t ldv, int64_t keys, int64_t chunks, float* out,
                 int64_t ldo, bool accumulate) {
  for (int64_t c0 = 0; c0 < chunks; c0 += 4) {
    const T* vc = v + 8 * c0;
    float* oc = out + 8 * c0;
    switch (chunks - c0 < 4 ? chunks - c0 : 4) {
      case 1: values_block<R, 1>(p, ldp, vc, ldv, keys, oc, ldo, accumulate); break;
      case 2: values_block<R, 2>(p, ldp, vc, ldv, keys, oc, ldo, accumulate); break;
      case 3: values_block<R, 3>(p, ldp, vc, ldv, keys, oc, ldo, accumulate); break;
      default: values_block<R, 4>(p, ldp, vc, ldv, keys, oc, ldo, accumulate); break;
    }
  }
}

// Keys in tiles of kValueTile (32 KB of values at a head of 64), each tile's values read from L1 by every block of
// rows and vectors after the first; a tile continues the sums of the one before, in the same order.
constexpr int64_t kValueTile = 128;

template <class T>
void values(const float* p, int64_t ldp, int64_t rows, const T* v, int64_t ldv, int64_t keys, int64_t head_dim,
            float* out, int64_t ldo, bool accumulate) {
  const int64_t chunks = head_dim / 8;
  for (int64_t s0 = 0; s0 < keys; s0 += kValueTile) {
    const int64_t tile = keys - s0 < kValueTile ? keys - s0 : kValueTile;
    const bool add = accumulate || s0 > 0;
    for (int64_t r0 = 0; r0 < rows; r0 += 3) {
      const float* pr = p + r0 * ldp + s0;
      const T* vt = v + s0 * ldv;
      float* o = out + r0 * ldo;
      switch (rows - r0 < 3 ? rows - r0 : 3) {
        case 1: values_rows<1>(pr, ldp, vt, ldv, tile, chunks, o, ldo, add); break;
        case 2: values_rows<2>(pr, ldp, vt, ldv, tile, chunks, o, ldo, add); break;
        default: values_rows<3>(pr, ldp, vt, ldv, tile, chunks, o, ldo, add); break;
      }
    }
  }
}

void widen_f16(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, float* dst) {
  const int64_t whole = cols / 8 * 8;
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* s = src + r * ld;
    float* d = dst + r * cols;
    for (int64_t c = 0; c < whole; c += 8) _mm256_storeu_ps(d + c, load_lanes(s + c));
    for (int64_t c = whole; c < cols; ++c) d[c] = _cvtsh_ss(s[c]);
  }
}

void narrow_f16(const float* src, uint16_t* dst, int64_t n) {
  const int64_t whole = n / 8 * 8;
  for (int64_t i = 0; i < whole; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (int64_t i = whole; i < n; ++i) dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

}  // namespace

const DecodeAttentionKernels& avx2_decode_attention_kernels() {
  static const DecodeAttentionKernels k{.isa = "avx2",
                                        .lanes = 8,
                                        .scores = scores<float>,
                                        .values = values<float>,
                                        .scores_f16 = scores<uint16_t>,
                                        .values_f16 = values<uint16_t>,
                                        .widen_f16 = widen_f16,
                                        .narrow_f16 = narrow_f16};
  return k;
}

}  // namespace corolla
