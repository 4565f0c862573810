// AVX-512 VNNI matrix-vector kernels for quantized weights: integer dot products (vpdpbusd) of the weights' levels
// with activations quantized to 8 bits (the rule in matvec.hpp). This file alone is compiled with VNNI flags.
//
// Shape: the weights are read two chunks of 32 values at a time: one 512-bit vector of 64 unsigned levels u (q4_0's
// nibbles, q8_0's bytes + 128, ...). vpdpbusd sums u * q over each group of four bytes into 16 int32 lanes, lanes
// 0..7 from the first chunk and 8..15 from the second; the lanes become f32 and are scaled by the weights' scale
// times the activations' scale of their chunk (each lane has its own: q6_K's scales change every 16 values). A
// format whose levels carry an offset (q4_0: u - 8) has it subtracted through the accumulator's start, -offset times
// the sum of the lane's four activations, prepared once per call; a format with a min (q4_1, the K-quants) adds
// min * d * sum(q) per chunk. R weight rows run side by side and up to M = 4 activation rows share each decoded
// vector, as in the f32 kernels.
//
// Internal linkage throughout, as in every file compiled with its own ISA flags (see matvec_simd.hpp).
#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#include "kernels/cpu/matvec.hpp"
#include "kernels/cpu/matvec_simd.hpp"
#include "kernels/k_scales.hpp"

namespace corolla {
namespace {

constexpr int64_t kChunk = 32;
// Software prefetch as in the AVX2 kernels (matvec_avx2.cpp): one row of x, the same pair of the rows
// kPrefetchGroups passes ahead; several rows of x, kPrefetchBytes ahead in each row.
constexpr int64_t kPrefetchGroups = 2;
constexpr int64_t kPrefetchBytes = 512;
constexpr int64_t kTileBytes = 256 * 1024;

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// --- prepared activations ---------------------------------------------------------------------------------------
// Per pair of chunks (64 values), 256 bytes: int8 q[64] | int32 bias[16] (-offset * the sum of each lane's four q)
// | f32 d[16] (each chunk's scale in its eight lanes) | f32 s[16] (d * sum(q) of the chunk / 8 in each of its
// lanes: the eight lanes add up to the chunk's d * sum(q)). A missing second chunk (odd chunk count) is zeros.
constexpr int64_t kPairBytes = 256;

thread_local Scratch scratch;  // the prepared activations

// One chunk of 32 activations into its half of a pair.
inline void quantize_chunk(const float* x, char* pair, int half, int offset) {
  const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
  const float d = amax / 127.f, id = amax > 0 ? 127.f / amax : 0.f;
  const __m512 scale = _mm512_set1_ps(id);
  const __m128i qa = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(a, scale)));
  const __m128i qb = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(b, scale)));
  const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(qa), qb, 1);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(pair + 32 * half), q);
  const __m256i sums = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), q);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(pair + 64 + 32 * half),
                      _mm256_mullo_epi32(sums, _mm256_set1_epi32(-offset)));
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(sums), _mm256_extracti128_si256(sums, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
  const float total = d * static_cast<float>(_mm_cvtsi128_si32(t));
  _mm256_storeu_ps(reinterpret_cast<float*>(pair + 128 + 32 * half), _mm256_set1_ps(d));
  _mm256_storeu_ps(reinterpret_cast<float*>(pair + 192 + 32 * half), _mm256_set1_ps(total * 0.125f));
}

// x rows [m, k] (k a multiple of 32) -> m prepared rows of `pairs` pairs each.
const char* prepare(const float* x, int64_t m, int64_t k, int offset, int64_t& pairs) {
  const int64_t nc = k / kChunk;
  pairs = (nc + 1) / 2;
  char* out = scratch.bytes(m * pairs * kPairBytes);
  for (int64_t j = 0; j < m; ++j) {
    char* row = out + j * pairs * kPairBytes;
    if (nc % 2) std::memset(row + (pairs - 1) * kPairBytes, 0, kPairBytes);
    for (int64_t c = 0; c < nc; ++c) quantize_chunk(x + j * k + c * kChunk, row + c / 2 * kPairBytes, c % 2, offset);
  }
  return out;
}

// --- decoders: pair p of a row -> 64 levels, the scale of each lane, and (formats with a min) the min of each lane
// kOffset: subtracted from every level; kMins: the format has a min per chunk; kPairBytes32: bytes of two chunks
// (the 32-value formats, whose odd last chunk is decoded from a zero-padded copy); kBlockBytes: the K-quants.

struct DecQuant {
  const float* f16;
  // Lanes 0..7 a, 8..15 b.
  static __m512 halves(float a, float b) {
    return _mm512_castpd_ps(
        _mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(a)), _mm256_castps_pd(_mm256_set1_ps(b)), 1));
  }
};

