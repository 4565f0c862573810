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

#include <array>
#include <cstdlib>
#include <cstring>
#include <type_traits>

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
    const __m512i both =
        _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[0].qs))),
                                    0xff00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[1].qs)));
    const __m512i shifts =
        _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0, 0, 0x0004000400040004, 0x0004000400040004, 0, 0);
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
    const __m512i shifts =
        _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0x0004000400040004, 0x0004000400040004, 0, 0, 0, 0);
    const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs + 32 * i)));
    u = _mm512_and_si512(_mm512_srlv_epi16(q, shifts), _mm512_set1_epi8(15));
    if constexpr (requires { b->qh; }) {
      const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh)));
      const __m512i bit = _mm512_srlv_epi16(h, _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(2 * i)),
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
    const uint32_t four =
        static_cast<uint32_t>(sc >> (16 * i) & 0xffff) | static_cast<uint32_t>(mins >> (16 * i) & 0xffff) << 16;
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
    const __m512i hi =
        _mm512_and_si512(_mm512_srlv_epi16(qh, _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(2 * t)),
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
    dot_rows<D, 1, M>(dec, w + r * stride, stride, k, xp, xs, M == 1 ? nullptr : w + r * stride + kPrefetchBytes, one);
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
  passes_over_tiles(m, r0, r1, max64(4, kTileBytes / stride / 4 * 4), [&]<int M>(int64_t i0, int64_t t0, int64_t t1) {
    run<D, M>(dec, wb, stride, k, xp + i0 * xs, xs, y + i0 * ldy, ldy, t0, t1, r1);
  });
}

template <class D>
void mv(const void* w, int64_t k, const float* x, float* y, int64_t r0, int64_t r1) {
  mv_rows<D>(w, k, x, 1, y, 0, r0, r1);
}

// --- interleaved rows (kernels/interleaved_rows.hpp) -----------------------------------------------------------
// A group of 16 rows is read as one stream of records, one per chunk of 32 columns: each vector of levels meets one
// word of 4 activations broadcast to all lanes, lane r accumulates row r, and the 16 rows' f16 scales are converted
// by one instruction.

// Prepared activations: kR16ChunkBytes per chunk (matvec_simd.hpp).
inline void quantize_chunk_r16(const float* x, char* out, int offset) {
  const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
  const float d = amax / 127.f, id = amax > 0 ? 127.f / amax : 0.f;
  const __m512 scale = _mm512_set1_ps(id);
  const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, scale)), qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, scale));
  _mm_store_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtsepi32_epi8(qa));
  _mm_store_si128(reinterpret_cast<__m128i*>(out + 16), _mm512_cvtsepi32_epi8(qb));
  store_r16_fields(out, d, _mm512_reduce_add_epi32(qa), _mm512_reduce_add_epi32(qb), offset);
}

inline __m512i word(const char* a, int w) {  // activation word w (values 4w .. 4w + 3) in every lane
  int32_t v;
  std::memcpy(&v, a + 4 * w, 4);
  return _mm512_set1_epi32(v);
}

// The integer dot products of a record's 16 rows with one prepared chunk, in two independent sums (even and odd
// words: shorter dependency chains), started at the bias.
// q4_0 / q4_1 (whose record has the 16 rows' mins after their scales) / iq4_nl (q4_0's record, whose nibbles index
// its grid: looked up as grid value + 128 by vpshufb).

