// AVX2 matrix-vector kernels (with FMA and F16C) for plain weights (f32, f16, bf16), and the dequantization of
// every dtype for the GEMM path. This file alone is compiled with AVX2 flags. Quantized weights' matrix-vector
// products are integer ones (matvec_avx2_int8.cpp).
//
// Same shape as the AVX-512 kernels: weights are consumed in chunks of 32 values (32 plain values, or a quantized
// block for the decoders), decoded in registers into four vectors of 8 f32 and multiplied into f32 accumulators; R
// weight rows run side by side and up to M = 4 activation rows share each decoded chunk. With 16 registers, R * M <= 8.
//
// Everything here has internal linkage and uses no inline function or template from a header shared with the
// portable code: a copy compiled for AVX2 must never be the one the linker keeps for the whole program.
#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#include "kernels/cpu/matvec.hpp"
#include "kernels/cpu/matvec_simd.hpp"
#include "kernels/k_scales.hpp"

namespace corolla {
namespace {

constexpr int64_t kChunk = 32;
// Software prefetch. One row of x (decode): while a pass reads chunk c of its R rows, it prefetches chunk c of
// the rows kPrefetchGroups passes ahead. Several rows of x: 256 bytes ahead in each row, and the first 256 bytes
// of the next pass's rows before a pass (256 measured better than 512, 1024, 128 and none on an AVX2-only AMD
// EPYC). For one row of x, prefetching along the rows is slow where rows of 4 KiB start inside a page, as a real
// model file's do (a safetensors tensor starts wherever the JSON header ends): the hardware prefetchers, which
// stop at page boundaries, start over in the middle of every row. Two passes ahead measured best there (one,
// three and four passes did less) and no slower on page-aligned rows. Several rows of x keep the row-wise
// prefetch: their kernels are bound by the core more than by memory, and no difference showed there either way.
// Figures: docs/PERFORMANCE.md, "Engine end to end".
constexpr int64_t kPrefetchGroups = 2;
constexpr int64_t kPrefetchBytes = 256;

// Weight bytes per tile when several groups of x rows run over the same weights (well inside a core's L2).
constexpr int64_t kTileBytes = 256 * 1024;

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

inline float bfloat_to_float(uint16_t h) {
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(static_cast<uint32_t>(h) << 16))));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// --- decoders: chunk c of a row -> four vectors of 8 f32, in the order of the prepared x -------------------------

struct DecF32 {
  static constexpr bool kPermutesX = false;
  static constexpr int64_t kChunkBytes = 128;
  void load(const char* row, int64_t c, __m256 (&v)[4]) const {
    const float* p = reinterpret_cast<const float*>(row) + c * kChunk;
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(p + 8 * i);
  }
  float at(const char* row, int64_t i) const { return reinterpret_cast<const float*>(row)[i]; }
};

struct DecF16 {
  static constexpr bool kPermutesX = false;
  static constexpr int64_t kChunkBytes = 64;
  void load(const char* row, int64_t c, __m256 (&v)[4]) const {
    const char* p = row + c * kChunkBytes;
    for (int i = 0; i < 4; ++i) v[i] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)));
  }
  float at(const char* row, int64_t i) const { return half_to_float(reinterpret_cast<const uint16_t*>(row)[i]); }
};

// bf16 is the top half of an f32: in each 32-bit lane holding two bf16, the even element is lane << 16 and the
// odd one is lane & 0xffff0000. x is de-interleaved once per call to match (per 16 values: 8 evens, 8 odds).
struct DecBf16 {
  static constexpr bool kPermutesX = true;
  static constexpr int64_t kChunkBytes = 64;
  void load(const char* row, int64_t c, __m256 (&v)[4]) const {
    const __m256i mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    for (int h = 0; h < 2; ++h) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c * kChunkBytes + 32 * h));
      v[2 * h] = _mm256_castsi256_ps(_mm256_slli_epi32(q, 16));
      v[2 * h + 1] = _mm256_castsi256_ps(_mm256_and_si256(q, mask));
    }
  }
  float at(const char* row, int64_t i) const { return bfloat_to_float(reinterpret_cast<const uint16_t*>(row)[i]); }
};