struct DecQ8_0 : DecQuant {
  static constexpr int kOffset = 128;
  static constexpr bool kMins = false;
  static constexpr int64_t kChunkBytes = sizeof(BlockQ8_0);
  void load(const char* row, int64_t p, __m512i& u, __m512& ws, __m512&) const {
    const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(row) + 2 * p;
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[0].qs));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[1].qs));
    u = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), _mm512_set1_epi8(-128));
    ws = halves(f16[b[0].d], f16[b[1].d]);
  }
};

// q4 and q5 blocks: byte i holds value i in its low nibble and value i + 16 in its high one. The 16 bytes of each
// block go to both 128-bit lanes of its half; the odd lanes are shifted right by 4; the fifth bits (q5) come from
// qh as a 64-bit mask, one bit per level, that adds 16.
template <class Block>
struct DecQ4 : DecQuant {
  static constexpr bool kMins = requires(Block b) { b.m; };
  static constexpr bool kFifth = requires(Block b) { b.qh; };
  static constexpr int kOffset = kMins ? 0 : kFifth ? 16 : 8;
  static constexpr int64_t kChunkBytes = sizeof(Block);
  void load(const char* row, int64_t p, __m512i& u, __m512& ws, __m512& mn) const {
    const Block* b = reinterpret_cast<const Block*>(row) + 2 * p;
    const __m512i both = _mm512_mask_broadcast_i32x4(
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[0].qs))), 0xff00,
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[1].qs)));
    const __m512i shifts = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0, 0, 0x0004000400040004,
                                            0x0004000400040004, 0, 0);
    u = _mm512_and_si512(_mm512_srlv_epi16(both, shifts), _mm512_set1_epi8(15));
    if constexpr (kFifth) {
      uint32_t h0, h1;
      std::memcpy(&h0, b[0].qh, 4);
      std::memcpy(&h1, b[1].qh, 4);
      u = _mm512_mask_add_epi8(u, _cvtu64_mask64(h0 | uint64_t{h1} << 32), u, _mm512_set1_epi8(16));
    }
    ws = halves(f16[b[0].d], f16[b[1].d]);
    if constexpr (kMins) mn = halves(f16[b[0].m], f16[b[1].m]);
  }
};

// q4_K / q5_K: pair p is sub-blocks 2i and 2i + 1 (i = p % 4) of super-block p / 4: the low and the high nibbles
// of the same 32 bytes, and bits 2i and 2i + 1 of qh.
template <class Block>
struct DecQ45_K : DecQuant {
  static constexpr int kOffset = 0;
  static constexpr bool kMins = true;
  static constexpr int64_t kBlockBytes = sizeof(Block);
  void load(const char* row, int64_t p, __m512i& u, __m512& ws, __m512& mn) const {
    const Block* b = reinterpret_cast<const Block*>(row) + p / 4;
    const int64_t i = p % 4;
    const __m512i shifts = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0x0004000400040004,
                                            0x0004000400040004, 0, 0, 0, 0);
    const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs + 32 * i)));
    u = _mm512_and_si512(_mm512_srlv_epi16(q, shifts), _mm512_set1_epi8(15));
    if constexpr (requires { b->qh; }) {
      const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh)));
      const __m512i bit = _mm512_srlv_epi16(
          h, _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(2 * i)),
                                _mm256_set1_epi16(static_cast<short>(2 * i + 1)), 1));
      u = _mm512_mask_add_epi8(u, _mm512_test_epi8_mask(bit, _mm512_set1_epi8(1)), u, _mm512_set1_epi8(16));
    }
    // The scales and mins of sub-blocks 2i and 2i + 1 as four bytes sc0 sc1 m0 m1, scaled by d and -dmin in one
    // vector, then spread over the lanes of each sub-block.
    uint32_t a, bb, c;
    std::memcpy(&a, b->scales, 4);
    std::memcpy(&bb, b->scales + 4, 4);
    std::memcpy(&c, b->scales + 8, 4);
    const uint64_t sc = (a & 0x3f3f3f3fu) | uint64_t{(c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u)} << 32;
    const uint64_t mins = (bb & 0x3f3f3f3fu) | uint64_t{((c >> 4) & 0x0f0f0f0fu) | ((bb >> 2) & 0x30303030u)} << 32;
    const uint32_t four = static_cast<uint32_t>(sc >> (16 * i) & 0xffff) |
                          static_cast<uint32_t>(mins >> (16 * i) & 0xffff) << 16;
    const __m128 f = _mm_mul_ps(_mm_cvtepi32_ps(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(four)))),
                                _mm_setr_ps(f16[b->d], f16[b->d], -f16[b->dmin], -f16[b->dmin]));
    const __m512 all = _mm512_castps128_ps512(f);
    ws = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), all);
    mn = _mm512_permutexvar_ps(_mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3), all);
  }
};