template <class Block>
struct R16Q4 {
  static constexpr bool kMins = requires(Block b) { b.m; };
  static constexpr bool kGrid = std::is_same_v<Block, BlockIQ4_NL>;
  static constexpr int kOffset = kMins ? 0 : kGrid ? 128 : 8;
  static constexpr int64_t kRecordBytes = 16 * sizeof(Block);
  static constexpr int64_t kLevels = kMins ? 64 : 32;
  struct Levels {
    __m512i lo[4], hi[4];  // vector t: words t and t + 4
  };
  static void levels(const char* rec, Levels& u) {
    const __m512i mask = _mm512_set1_epi8(15);
    __m512i grid = mask;
    if constexpr (kGrid)
      grid = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kIq4nlGridPlus128.data())));
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      const __m512i v = _mm512_loadu_si512(rec + kLevels + 64 * t);
      u.lo[t] = _mm512_and_si512(v, mask);
      u.hi[t] = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
      if constexpr (kGrid) u.lo[t] = _mm512_shuffle_epi8(grid, u.lo[t]), u.hi[t] = _mm512_shuffle_epi8(grid, u.hi[t]);
    }
  }
  static __m512i dot(const Levels& u, const char* a) {
    int32_t bias;
    std::memcpy(&bias, a + 32, 4);
    __m512i even = _mm512_set1_epi32(bias), odd = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      even = _mm512_dpbusd_epi32(even, u.lo[t], word(a, t));
      odd = _mm512_dpbusd_epi32(odd, u.hi[t], word(a, t + 4));
    }
    return _mm512_add_epi32(even, odd);
  }
};
struct R16Q8_0 {
  static constexpr bool kMins = false;
  static constexpr int kOffset = 128;
  static constexpr int64_t kRecordBytes = 16 * sizeof(BlockQ8_0);
  struct Levels {
    __m512i v[8];  // vector v: word v
  };
  static void levels(const char* rec, Levels& u) {
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) u.v[v] = _mm512_loadu_si512(rec + 32 + 64 * v);
  }
  static __m512i dot(const Levels& u, const char* a) {
    int32_t bias;
    std::memcpy(&bias, a + 32, 4);
    __m512i even = _mm512_set1_epi32(bias), odd = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int v = 0; v < 8; v += 2) {
      even = _mm512_dpbusd_epi32(even, u.v[v], word(a, v));
      odd = _mm512_dpbusd_epi32(odd, u.v[v + 1], word(a, v + 1));
    }
    return _mm512_add_epi32(even, odd);
  }
};

// K-quants: a record is a super-block of 256 columns (8 chunks), so the group driver hands each format the whole
// record and the M prepared rows of its 8 chunks; the format adds each chunk's products into acc.
inline __m512 chunk_scale(const char* a) { return _mm512_set1_ps(*reinterpret_cast<const float*>(a + 36)); }
inline __m512 chunk_dsum(const char* a) { return _mm512_set1_ps(*reinterpret_cast<const float*>(a + 40)); }
inline __m512i chunk_bias(const char* a, int at) {
  return _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(a + at));
}

// q4_K_r16: d, dmin (16 f16 each), scales as 3 vectors (lane r: bytes 0-3, 4-7, 8-11 of row r's 12), then qs as
// 32 vectors: vector 8i + t holds bytes 32i + 4t.. of each row, low nibbles chunk 2i's word t, high chunk 2i + 1's.
// q5_K_r16 has 8 vectors of qh between the scales and qs: vector t holds bytes 4t.. of each row's qh, whose bit j is
// the fifth bit of chunk j's values 4t..
template <class Block>
struct R16Q45_K {
  static constexpr bool kFifth = requires(Block b) { b.qh; };
  static constexpr int kOffset = 0;
  static constexpr int64_t kRecordBytes = 16 * sizeof(Block);
  static constexpr int64_t kChunks = 8;
  static constexpr int64_t kQs = kFifth ? 256 + 512 : 256;
  template <int M>
  static void add(const char* rec, const char* xp, int64_t xs, __m512 (&acc)[M]) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32)));
    const __m512i A = _mm512_loadu_si512(rec + 64), B = _mm512_loadu_si512(rec + 128),
                  C = _mm512_loadu_si512(rec + 192);
    const __m512i six = _mm512_set1_epi32(63), four = _mm512_set1_epi32(15), two = _mm512_set1_epi32(3);
    const __m512i nib = _mm512_set1_epi8(15);
