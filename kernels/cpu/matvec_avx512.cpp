// AVX-512 matrix-vector kernels (F/BW/VL with FMA and F16C) for plain weights (f32, f16, bf16), and every dtype's
// decoding to f32 for the GEMM path (dequantization, panel packing). This file alone is compiled with AVX-512 flags.
// Quantized weights' matrix-vector products are integer ones: matvec_vnni.cpp, or with AVX-512 but no VNNI the AVX2
// ones (matvec_avx2_int8.cpp).
//
// Shape of every kernel: weights are consumed in chunks of 32 values (32 plain values, or a quantized block for the
// decoders), each decoded in registers into two vectors of 16 f32 and multiplied into f32 accumulators. R weight rows
// run side by side (R streams of loads in flight), and up to M = 4 activation rows share each decoded chunk, so a small
// batch reads the weights once.
//
// Everything here has internal linkage and uses no inline function or template from a header shared with the
// portable code: a copy compiled for AVX-512 must never be the one the linker keeps for the whole program.
#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#include "kernels/cpu/matvec.hpp"
#include "kernels/cpu/matvec_simd.hpp"
#include "kernels/k_scales.hpp"

namespace corolla {
namespace {

constexpr int64_t kChunk = 32;
// Software prefetch distance in each weight row: 512 bytes ahead reads bf16 at the read bandwidth, where 256,
// 1024 and 2048 (into L2) did less (bench_matvec on a 2-core AVX-512 Xeon: docs/PERFORMANCE.md, "CPU kernels").
constexpr int64_t kPrefetchBytes = 512;

// Weight bytes per tile when several groups of x rows run over the same weights (well inside a core's L2).
constexpr int64_t kTileBytes = 256 * 1024;

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

inline float bfloat_to_float(uint16_t h) {
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(static_cast<uint32_t>(h) << 16))));
}

// --- decoders: chunk c of a row -> two vectors of 16 f32, in the order of the prepared x -------------------------
// A decoder is a small value passed to the driver; quantized ones carry the f16 -> f32 table for block scales.

struct DecF32 {
  static constexpr bool kPermutesX = false;
  static constexpr int64_t kChunkBytes = 128;
  void load(const char* row, int64_t c, __m512& a, __m512& b) const {
    const float* p = reinterpret_cast<const float*>(row) + c * kChunk;
    a = _mm512_loadu_ps(p);
    b = _mm512_loadu_ps(p + 16);
  }
  float at(const char* row, int64_t i) const { return reinterpret_cast<const float*>(row)[i]; }
};

struct DecF16 {
  static constexpr bool kPermutesX = false;
  static constexpr int64_t kChunkBytes = 64;
  void load(const char* row, int64_t c, __m512& a, __m512& b) const {
    const char* p = row + c * kChunkBytes;
    a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    b = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
  }
  float at(const char* row, int64_t i) const { return half_to_float(reinterpret_cast<const uint16_t*>(row)[i]); }
};

// bf16 is the top half of an f32: in each 32-bit lane holding two bf16, the even element is lane << 16 and the
// odd one is lane & 0xffff0000. x is de-interleaved once per call to match (evens then odds per chunk).
struct DecBf16 {
  static constexpr bool kPermutesX = true;
  static constexpr int64_t kChunkBytes = 64;
  void load(const char* row, int64_t c, __m512& a, __m512& b) const {
    const __m512i v = _mm512_loadu_si512(row + c * kChunkBytes);
    a = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    b = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  float at(const char* row, int64_t i) const { return bfloat_to_float(reinterpret_cast<const uint16_t*>(row)[i]); }
};

// Block scales come from the f16 table: a scalar load broadcast from memory uses no vector shuffle port.
struct DecQuant {
  static constexpr bool kPermutesX = false;
  const float* f16;
  __m512 scale(uint16_t h) const { return _mm512_set1_ps(f16[h]); }
  float at(const char*, int64_t) const { return 0; }  // k is a multiple of 32: no tail
};

struct DecQ8_0 : DecQuant {
  static constexpr int64_t kChunkBytes = sizeof(BlockQ8_0);
  void load(const char* row, int64_t c, __m512& a, __m512& b) const {
    const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(row) + c;
    const __m512 d = scale(blk->d);
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs + 16));
    a = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)));
    b = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)));
  }
};