// q6_K: pair p is quarters t, t + 1 (t = 2 (p % 2)) of half h = (p % 4) / 2 of super-block p / 4: 64 consecutive
// bytes of ql (nibbles shifted by 4 (t / 2)), the same 32 bytes of qh shifted by 2t and 2t + 2, and four int8
// scales, one per 16 levels.
struct DecQ6_K : DecQuant {
  static constexpr int kOffset = 32;
  static constexpr bool kMins = false;
  static constexpr int64_t kBlockBytes = sizeof(BlockQ6_K);
  void load(const char* row, int64_t p, __m512i& u, __m512& ws, __m512&) const {
    const BlockQ6_K* b = reinterpret_cast<const BlockQ6_K*>(row) + p / 4;
    const int64_t h = (p % 4) / 2, t = 2 * (p % 2);
    const __m512i lo = _mm512_and_si512(
        _mm512_srl_epi16(_mm512_loadu_si512(b->ql + 64 * h), _mm_cvtsi32_si128(static_cast<int>(4 * (t / 2)))),
        _mm512_set1_epi8(15));
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh + 32 * h)));
    const __m512i hi = _mm512_and_si512(
        _mm512_srlv_epi16(qh, _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(2 * t)),
                                                 _mm256_set1_epi16(static_cast<short>(2 * t + 2)), 1)),
        _mm512_set1_epi8(3));
    u = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
    int32_t four;
    std::memcpy(&four, b->scales + 8 * h + 2 * t, 4);
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512 s = _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(idx, _mm512_cvtepi8_epi32(_mm_cvtsi32_si128(four))));
    ws = _mm512_mul_ps(_mm512_set1_ps(f16[b->d]), s);
  }
};

using DecQ4_0 = DecQ4<BlockQ4_0>;
using DecQ4_1 = DecQ4<BlockQ4_1>;
using DecQ5_0 = DecQ4<BlockQ5_0>;
using DecQ5_1 = DecQ4<BlockQ5_1>;
using DecQ4_K = DecQ45_K<BlockQ4_K>;
using DecQ5_K = DecQ45_K<BlockQ5_K>;

// Weight bytes per pair of chunks (how far ahead to prefetch).
template <class D>
constexpr int64_t pair_bytes() {
  if constexpr (requires { D::kBlockBytes; })
    return D::kBlockBytes / 4;
  else
    return 2 * D::kChunkBytes;
}


// --- the driver ----------------------------------------------------------------------------------------------------

template <class D, int M>
inline void accumulate(const __m512i& u, const __m512& ws, const __m512& mn, const char* xp, int64_t xs,
                       __m512 (&acc)[M]) {
#pragma GCC unroll 4
  for (int j = 0; j < M; ++j) {
    const char* a = xp + j * xs;
    const __m512i isum = _mm512_dpbusd_epi32(_mm512_load_si512(a + 64), u, _mm512_load_si512(a));
    acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(ws, _mm512_load_ps(a + 128)), acc[j]);
    if constexpr (D::kMins) acc[j] = _mm512_fmadd_ps(mn, _mm512_load_ps(a + 192), acc[j]);
  }
}