#pragma GCC unroll 1
    for (int i = 0; i < 4; ++i) {
      // Sub-blocks 2i and 2i + 1: their 6-bit scales and mins (kernels/dtype.hpp) in every lane's row.
      __m512i sc[2], mn[2];
      for (int h = 0; h < 2; ++h) {
        const int j = 2 * i + h;
        if (j < 4) {
          sc[h] = _mm512_and_si512(_mm512_srli_epi32(A, 8 * j), six);
          mn[h] = _mm512_and_si512(_mm512_srli_epi32(B, 8 * j), six);
        } else {
          const int s = 8 * (j - 4);
          sc[h] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(C, s), four),
                                  _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(A, s + 6), two), 4));
          mn[h] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(C, s + 4), four),
                                  _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(B, s + 6), two), 4));
        }
      }
      const __m512 ws[2] = {_mm512_mul_ps(d, _mm512_cvtepi32_ps(sc[0])), _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc[1]))};
      const __m512 wm[2] = {_mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn[0])),
                            _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn[1]))};
      __m512i lo[M][2], hi[M][2];
      for (int j = 0; j < M; ++j) lo[j][0] = lo[j][1] = hi[j][0] = hi[j][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) {
        const __m512i v = _mm512_loadu_si512(rec + kQs + 64 * (8 * i + t));
        __m512i ul = _mm512_and_si512(v, nib), uh = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
        if constexpr (kFifth) {  // bits 2i and 2i + 1 of qh, moved to bit 4 of each byte
          const __m512i qh = _mm512_loadu_si512(rec + 256 + 64 * t), bit = _mm512_set1_epi8(16);
          const __m512i h0 = 2 * i <= 4 ? _mm512_slli_epi16(qh, 4 - 2 * i) : _mm512_srli_epi16(qh, 2 * i - 4);
          const __m512i h1 = 2 * i + 1 <= 4 ? _mm512_slli_epi16(qh, 3 - 2 * i) : _mm512_srli_epi16(qh, 2 * i - 3);
          ul = _mm512_ternarylogic_epi32(ul, h0, bit, 0xf8);
          uh = _mm512_ternarylogic_epi32(uh, h1, bit, 0xf8);
        }
#pragma GCC unroll 4
        for (int j = 0; j < M; ++j) {
          const char* a = xp + j * xs + 2 * i * kR16ChunkBytes;
          lo[j][t % 2] = _mm512_dpbusd_epi32(lo[j][t % 2], ul, word(a, t));
          hi[j][t % 2] = _mm512_dpbusd_epi32(hi[j][t % 2], uh, word(a + kR16ChunkBytes, t));
        }
      }
#pragma GCC unroll 4
      for (int j = 0; j < M; ++j) {
        const char* a = xp + j * xs + 2 * i * kR16ChunkBytes;
        const char* b = a + kR16ChunkBytes;
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(lo[j][0], lo[j][1])),
                                 _mm512_mul_ps(ws[0], chunk_scale(a)), acc[j]);
        acc[j] = _mm512_fnmadd_ps(wm[0], chunk_dsum(a), acc[j]);
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(hi[j][0], hi[j][1])),
                                 _mm512_mul_ps(ws[1], chunk_scale(b)), acc[j]);
        acc[j] = _mm512_fnmadd_ps(wm[1], chunk_dsum(b), acc[j]);
      }
    }
  }
};

// q6_K_r16: d (16 f16), scales as 4 vectors (lane r: int8 scales 4q.. of row r), then per half h of the values and
// part p (words 4p .. 4p + 3 of its 4 chunks) 4 vectors of qh (vector w: bytes 32h + 4w.. of each row; bits 2t,
// 2t + 1 belong to chunk (h, t)) and 4 of each ql run s (bytes 64h + 32s + 4w..; low nibbles: chunk (h, t = s)'s
// word w, high nibbles chunk (h, s + 2)'s). Chunk (h, t) is chunk 4h + t of the super-block; its values 0..15 have
// scale 8h + 2t, 16..31 scale 8h + 2t + 1.
struct R16Q6_K {
  static constexpr int kOffset = 32;
  static constexpr int64_t kRecordBytes = 16 * sizeof(BlockQ6_K);
  static constexpr int64_t kChunks = 8;
  // Scale 8h + 2t + half of each row times d: byte 2 (t % 2) + half of lane r of scale vector 2h + t / 2.
  static __m512 scale(const char* rec, const __m512& d, int h, int t, int half) {
    const __m512i sv = _mm512_loadu_si512(rec + 32 + 64 * (2 * h + t / 2));
    const int byte = 2 * (t % 2) + half;
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(sv, 24 - 8 * byte), 24)));
  }
  template <int M>
  static void add(const char* rec, const char* xp, int64_t xs, __m512 (&acc)[M]) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
    const __m512i nib = _mm512_set1_epi8(15), top = _mm512_set1_epi8(0x30);