// Block scales come from the f16 table: a scalar load broadcast from memory uses no vector shuffle port.
struct DecQuant {
  static constexpr bool kPermutesX = false;
  const float* f16;
  __m256 scale(uint16_t h) const { return _mm256_broadcast_ss(f16 + h); }
  float at(const char*, int64_t) const { return 0; }  // k is a multiple of 32: no tail
};

struct DecQ8_0 : DecQuant {
  static constexpr int64_t kChunkBytes = sizeof(BlockQ8_0);
  void load(const char* row, int64_t c, __m256 (&v)[4]) const {
    const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(row) + c;
    const __m256 d = scale(blk->d);
    for (int i = 0; i < 4; ++i)
      v[i] = _mm256_mul_ps(
          d,
          _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk->qs + 8 * i)))));
  }
};

// q4 nibbles -> four vectors of 8 int32: bytes 0..7 and 8..15 widened straight from memory; their low nibbles are
// values 0..15 of the block, their high nibbles values 16..31.
inline void nibbles(const uint8_t* qs, __m256i (&q)[4]) {
  const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs)));
  const __m256i hi = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8)));
  const __m256i m4 = _mm256_set1_epi32(0x0f);
  q[0] = _mm256_and_si256(lo, m4);
  q[1] = _mm256_and_si256(hi, m4);
  q[2] = _mm256_srli_epi32(lo, 4);
  q[3] = _mm256_srli_epi32(hi, 4);
}

// Dequantized as one FMA per vector: d * q + offset. d * q is exact in f32 (an f16 times a 4-bit integer), so the
// single rounding gives the same value as the scalar code's d * (q - 8) and d * q + m.
struct DecQ4_0 : DecQuant {
  static constexpr int64_t kChunkBytes = sizeof(BlockQ4_0);
  void load(const char* row, int64_t c, __m256 (&v)[4]) const {
    const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(row) + c;
    const __m256 d = scale(blk->d);
    const __m256 offset = _mm256_mul_ps(d, _mm256_set1_ps(-8.f));
    __m256i q[4];
    nibbles(blk->qs, q);
    for (int i = 0; i < 4; ++i) v[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[i]), d, offset);
  }
};

struct DecQ4_1 : DecQuant {
  static constexpr int64_t kChunkBytes = sizeof(BlockQ4_1);
  void load(const char* row, int64_t c, __m256 (&v)[4]) const {
    const BlockQ4_1* blk = reinterpret_cast<const BlockQ4_1*>(row) + c;
    const __m256 d = scale(blk->d);
    const __m256 m = scale(blk->m);
    __m256i q[4];
    nibbles(blk->qs, q);
    for (int i = 0; i < 4; ++i) v[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[i]), d, m);
  }
};

// q5_0 / q5_1: the q4 nibbles plus bit i of qh as the fifth bit of value i; d * (q - 16) (also the sign of a zero
// as the scalar code), or d * q + m as one FMA (d * q is exact in f32, an f16 times a 5-bit integer).
template <class Block>
struct DecQ5 : DecQuant {
  static constexpr int64_t kChunkBytes = sizeof(Block);
  void load(const char* row, int64_t c, __m256 (&v)[4]) const {
    const Block* blk = reinterpret_cast<const Block*>(row) + c;
    const __m256 d = scale(blk->d);
    __m256i q[4];
    nibbles(blk->qs, q);
    uint32_t qh;
    std::memcpy(&qh, blk->qh, 4);
    const __m256i bits = _mm256_set1_epi32(static_cast<int>(qh)), one = _mm256_set1_epi32(1);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int i = 0; i < 4; ++i) {  // q[i] holds values 8i .. 8i + 7
      const __m256i at = _mm256_add_epi32(lane, _mm256_set1_epi32(8 * i));
      const __m256i h = _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(bits, at), one), 4);
      const __m256 qf = _mm256_cvtepi32_ps(_mm256_or_si256(q[i], h));
      if constexpr (requires { blk->m; })
        v[i] = _mm256_fmadd_ps(qf, d, scale(blk->m));
      else
        v[i] = _mm256_mul_ps(d, _mm256_sub_ps(qf, _mm256_set1_ps(16.f)));
    }
  }
};
using DecQ5_0 = DecQ5<BlockQ5_0>;
using DecQ5_1 = DecQ5<BlockQ5_1>;

