// AVX-512 decode-attention products (decode_attention.hpp). This file alone is compiled with AVX-512 flags; like the
// matrix-vector kernels it uses no inline function or template from a header shared with portable code.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/decode_attention.hpp"

namespace corolla {
namespace {

// W lanes of a cached key or value: f32 as stored, f16 widened (exactly) to f32.
inline __m512 load_lanes(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load_lanes(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Lane j of the result: the sum of v[j]'s 16 lanes. Every key's sum is added in the same order whichever lane it
// lands in, so a key's score does not depend on where its block of 16 starts.
inline __m512 sums_of_16(const __m512 (&v)[16]) {
  __m512 x[8], y[4];
  for (int i = 0; i < 8; ++i)
    x[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(x[2 * i]), b = _mm512_castps_pd(x[2 * i + 1]);
    y[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  const __m512 w01 = _mm512_add_ps(_mm512_shuffle_f32x4(y[0], y[1], 0x88), _mm512_shuffle_f32x4(y[0], y[1], 0xDD));
  const __m512 w23 = _mm512_add_ps(_mm512_shuffle_f32x4(y[2], y[3], 0x88), _mm512_shuffle_f32x4(y[2], y[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88), _mm512_shuffle_f32x4(w01, w23, 0xDD));
}

// Products of q with one key, lane by lane, over C vectors of 16 (C = 0: `chunks` of them, known at run time).
template <int C, class T>
inline __m512 lane_products(const float* q, const T* k, int64_t chunks) {
  const int64_t n = C > 0 ? C : chunks;
  __m512 a = _mm512_mul_ps(_mm512_loadu_ps(q), load_lanes(k));
  for (int64_t i = 1; i < n; ++i) a = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * i), load_lanes(k + 16 * i), a);
  return a;
}

template <int C, class T>
void scores_by(const float* q, int64_t ldq, int64_t rows, const T* k, int64_t ldk, int64_t keys, int64_t chunks,
               float scale, float* scores, int64_t lds) {
  const __m512 s = _mm512_set1_ps(scale);
  // A block of 16 keys (at most 4 KB at a head of 64) stays in L1 while every row reads it.
  for (int64_t j0 = 0; j0 < keys; j0 += 16) {
    const int64_t n = keys - j0 < 16 ? keys - j0 : 16;
    for (int64_t r = 0; r < rows; ++r) {
      const float* qr = q + r * ldq;
      __m512 acc[16];
      for (int64_t j = 0; j < 16; ++j)
        acc[j] = j < n ? lane_products<C>(qr, k + (j0 + j) * ldk, chunks) : _mm512_setzero_ps();
      _mm512_mask_storeu_ps(scores + r * lds + j0, static_cast<__mmask16>((1u << n) - 1),
                            _mm512_mul_ps(sums_of_16(acc), s));
    }
  }
}

template <class T>
void scores(const float* q, int64_t ldq, int64_t rows, const T* k, int64_t ldk, int64_t keys, int64_t head_dim,
            float scale, float* out, int64_t lds) {
  const int64_t chunks = head_dim / 16;
  switch (chunks) {
    case 4: return scores_by<4>(q, ldq, rows, k, ldk, keys, chunks, scale, out, lds);
    case 8: return scores_by<8>(q, ldq, rows, k, ldk, keys, chunks, scale, out, lds);
    case 5: return scores_by<5>(q, ldq, rows, k, ldk, keys, chunks, scale, out, lds);
    case 6: return scores_by<6>(q, ldq, rows, k, ldk, keys, chunks, scale, out, lds);
    default: return scores_by<0>(q, ldq, rows, k, ldk, keys, chunks, scale, out, lds);
  }
}

// R rows by C vectors of 16 of the output, summed over the keys in order (one fused multiply-add per key and lane:
// the same sums whichever block of rows or run of keys they are computed in).
template <int R, int C, class T>
void values_block(const float* p, int64_t ldp, const T* v, int64_t ldv, int64_t keys, float* out, int64_t ldo,
                  bool accumulate) {
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = accumulate ? _mm512_loadu_ps(out + r * ldo + 16 * c) : _mm512_setzero_ps();
  for (int64_t s = 0; s < keys; ++s) {
    __m512 vs[C];
    for (int c = 0; c < C; ++c) vs[c] = load_lanes(v + s * ldv + 16 * c);
    for (int r = 0; r < R; ++r) {
      const __m512 w = _mm512_set1_ps(p[r * ldp + s]);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(w, vs[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + r * ldo + 16 * c, acc[r][c]);
}

template <int R, class T>
void values_rows(const float* p, int64_t ldp, const T* v, int64_t ldv, int64_t keys, int64_t chunks, float* out,
                 int64_t ldo, bool accumulate) {
  for (int64_t c0 = 0; c0 < chunks; c0 += 4) {
    const T* vc = v + 16 * c0;
    float* oc = out + 16 * c0;
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
  const int64_t chunks = head_dim / 16;
  for (int64_t s0 = 0; s0 < keys; s0 += kValueTile) {
    const int64_t tile = keys - s0 < kValueTile ? keys - s0 : kValueTile;
    const bool add = accumulate || s0 > 0;
    for (int64_t r0 = 0; r0 < rows; r0 += 4) {
      const float* pr = p + r0 * ldp + s0;
      const T* vt = v + s0 * ldv;
      float* o = out + r0 * ldo;
      switch (rows - r0 < 4 ? rows - r0 : 4) {
        case 1: values_rows<1>(pr, ldp, vt, ldv, tile, chunks, o, ldo, add); break;
        case 2: values_rows<2>(pr, ldp, vt, ldv, tile, chunks, o, ldo, add); break;
        case 3: values_rows<3>(pr, ldp, vt, ldv, tile, chunks, o, ldo, add); break;
        default: values_rows<4>(pr, ldp, vt, ldv, tile, chunks, o, ldo, add); break;
      }
    }
  }
}

void widen_f16(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* s = src + r * ld;
    float* d = dst + r * cols;
    for (int64_t c = 0; c < cols; c += 16) {
      const __mmask16 m =
          cols - c >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (cols - c)) - 1);
      _mm512_mask_storeu_ps(d + c, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, s + c)));
    }
  }
}

void narrow_f16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT));
  }
}

}  // namespace

const DecodeAttentionKernels& avx512_decode_attention_kernels() {
  static const DecodeAttentionKernels k{.isa = "avx512",
                                        .lanes = 16,
                                        .scores = scores<float>,
                                        .values = values<float>,
                                        .scores_f16 = scores<uint16_t>,
                                        .values_f16 = values<uint16_t>,
                                        .widen_f16 = widen_f16,
                                        .narrow_f16 = narrow_f16};
  return k;
}

}  // namespace corolla