#pragma GCC unroll 1
    for (int h = 0; h < 2; ++h) {
      // Words 0..3 of the half's 4 chunks (values 0..15, each chunk's first scale), then words 4..7.
#pragma GCC unroll 1
      for (int part = 0; part < 2; ++part) {
        const char* qh = rec + 288 + 1536 * h + 768 * part;
        const char* ql = qh + 256;
        __m512i sum[M][4];
#pragma GCC unroll 4
        for (int j = 0; j < M; ++j)
#pragma GCC unroll 4
          for (int t = 0; t < 4; ++t) sum[j][t] = chunk_bias(xp + j * xs + (4 * h + t) * kR16ChunkBytes, 44 + 4 * part);
#pragma GCC unroll 4
        for (int w = 4 * part; w < 4 * part + 4; ++w) {
          const __m512i hb = _mm512_loadu_si512(qh + 64 * (w % 4));
          const __m512i l0 = _mm512_loadu_si512(ql + 64 * (w % 4)), l1 = _mm512_loadu_si512(ql + 256 + 64 * (w % 4));
          // Chunk t: (ql of s = t % 2, nibble t / 2) | (qh >> 2t & 3) << 4.
          const __m512i u[4] = {
              _mm512_ternarylogic_epi32(_mm512_and_si512(l0, nib), _mm512_slli_epi16(hb, 4), top, 0xf8),
              _mm512_ternarylogic_epi32(_mm512_and_si512(l1, nib), _mm512_slli_epi16(hb, 2), top, 0xf8),
              _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l0, 4), nib), hb, top, 0xf8),
              _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l1, 4), nib), _mm512_srli_epi16(hb, 2), top,
                                        0xf8)};
#pragma GCC unroll 4
          for (int j = 0; j < M; ++j)
#pragma GCC unroll 4
            for (int t = 0; t < 4; ++t)
              sum[j][t] = _mm512_dpbusd_epi32(sum[j][t], u[t], word(xp + j * xs + (4 * h + t) * kR16ChunkBytes, w));
        }
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
          const __m512 ws = scale(rec, d, h, t, part);
#pragma GCC unroll 4
          for (int j = 0; j < M; ++j)
            acc[j] =
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[j][t]),
                                _mm512_mul_ps(ws, chunk_scale(xp + j * xs + (4 * h + t) * kR16ChunkBytes)), acc[j]);
        }
      }
    }
  }
};

// q2_K_r16 / q3_K_r16 (kernels/interleaved_rows.hpp): chunk c = 4h + t of a super-block (half h, quarter t) has the
// low two bits of its word w in qs vector 8h + w, shifted by 2t; q3_K's third bit is bit 4h + t of hmask vector w.
// Its values 0..15 (words 0..3) belong to sub-block 8h + 2t, values 16..31 to the next.
inline __m512i r16_low_bits(const char* qs, int h, int t, int w) {
  return _mm512_and_si512(_mm512_srli_epi16(_mm512_loadu_si512(qs + 64 * (8 * h + w)), 2 * t), _mm512_set1_epi8(3));
}
inline __m512 chunk_half_dsum(const char* a, int half) {
  return _mm512_set1_ps(*reinterpret_cast<const float*>(a + kHalfDsumAt + 4 * half));
}