// q4: the 16 possible weights of a block form a table of 16 f32 (d * (q - 8), or d * q + m); vpermps picks the
// entry from the low 4 bits of each 32-bit lane, so a nibble becomes its dequantized weight in one step.
struct DecQ4_0 : DecQuant {
  static constexpr int64_t kChunkBytes = sizeof(BlockQ4_0);
  void load(const char* row, int64_t c, __m512& a, __m512& b) const {
    const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(row) + c;
    const __m512 levels = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const __m512 table = _mm512_mul_ps(scale(blk->d), levels);
    const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs)));
    a = _mm512_permutexvar_ps(q, table);                        // values 0..15: low nibbles
    b = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table);  // values 16..31: high nibbles
  }
};

struct DecQ4_1 : DecQuant {
  static constexpr int64_t kChunkBytes = sizeof(BlockQ4_1);
  void load(const char* row, int64_t c, __m512& a, __m512& b) const {
    const BlockQ4_1* blk = reinterpret_cast<const BlockQ4_1*>(row) + c;
    const __m512 levels = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    // d * q is exact in f32 (an f16 times a 4-bit integer): one rounding, the same value as the scalar d * q + m.
    const __m512 table = _mm512_fmadd_ps(scale(blk->d), levels, scale(blk->m));
    const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs)));
    a = _mm512_permutexvar_ps(q, table);
    b = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table);
  }
};

// q5_0 / q5_1: the 32 possible weights of a block (d * (q - 16), or d * q + m) form two tables of 16; vpermt2ps
// picks from both with the low 5 bits of each lane: the nibble, and bit i of qh for value i as the fifth bit.
template <class Block>
struct DecQ5 : DecQuant {
  static constexpr int64_t kChunkBytes = sizeof(Block);
  void load(const char* row, int64_t c, __m512& a, __m512& b) const {
    const Block* blk = reinterpret_cast<const Block*>(row) + c;
    const __m512 levels = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 d = scale(blk->d), sixteen = _mm512_set1_ps(16.f);
    __m512 lo, hi;
    if constexpr (requires { blk->m; }) {
      // d * q is exact in f32 (an f16 times a 5-bit integer): one rounding, the scalar code's d * q + m.
      lo = _mm512_fmadd_ps(d, levels, scale(blk->m));
      hi = _mm512_fmadd_ps(d, _mm512_add_ps(levels, sixteen), scale(blk->m));
    } else {  // d * (q - 16) as the scalar code computes it (so also the sign of a zero)
      lo = _mm512_mul_ps(d, _mm512_sub_ps(levels, sixteen));
      hi = _mm512_mul_ps(d, levels);
    }
    uint32_t qh;
    std::memcpy(&qh, blk->qh, 4);
    const __m512i bits = _mm512_set1_epi32(static_cast<int>(qh)), one = _mm512_set1_epi32(1);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i h0 = _mm512_slli_epi32(_mm512_and_si512(_mm512_srlv_epi32(bits, lane), one), 4);
    const __m512i h1 = _mm512_slli_epi32(
        _mm512_and_si512(_mm512_srlv_epi32(bits, _mm512_add_epi32(lane, _mm512_set1_epi32(16))), one), 4);
    const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs)));
    a = _mm512_permutex2var_ps(lo, _mm512_or_si512(_mm512_and_si512(q, _mm512_set1_epi32(15)), h0), hi);
    b = _mm512_permutex2var_ps(lo, _mm512_or_si512(_mm512_srli_epi32(q, 4), h1), hi);
  }
};
using DecQ5_0 = DecQ5<BlockQ5_0>;
using DecQ5_1 = DecQ5<BlockQ5_1>;