// Rows [r, r + R) against M prepared rows (stride xs bytes): out[i][j]. With pair p of row i, the bytes at
// ahead + i * stride + p * pair_bytes<D>() are prefetched (none when null).
template <class D, int R, int M>
inline void dot_rows(const D& dec, const char* w, int64_t stride, int64_t k, const char* xp, int64_t xs,
                     const char* ahead, float (&out)[R][M]) {
  const int64_t nc = k / kChunk, whole = nc / 2;
  __m512 acc[R][M];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < M; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t p = 0; p < whole; ++p) {
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      __m512i u;
      __m512 ws, mn = _mm512_setzero_ps();
      if (ahead) {
        _mm_prefetch(ahead + i * stride + p * pair_bytes<D>(), _MM_HINT_T0);
        if constexpr (pair_bytes<D>() > 64) _mm_prefetch(ahead + i * stride + p * pair_bytes<D>() + 64, _MM_HINT_T0);
      }
      dec.load(w + i * stride, p, u, ws, mn);
      accumulate<D, M>(u, ws, mn, xp + p * kPairBytes, xs, acc[i]);
    }
  }
  if constexpr (!requires { D::kBlockBytes; }) {
    if (nc % 2) {  // the last chunk alone: decoded from a copy padded with a zero block
      alignas(64) char pad[2 * D::kChunkBytes] = {};
      for (int i = 0; i < R; ++i) {
        std::memcpy(pad, w + i * stride + (nc - 1) * D::kChunkBytes, D::kChunkBytes);
        __m512i u;
        __m512 ws, mn = _mm512_setzero_ps();
        dec.load(pad, 0, u, ws, mn);
        accumulate<D, M>(u, ws, mn, xp + whole * kPairBytes, xs, acc[i]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < M; ++j) out[i][j] = _mm512_reduce_add_ps(acc[i][j]);
}

template <int M>
constexpr int kRowsPerPass = M == 1 ? 8 : 4;

template <class D, int M>
void run(const D& dec, const char* w, int64_t stride, int64_t k, const char* xp, int64_t xs, float* y, int64_t ldy,
         int64_t r0, int64_t r1, int64_t limit) {
  constexpr int R = kRowsPerPass<M>;
  int64_t r = r0;
  float out[R][M];
  for (; r + R <= r1; r += R) {
    const char* ahead;
    if constexpr (M == 1) {
      constexpr int64_t kAhead = kPrefetchGroups * R;
      ahead = r + kAhead + R <= limit ? w + (r + kAhead) * stride : nullptr;
    } else {
      if (r + 2 * R <= r1)  // the first bytes of the next rows, which the in-row prefetch leaves cold
        for (int i = 0; i < R; ++i)
          for (int64_t b = 0; b < kPrefetchBytes && b < stride; b += 64)
            _mm_prefetch(w + (r + R + i) * stride + b, _MM_HINT_T0);
      ahead = w + r * stride + kPrefetchBytes;
    }
    dot_rows<D, R, M>(dec, w + r * stride, stride, k, xp, xs, ahead, out);
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < M; ++j) y[j * ldy + r + i] = out[i][j];
  }
  for (; r < r1; ++r) {
    float one[1][M];
    dot_rows<D, 1, M>(dec, w + r * stride, stride, k, xp, xs, M == 1 ? nullptr : w + r * stride + kPrefetchBytes,
                      one);
    for (int j = 0; j < M; ++j) y[j * ldy + r] = one[0][j];
  }
}

template <class D>
void mv_rows(const void* w, int64_t k, const float* x, int64_t m, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const char* wb = static_cast<const char*>(w);
  const D dec{{f16_to_f32_table()}};
  const int64_t stride = row_stride<D>(k);
  int64_t pairs;
  const char* xp = prepare(x, m, k, D::kOffset, pairs);
  const int64_t xs = pairs * kPairBytes;
  const int64_t tile = m <= kMatvecMaxRows ? r1 - r0 : max64(4, kTileBytes / stride / 4 * 4);
  for (int64_t t0 = r0; t0 < r1; t0 += tile) {
    const int64_t t1 = min64(r1, t0 + tile);
    for (int64_t i0 = 0; i0 < m; i0 += kMatvecMaxRows) {
      const char* xi = xp + i0 * xs;
      float* yi = y + i0 * ldy;
      switch (min64(kMatvecMaxRows, m - i0)) {
        case 1: run<D, 1>(dec, wb, stride, k, xi, xs, yi, ldy, t0, t1, r1); break;
        case 2: run<D, 2>(dec, wb, stride, k, xi, xs, yi, ldy, t0, t1, r1); break;
        case 3: run<D, 3>(dec, wb, stride, k, xi, xs, yi, ldy, t0, t1, r1); break;
        default: run<D, 4>(dec, wb, stride, k, xi, xs, yi, ldy, t0, t1, r1); break;
      }
    }
  }
}

template <class D>
void mv(const void* w, int64_t k, const float* x, float* y, int64_t r0, int64_t r1) {
  mv_rows<D>(w, k, x, 1, y, 0, r0, r1);
}

}  // namespace

const MatvecKernels& avx512vnni_matvec_kernels() {
  static const MatvecKernels k = [] {
    MatvecKernels s = avx512_matvec_kernels();
    s.isa = "avx512vnni";
    s.set(DType::q8_0, mv<DecQ8_0>, mv_rows<DecQ8_0>);
    s.set(DType::q4_0, mv<DecQ4_0>, mv_rows<DecQ4_0>);
    s.set(DType::q4_1, mv<DecQ4_1>, mv_rows<DecQ4_1>);
    s.set(DType::q5_0, mv<DecQ5_0>, mv_rows<DecQ5_0>);
    s.set(DType::q5_1, mv<DecQ5_1>, mv_rows<DecQ5_1>);
    s.set(DType::q4_K, mv<DecQ4_K>, mv_rows<DecQ4_K>);
    s.set(DType::q5_K, mv<DecQ5_K>, mv_rows<DecQ5_K>);
    s.set(DType::q6_K, mv<DecQ6_K>, mv_rows<DecQ6_K>);
    return s;
  }();
  return k;
}

}  // namespace corolla