// q4_K / q5_K: (d * sc) * q - dmin * m as one FMA per vector ((d * sc) * q and dmin * m are exact in f32, so the
// one rounding is the scalar code's). The fifth bit of q5_K comes from bit j of qh.
template <class Block>
struct DecQ45_K : DecQuant {  // chunk c: sub-block c % 8 of super-block c / 8
  static constexpr int64_t kBlockBytes = sizeof(Block), kChunkBytes = kBlockBytes / 8;
  void load(const char* row, int64_t c, __m256 (&v)[4]) const {
    const Block* blk = reinterpret_cast<const Block*>(row) + c / 8;
    const int64_t j = c % 8;
    int sc, m;
    k_scale_min(blk->scales, j, sc, m);
    const __m256 ds = _mm256_set1_ps(f16[blk->d] * static_cast<float>(sc));
    const __m256 dm = _mm256_set1_ps(f16[blk->dmin] * static_cast<float>(m));
    const uint8_t* q = blk->qs + 32 * (j / 2);
    const __m128i shift = _mm_cvtsi32_si128(static_cast<int>(4 * (j % 2)));
    const __m256i m4 = _mm256_set1_epi32(15);
    for (int i = 0; i < 4; ++i) {
      __m256i n = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * i)));
      n = _mm256_and_si256(_mm256_srl_epi32(n, shift), m4);
      if constexpr (requires { blk->qh; }) {
        const __m256i h = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk->qh + 8 * i)));
        const __m256i bit =
            _mm256_and_si256(_mm256_srl_epi32(h, _mm_cvtsi32_si128(static_cast<int>(j))), _mm256_set1_epi32(1));
        n = _mm256_or_si256(n, _mm256_slli_epi32(bit, 4));
      }
      v[i] = _mm256_fmsub_ps(_mm256_cvtepi32_ps(n), ds, dm);
    }
  }
};
using DecQ4_K = DecQ45_K<BlockQ4_K>;
using DecQ5_K = DecQ45_K<BlockQ5_K>;

// q6_K: chunk c is quarter t of half h of its super-block; each 16 values share one int8 scale. (d * scale) *
// (q - 32) is exact in f32 (11 + 8 + 6 bits), as the scalar code.
struct DecQ6_K : DecQuant {
  static constexpr int64_t kBlockBytes = sizeof(BlockQ6_K), kChunkBytes = kBlockBytes / 8;
  void load(const char* row, int64_t c, __m256 (&v)[4]) const {
    const Q6Chunk k = q6_chunk(row, c);
    const __m128i lshift = _mm_cvtsi32_si128(k.lshift), hshift = _mm_cvtsi32_si128(k.hshift);
    const __m256i m4 = _mm256_set1_epi32(15), m2 = _mm256_set1_epi32(3), bias = _mm256_set1_epi32(32);
    for (int i = 0; i < 4; ++i) {
      const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(k.ql + 8 * i)));
      const __m256i hi = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(k.qh + 8 * i)));
      const __m256i q = _mm256_or_si256(_mm256_and_si256(_mm256_srl_epi32(lo, lshift), m4),
                                        _mm256_slli_epi32(_mm256_and_si256(_mm256_srl_epi32(hi, hshift), m2), 4));
      const float s = f16[k.d] * static_cast<float>(k.scales[i / 2]);
      v[i] = _mm256_mul_ps(_mm256_set1_ps(s), _mm256_cvtepi32_ps(_mm256_sub_epi32(q, bias)));
    }
  }
};

// --- the driver ------------------------------------------------------------------------------------------------

// Dot products of R weight rows with M rows of x. With chunk c of row i, the bytes at ahead + i * stride +
// c * kChunkBytes are prefetched (the same rows further on, or the rows of a later pass; none when null).
template <class D, int R, int M>
inline void dot_rows(const D& dec, const char* w, int64_t stride, int64_t nc, const float* xp, int64_t xs,
                     const char* ahead, float (&out)[R][M]) {
  __m256 acc[R][M];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < M; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t c = 0; c < nc; ++c) {
    const float* xc = xp + c * kChunk;
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      __m256 v[4];
      if (ahead) _mm_prefetch(ahead + i * stride + c * D::kChunkBytes, _MM_HINT_T0);
      dec.load(w + i * stride, c, v);
#pragma GCC unroll 4
      for (int j = 0; j < M; ++j)
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) acc[i][j] = _mm256_fmadd_ps(v[t], _mm256_loadu_ps(xc + j * xs + 8 * t), acc[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < M; ++j) out[i][j] = hsum(acc[i][j]);
}