// q4_K / q5_K: like q4_1 / q5_1, the levels of a sub-block, (d * sc) * q - dmin * m, form a table that vpermps
// indexes with the nibbles (it reads the low 4 bits of each lane, so the high nibbles need only the shift); q5_K's
// 32 levels are two tables, from which vpermt2ps picks with the fifth bit (bit j of qh) as bit 4 of the index.
// (d * sc) * q and dmin * m are exact in f32: one rounding, as the scalar code.
template <class Block>
struct DecQ45_K : DecQuant {  // chunk c: sub-block c % 8 of super-block c / 8
  static constexpr int64_t kBlockBytes = sizeof(Block), kChunkBytes = kBlockBytes / 8;
  void load(const char* row, int64_t c, __m512& a, __m512& b) const {
    const Block* blk = reinterpret_cast<const Block*>(row) + c / 8;
    const int64_t j = c % 8;
    int sc, m;
    k_scale_min(blk->scales, j, sc, m);
    const __m512 levels = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 ds = _mm512_set1_ps(f16[blk->d] * static_cast<float>(sc));
    const __m512 dm = _mm512_set1_ps(f16[blk->dmin] * static_cast<float>(m));
    const __m512 lo = _mm512_fmsub_ps(ds, levels, dm);
    __m512 hi = lo;
    if constexpr (requires { blk->qh; }) hi = _mm512_fmsub_ps(ds, _mm512_add_ps(levels, _mm512_set1_ps(16.f)), dm);
    const uint8_t* q = blk->qs + 32 * (j / 2);
    const __m128i shift = _mm_cvtsi32_si128(static_cast<int>(4 * (j % 2)));
    __m512 out[2];
    for (int h = 0; h < 2; ++h) {
      const __m512i nib =
          _mm512_srl_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * h))), shift);
      if constexpr (requires { blk->qh; }) {
        const __m512i qh = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qh + 16 * h)));
        const __m512i bit = _mm512_srl_epi32(qh, _mm_cvtsi32_si128(static_cast<int>(j)));
        const __m512i idx = _mm512_or_si512(_mm512_and_si512(nib, _mm512_set1_epi32(15)),
                                            _mm512_and_si512(_mm512_slli_epi32(bit, 4), _mm512_set1_epi32(16)));
        out[h] = _mm512_permutex2var_ps(lo, idx, hi);
      } else {
        out[h] = _mm512_permutexvar_ps(nib, lo);
      }
    }
    a = out[0];
    b = out[1];
  }
};
using DecQ4_K = DecQ45_K<BlockQ4_K>;
using DecQ5_K = DecQ45_K<BlockQ5_K>;

// q6_K: chunk c is quarter t of half h of its super-block; each 16 values share one int8 scale. (d * scale) *
// (q - 32) is exact in f32 (11 + 8 + 6 bits), as the scalar code.
struct DecQ6_K : DecQuant {
  static constexpr int64_t kBlockBytes = sizeof(BlockQ6_K), kChunkBytes = kBlockBytes / 8;
  void load(const char* row, int64_t c, __m512& a, __m512& b) const {
    const Q6Chunk k = q6_chunk(row, c);
    const __m128i lshift = _mm_cvtsi32_si128(k.lshift), hshift = _mm_cvtsi32_si128(k.hshift);
    const __m512i m4 = _mm512_set1_epi32(15), m2 = _mm512_set1_epi32(3), bias = _mm512_set1_epi32(32);
    __m512 out[2];
    for (int i = 0; i < 2; ++i) {
      const __m512i lo = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k.ql + 16 * i)));
      const __m512i hi = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k.qh + 16 * i)));
      const __m512i q = _mm512_or_si512(_mm512_and_si512(_mm512_srl_epi32(lo, lshift), m4),
                                        _mm512_slli_epi32(_mm512_and_si512(_mm512_srl_epi32(hi, hshift), m2), 4));
      const float s = f16[k.d] * static_cast<float>(k.scales[i]);
      out[i] = _mm512_mul_ps(_mm512_set1_ps(s), _mm512_cvtepi32_ps(_mm512_sub_epi32(q, bias)));
    }
    a = out[0];
    b = out[1];
  }
};

// --- the driver ------------------------------------------------------------------------------------------------