// q3_K_r16: d (16 f16), scales as 3 vectors (lane r: bytes 0-3, 4-7, 8-11 of row r's 12), hmask as 8 vectors,
// qs as 16. Levels 0..7, offset 4; each half of a chunk has its own signed 6-bit scale.
struct R16Q3_K {
  static constexpr int kOffset = 4;
  static constexpr int64_t kRecordBytes = 16 * sizeof(BlockQ3_K);
  static constexpr int64_t kChunks = 8;
  static constexpr int kScales = 32, kHmask = 32 + 192, kQs = 32 + 192 + 512;
  // Sub-block j's scale (q3_k_scale - 32) in every lane's row, times d.
  static __m512 scale(const char* rec, const __m512& d, int j) {
    const int low_byte = j % 8;
    const __m512i lowv = _mm512_loadu_si512(rec + kScales + 64 * (low_byte / 4));
    const __m512i highv = _mm512_loadu_si512(rec + kScales + 128);
    const __m512i low =
        _mm512_and_si512(_mm512_srli_epi32(lowv, 8 * (low_byte % 4) + (j < 8 ? 0 : 4)), _mm512_set1_epi32(15));
    const __m512i high = _mm512_and_si512(_mm512_srli_epi32(highv, 8 * (j % 4) + 2 * (j / 4)), _mm512_set1_epi32(3));
    const __m512i sc = _mm512_sub_epi32(_mm512_or_si512(low, _mm512_slli_epi32(high, 4)), _mm512_set1_epi32(32));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
  }
  template <int M>
  static void add(const char* rec, const char* xp, int64_t xs, __m512 (&acc)[M]) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
    const __m512i four = _mm512_set1_epi8(4);
#pragma GCC unroll 1
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 1
      for (int t = 0; t < 4; ++t) {
        const int bit = 4 * h + t;  // of hmask, moved to bit 2
        __m512i sum[M][2];
#pragma GCC unroll 4
        for (int j = 0; j < M; ++j)
          for (int half = 0; half < 2; ++half)
            sum[j][half] = chunk_bias(xp + j * xs + (4 * h + t) * kR16ChunkBytes, kHalfBiasAt + 4 * half);
#pragma GCC unroll 8
        for (int w = 0; w < 8; ++w) {
          const __m512i hm = _mm512_loadu_si512(rec + kHmask + 64 * w);
          const __m512i hb = bit >= 2 ? _mm512_srli_epi16(hm, bit - 2) : _mm512_slli_epi16(hm, 2 - bit);
          const __m512i u = _mm512_ternarylogic_epi32(r16_low_bits(rec + kQs, h, t, w), hb, four, 0xf8);
#pragma GCC unroll 4
          for (int j = 0; j < M; ++j)
            sum[j][w / 4] = _mm512_dpbusd_epi32(sum[j][w / 4], u, word(xp + j * xs + (4 * h + t) * kR16ChunkBytes, w));
        }
        const __m512 ws[2] = {scale(rec, d, 8 * h + 2 * t), scale(rec, d, 8 * h + 2 * t + 1)};
#pragma GCC unroll 4
        for (int j = 0; j < M; ++j) {
          const __m512 xd = chunk_scale(xp + j * xs + (4 * h + t) * kR16ChunkBytes);
          acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[j][0]), _mm512_mul_ps(ws[0], xd), acc[j]);
          acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[j][1]), _mm512_mul_ps(ws[1], xd), acc[j]);
        }
      }
  }
};

// q2_K_r16: d, dmin (16 f16 each), scales as 4 vectors (lane r: bytes 4i.. of row r's 16: scale in the low
// nibble, min in the high one), qs as 16. Levels 0..3; each half of a chunk has its own scale and min.
struct R16Q2_K {
  static constexpr int kOffset = 0;
  static constexpr int64_t kRecordBytes = 16 * sizeof(BlockQ2_K);
  static constexpr int64_t kChunks = 8;
  static constexpr int kScales = 64, kQs = 64 + 256;
  template <int M>
  static void add(const char* rec, const char* xp, int64_t xs, __m512 (&acc)[M]) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32)));
    const __m512i nib = _mm512_set1_epi32(15);
#pragma GCC unroll 1
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 1
      for (int t = 0; t < 4; ++t) {
        __m512i sum[M][2];
#pragma GCC unroll 4
        for (int j = 0; j < M; ++j) sum[j][0] = sum[j][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int w = 0; w < 8; ++w) {
          const __m512i u = r16_low_bits(rec + kQs, h, t, w);
#pragma GCC unroll 4
          for (int j = 0; j < M; ++j)
            sum[j][w / 4] = _mm512_dpbusd_epi32(sum[j][w / 4], u, word(xp + j * xs + (4 * h + t) * kR16ChunkBytes, w));
        }
        __m512 ws[2], wm[2];
        for (int half = 0; half < 2; ++half) {
          const int sb = 8 * h + 2 * t + half;
          const __m512i v = _mm512_srli_epi32(_mm512_loadu_si512(rec + kScales + 64 * (sb / 4)), 8 * (sb % 4));
          ws[half] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(v, nib)));
          wm[half] = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 4), nib)));
        }