template <class D, int R, int M>
inline void rows_of(const D& dec, const char* w, int64_t stride, int64_t k, const float* x, const float* xp, int64_t xs,
                    float* y, int64_t ldy, int64_t r, const char* ahead) {
  const int64_t nc = k / kChunk;
  float out[R][M];
  dot_rows<D, R, M>(dec, w + r * stride, stride, nc, xp, xs, ahead, out);
  for (int i = 0; i < R; ++i) {
    const char* row = w + (r + i) * stride;
    for (int j = 0; j < M; ++j) {
      float s = out[i][j];
      for (int64_t t = nc * kChunk; t < k; ++t) s += dec.at(row, t) * x[j * k + t];
      y[j * ldy + r + i] = s;
    }
  }
}

// Weight rows per pass: R * M accumulators plus four decoded vectors must fit in 16 registers.
template <int M>
constexpr int kRowsPerPass = M <= 2 ? 4 : 2;

// Rows [r0, r1) against M rows of x. For one row of x the prefetch runs ahead up to row `limit` (>= r1: the end
// of the caller's rows, past a tile's end).
template <class D, int M>
void run(const D& dec, const char* w, int64_t stride, int64_t k, const float* x, const float* xp, int64_t xs, float* y,
         int64_t ldy, int64_t r0, int64_t r1, int64_t limit) {
  constexpr int R = kRowsPerPass<M>;
  int64_t r = r0;
  for (; r + R <= r1; r += R) {
    const char* ahead;
    if constexpr (M == 1) {
      constexpr int64_t kAhead = kPrefetchGroups * R;
      ahead = r + kAhead + R <= limit ? w + (r + kAhead) * stride : nullptr;
    } else {
      // The in-row prefetch leaves the first bytes of every row cold: fetch them for the next pass now.
      if (r + 2 * R <= r1)
        for (int i = 0; i < R; ++i)
          for (int64_t b = 0; b < kPrefetchBytes && b < stride; b += 64)
            _mm_prefetch(w + (r + R + i) * stride + b, _MM_HINT_T0);
      ahead = w + r * stride + kPrefetchBytes;
    }
    rows_of<D, R, M>(dec, w, stride, k, x, xp, xs, y, ldy, r, ahead);
  }
  for (; r < r1; ++r)
    rows_of<D, 1, M>(dec, w, stride, k, x, xp, xs, y, ldy, r, M == 1 ? nullptr : w + r * stride + kPrefetchBytes);
}

thread_local Scratch scratch;  // the de-interleaved activations (bf16 only)

// x rows [m, k] -> per 16 values: the 8 even elements, then the 8 odd ones (whole chunks of 32 only).
const float* deinterleave(const float* x, int64_t m, int64_t k) {
  const int64_t nc = k / kChunk;
  float* out = scratch.floats(m * nc * kChunk + 1);
  const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
  for (int64_t j = 0; j < m; ++j)
    for (int64_t g = 0; g < nc * 2; ++g) {
      // a = x0..x7, b = x8..x15. The shuffles give x0 x2 x8 x10 | x4 x6 x12 x14 (and the odd ones), the
      // permutation puts them in order.
      const __m256 a = _mm256_loadu_ps(x + j * k + g * 16);
      const __m256 b = _mm256_loadu_ps(x + j * k + g * 16 + 8);
      const __m256 ev = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
      const __m256 od = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
      float* o = out + j * nc * kChunk + g * 16;
      _mm256_storeu_ps(o, _mm256_permutevar8x32_ps(ev, order));
      _mm256_storeu_ps(o + 8, _mm256_permutevar8x32_ps(od, order));
    }
  return out;
}