// Rows [r, r + R) against M rows of prepared x (row stride xs): out[i][j] = dot over the whole chunks.
template <class D, int R, int M>
inline void dot_rows(const D& dec, const char* w, int64_t stride, int64_t nc, const float* xp, int64_t xs,
                     float (&out)[R][M]) {
  __m512 acc[R][M];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < M; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t c = 0; c < nc; ++c) {
    const float* xc = xp + c * kChunk;
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      __m512 a, b;
      _mm_prefetch(w + i * stride + c * D::kChunkBytes + kPrefetchBytes, _MM_HINT_T0);
      dec.load(w + i * stride, c, a, b);
#pragma GCC unroll 4
      for (int j = 0; j < M; ++j) {
        acc[i][j] = _mm512_fmadd_ps(a, _mm512_loadu_ps(xc + j * xs), acc[i][j]);
        acc[i][j] = _mm512_fmadd_ps(b, _mm512_loadu_ps(xc + j * xs + 16), acc[i][j]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < M; ++j) out[i][j] = _mm512_reduce_add_ps(acc[i][j]);
}

template <class D, int R, int M>
inline void rows_of(const D& dec, const char* w, int64_t stride, int64_t k, const float* x, const float* xp, int64_t xs,
                    float* y, int64_t ldy, int64_t r) {
  const int64_t nc = k / kChunk;
  float out[R][M];
  dot_rows<D, R, M>(dec, w + r * stride, stride, nc, xp, xs, out);
  for (int i = 0; i < R; ++i) {
    const char* row = w + (r + i) * stride;
    for (int j = 0; j < M; ++j) {
      float s = out[i][j];
      for (int64_t t = nc * kChunk; t < k; ++t) s += dec.at(row, t) * x[j * k + t];
      y[j * ldy + r + i] = s;
    }
  }
}

// Weight rows per pass: more rows keep more loads in flight (8 rows beat 4 for q8_0 from memory, by about 20%);
// R * M accumulators must fit in the 32 registers.
template <int M>
constexpr int kRowsPerPass = M == 1 ? 8 : 4;

template <class D, int M>
void run(const D& dec, const char* w, int64_t stride, int64_t k, const float* x, const float* xp, int64_t xs, float* y,
         int64_t ldy, int64_t r0, int64_t r1) {
  constexpr int R = kRowsPerPass<M>;
  int64_t r = r0;
  for (; r + R <= r1; r += R) {
    // The in-row prefetch runs 512 bytes ahead of the loads, so the first bytes of every row would start cold:
    // fetch them for the next group of rows now (q4_0 from memory: +15%).
    if (r + 2 * R <= r1)
      for (int i = 0; i < R; ++i)
        for (int64_t b = 0; b < kPrefetchBytes && b < stride; b += 64)
          _mm_prefetch(w + (r + R + i) * stride + b, _MM_HINT_T0);
    rows_of<D, R, M>(dec, w, stride, k, x, xp, xs, y, ldy, r);
  }
  for (; r < r1; ++r) rows_of<D, 1, M>(dec, w, stride, k, x, xp, xs, y, ldy, r);
}

thread_local Scratch scratch;  // the de-interleaved activations (bf16 only)

// x rows [m, k] -> per chunk of 32: the 16 even elements, then the 16 odd ones (whole chunks only).
const float* deinterleave(const float* x, int64_t m, int64_t k) {
  const int64_t nc = k / kChunk;
  float* out = scratch.floats(m * nc * kChunk + 1);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t j = 0; j < m; ++j)
    for (int64_t c = 0; c < nc; ++c) {
      const __m512 lo = _mm512_loadu_ps(x + j * k + c * kChunk);
      const __m512 hi = _mm512_loadu_ps(x + j * k + c * kChunk + 16);
      float* o = out + (j * nc + c) * kChunk;
      _mm512_storeu_ps(o, _mm512_permutex2var_ps(lo, even, hi));
      _mm512_storeu_ps(o + 16, _mm512_permutex2var_ps(lo, odd, hi));
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
        case 1: run<D, 1>(dec, wb, stride, k, xi, xpi, xs, yi, ldy, t0, t1); break;
        case 2: run<D, 2>(dec, wb, stride, k, xi, xpi, xs, yi, ldy, t0, t1); break;
        case 3: run<D, 3>(dec, wb, stride, k, xi, xpi, xs, yi, ldy, t0, t1); break;
        default: run<D, 4>(dec, wb, stride, k, xi, xpi, xs, yi, ldy, t0, t1); break;
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
  void load(const char* row, int64_t c, __m512& a, __m512& b) const {
    const char* p = row + c * kChunkBytes;
    a = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
    b = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32))), 16));
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
    __m512 a, b;
    dec.load(s, c, a, b);
    _mm512_storeu_ps(dst + c * kChunk, a);
    _mm512_storeu_ps(dst + c * kChunk + 16, b);
  }
  for (int64_t i = nc * kChunk; i < n; ++i) dst[i] = dec.at(s, i);
}