#pragma GCC unroll 4
        for (int j = 0; j < M; ++j) {
          const char* a = xp + j * xs + (4 * h + t) * kR16ChunkBytes;
          const __m512 xd = chunk_scale(a);
          for (int half = 0; half < 2; ++half) {
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[j][half]), _mm512_mul_ps(ws[half], xd), acc[j]);
            acc[j] = _mm512_fnmadd_ps(wm[half], chunk_half_dsum(a, half), acc[j]);
          }
        }
      }
  }
};

// One group of 16 rows (its records at `group`) against M prepared rows: out[j][0..16).
template <class F, int M>
inline void dot_group(const char* group, int64_t nc, const char* xp, int64_t xs, float (&out)[M][16]) {
  __m512 acc[M];
#pragma GCC unroll 4
  for (int j = 0; j < M; ++j) acc[j] = _mm512_setzero_ps();
  if constexpr (requires { F::kChunks; }) {  // K-quants: a record per super-block
    // No software prefetch: a group is one stream read in order, which the hardware prefetchers follow (prefetching
    // the record after next cost q6_K and q4_K 5-15 % in bench_matvec).
    for (int64_t c = 0; c < nc; c += F::kChunks)
      F::template add<M>(group + c / F::kChunks * F::kRecordBytes, xp + c * kR16ChunkBytes, xs, acc);
  } else {
    for (int64_t c = 0; c < nc; ++c) {
      const char* rec = group + c * F::kRecordBytes;
      typename F::Levels u;
      F::levels(rec, u);
      const __m512 ws = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
      __m512 mins = _mm512_setzero_ps();
      if constexpr (F::kMins) mins = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32)));
#pragma GCC unroll 4
      for (int j = 0; j < M; ++j) {
        const char* a = xp + j * xs + c * kR16ChunkBytes;
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(F::dot(u, a)), _mm512_mul_ps(ws, chunk_scale(a)), acc[j]);
        if constexpr (F::kMins) acc[j] = _mm512_fmadd_ps(mins, chunk_dsum(a), acc[j]);
      }
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < M; ++j) _mm512_storeu_ps(out[j], acc[j]);
}

// Rows [r0, r1) (any bounds: a group cut by them is computed whole and only its rows in range are written).
template <class F>
constexpr int64_t records(int64_t k) {
  if constexpr (requires { F::kChunks; })
    return k / kSuperBlock;
  else
    return k / kChunk;
}

template <class F>
void mv_prepared_r16(const void* w, int64_t k, const char* xp, int64_t m, float* y, int64_t ldy, int64_t r0,
                     int64_t r1) {
  interleaved_matvec(w, k, xp, m, y, ldy, r0, r1, records<F>(k) * F::kRecordBytes,
                     [&]<int M>(const char* group, const char* xq, int64_t xs, float(&out)[M][16]) {
                       dot_group<F, M>(group, k / kChunk, xq, xs, out);
                     });
}

// Format F read with rows interleaved by 16, from activations prepared once per product or per call.
template <class F>
void set_r16(MatvecKernels& s, DType plain) {
  set_interleaved_r16<quantize_chunk_r16, F::kOffset, mv_prepared_r16<F>>(s, plain);
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
    set_r16<R16Q4<BlockQ4_0>>(s, DType::q4_0);
    set_r16<R16Q4<BlockQ4_1>>(s, DType::q4_1);
    set_r16<R16Q8_0>(s, DType::q8_0);
    set_r16<R16Q45_K<BlockQ4_K>>(s, DType::q4_K);
    set_r16<R16Q45_K<BlockQ5_K>>(s, DType::q5_K);
    set_r16<R16Q6_K>(s, DType::q6_K);
    set_r16<R16Q2_K>(s, DType::q2_K);
    set_r16<R16Q3_K>(s, DType::q3_K);
    set_r16<R16Q4<BlockIQ4_NL>>(s, DType::iq4_nl);
    return s;
  }();
  return k;
}

}  // namespace corolla