template <class D>
void mv_rows(const void* w, int64_t k, const float* x, int64_t m, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const char* wb = static_cast<const char*>(w);
  D dec{};
  if constexpr (requires { dec.f16; }) dec.f16 = f16_to_f32_table();
  const int64_t stride = row_stride<D>(k);
  const float* xp = x;  // x as the kernels read it, row stride xs
  int64_t xs = k;
  if constexpr (D::kPermutesX) {
    xp = deinterleave(x, m, k);
    xs = (k / kChunk) * kChunk;
  }
  // More rows of x than one pass takes: go through the weights in tiles that stay in L2 and run every group of
  // x rows over each tile, so the weights still come from memory once.
  const int64_t tile = m <= kMatvecMaxRows ? r1 - r0 : max64(4, kTileBytes / stride / 4 * 4);
  for (int64_t t0 = r0; t0 < r1; t0 += tile) {
    const int64_t t1 = min64(r1, t0 + tile);
    for (int64_t i0 = 0; i0 < m; i0 += kMatvecMaxRows) {
      const float* xi = x + i0 * k;
      const float* xpi = xp + i0 * xs;
      float* yi = y + i0 * ldy;
      switch (min64(kMatvecMaxRows, m - i0)) {
        case 1: run<D, 1>(dec, wb, stride, k, xi, xpi, xs, yi, ldy, t0, t1, r1); break;
        case 2: run<D, 2>(dec, wb, stride, k, xi, xpi, xs, yi, ldy, t0, t1, r1); break;
        case 3: run<D, 3>(dec, wb, stride, k, xi, xpi, xs, yi, ldy, t0, t1, r1); break;
        default: run<D, 4>(dec, wb, stride, k, xi, xpi, xs, yi, ldy, t0, t1, r1); break;
      }
    }
  }
}

template <class D>
void mv(const void* w, int64_t k, const float* x, float* y, int64_t r0, int64_t r1) {
  mv_rows<D>(w, k, x, 1, y, 0, r0, r1);
}

// Dequantization for the GEMM path, in natural order (bf16 has its own decoder: the matvec one de-interleaves).
struct DecBf16Natural {
  static constexpr int64_t kChunkBytes = 64;
  void load(const char* row, int64_t c, __m256 (&v)[4]) const {
    for (int i = 0; i < 4; ++i)
      v[i] = _mm256_castsi256_ps(_mm256_slli_epi32(
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c * kChunkBytes + 16 * i))),
          16));
  }
  float at(const char* row, int64_t i) const { return bfloat_to_float(reinterpret_cast<const uint16_t*>(row)[i]); }
};

template <class D>
void dequant(const void* src, float* dst, int64_t n) {
  D dec{};
  if constexpr (requires { dec.f16; }) dec.f16 = f16_to_f32_table();
  const char* s = static_cast<const char*>(src);
  const int64_t nc = n / kChunk;
  for (int64_t c = 0; c < nc; ++c) {
    __m256 v[4];
    dec.load(s, c, v);
    for (int i = 0; i < 4; ++i) _mm256_storeu_ps(dst + c * kChunk + 8 * i, v[i]);
  }
  for (int64_t i = nc * kChunk; i < n; ++i) dst[i] = dec.at(s, i);
}

}  // namespace

const MatvecKernels& avx2_matvec_kernels() {
  static const MatvecKernels k = [] {
    // What this file has no kernel for stays the scalar set's; the packed GEMM path needs oneDNN's AVX-512 kernels,
    // and with those present and this set chosen (COROLLA_ISA=avx2), the portable packing serves.
    MatvecKernels s = scalar_matvec_kernels();
    s.isa = "avx2";
    s.set(DType::f32, mv<DecF32>, mv_rows<DecF32>);
    s.set(DType::f16, mv<DecF16>, mv_rows<DecF16>);
    s.set(DType::bf16, mv<DecBf16>, mv_rows<DecBf16>);
    auto convert = [&]<DType T, class D>() { s.by_dtype[static_cast<size_t>(T)].to_f32 = dequant<D>; };
    convert.template operator()<DType::f16, DecF16>();
    convert.template operator()<DType::bf16, DecBf16Natural>();
    convert.template operator()<DType::q8_0, DecQ8_0>();
    convert.template operator()<DType::q4_0, DecQ4_0>();
    convert.template operator()<DType::q4_1, DecQ4_1>();
    convert.template operator()<DType::q5_0, DecQ5_0>();
    convert.template operator()<DType::q5_1, DecQ5_1>();
    convert.template operator()<DType::q4_K, DecQ4_K>();
    convert.template operator()<DType::q5_K, DecQ5_K>();
    convert.template operator()<DType::q6_K, DecQ6_K>();
    use_avx2_integer_dot_products(s);
    return s;
  }();
  return k;
}

}  // namespace corolla