// --- GEMM panels (PackFn in matvec.hpp) ----------------------------------------------------------------------

// Transposes the 16x16 block held in r[0..16) (row i in r[i]) in registers.
inline void transpose16(__m512 (&r)[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane: a0 b0 a1 b1, a2 b2 a3 b3
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // r[4i + j], lane l: column 4l + j of rows 4i .. 4i + 3
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int j = 0; j < 4; ++j) {  // gather lane l of r[j], r[4 + j], r[8 + j], r[12 + j] into column 4l + j
    const __m512 even0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88), odd0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
    const __m512 even1 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
    const __m512 odd1 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
    t[j] = _mm512_shuffle_f32x4(even0, even1, 0x88);
    t[8 + j] = _mm512_shuffle_f32x4(even0, even1, 0xdd);
    t[4 + j] = _mm512_shuffle_f32x4(odd0, odd1, 0x88);
    t[12 + j] = _mm512_shuffle_f32x4(odd0, odd1, 0xdd);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// Panel geometry of matvec.hpp, restated here: this file calls no inline function of a shared header.
constexpr int64_t kPanel = kPanelRows;
inline int64_t depth_of(int64_t k) { return (k + 15) / 16 * 16; }

// Sixteen rows at a time: each chunk of 32 values of 16 rows is decoded into registers (zeros for rows past
// `rows`), transposed as two 16x16 blocks and stored as 32 panel rows of 16 values (whole 64-byte lines). The tail
// of k past the last whole chunk (plain dtypes only: quantized rows are whole blocks) and the padding up to the
// panel depth are written one value at a time.
template <class D>
void pack(const void* w, int64_t k, int64_t rows, float* out) {
  D dec{};
  if constexpr (requires { dec.f16; }) dec.f16 = f16_to_f32_table();
  const char* wb = static_cast<const char*>(w);
  const int64_t stride = row_stride<D>(k);
  const int64_t nc = k / kChunk, depth = depth_of(k);
  for (int64_t p0 = 0; p0 < rows; p0 += kPanel) {
    float* panel = out + p0 * depth;
    for (int64_t g = p0; g < p0 + kPanel; g += 16) {
      float* col = panel + (g - p0);
      const int64_t live = min64(16, max64(0, rows - g));  // rows of this group that exist
      for (int64_t c = 0; c < nc; ++c) {
        __m512 lo[16], hi[16];
        for (int i = 0; i < 16; ++i) {
          if (i < live) {
            dec.load(wb + (g + i) * stride, c, lo[i], hi[i]);
          } else {
            lo[i] = _mm512_setzero_ps();
            hi[i] = _mm512_setzero_ps();
          }
        }
        transpose16(lo);
        transpose16(hi);
        float* dst = col + c * kChunk * kPanel;
        for (int i = 0; i < 16; ++i) {
          _mm512_storeu_ps(dst + i * kPanel, lo[i]);
          _mm512_storeu_ps(dst + (16 + i) * kPanel, hi[i]);
        }
      }
      for (int64_t kk = nc * kChunk; kk < depth; ++kk)
        for (int64_t i = 0; i < 16; ++i)
          col[kk * kPanel + i] = i < live && kk < k ? dec.at(wb + (g + i) * stride, kk) : 0.f;
    }
  }
}

}  // namespace

const MatvecKernels& avx512_matvec_kernels() {
  static const MatvecKernels k = [] {
    // Quantized weights keep the AVX2 integer kernels (with VNNI, avx512vnni_matvec_kernels() has 512-bit ones).
    MatvecKernels s = avx2_matvec_kernels();
    s.isa = "avx512";
    s.set(DType::f32, mv<DecF32>, mv_rows<DecF32>);
    s.set(DType::f16, mv<DecF16>, mv_rows<DecF16>);
    s.set(DType::bf16, mv<DecBf16>, mv_rows<DecBf16>);
    auto convert = [&]<DType T, class D>() { s.set_conversions(T, dequant<D>, pack<D>); };
    convert.template operator()<DType::f32, DecF32>();
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
    return s;
  }();
  return k;
}

}  // namespace corolla
