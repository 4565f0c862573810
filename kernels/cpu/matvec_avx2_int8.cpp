// AVX2 matrix-vector kernels for quantized weights: integer dot products (vpmaddubsw, vpmaddwd) of the weights'
// levels with activations quantized to 8 bits (the rule in matvec.hpp). This file alone is compiled with AVX2 flags.
//
// Shape, as the VNNI kernels (matvec_vnni.cpp) at half the width: one chunk of 32 values at a time becomes 32
// unsigned levels u in one 256-bit vector; vpmaddubsw multiplies them with the activations q into pairs of int16
// (|u| <= 63 and |q| <= 127: no saturation), vpmaddwd adds pairs into eight int32 lanes (four values each), and the
// lanes start from -offset times the sum of their four activations. q8_0's levels are signed: their magnitudes
// multiply the activations with the weights' signs (vpsignb), with no offset. The lanes become f32, scaled by the
// weights' scale (per lane: q6_K changes it every 16 values) times the chunk's activation scale; formats with a
// min add min * d * sum(q). R weight rows run side by side, up to M = 4 activation rows share each decoded chunk.
//
// Internal linkage throughout, as in every file compiled with its own ISA flags (see matvec_simd.hpp).
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/matvec.hpp"
#include "kernels/cpu/matvec_simd.hpp"

namespace corolla {
namespace {

constexpr int64_t kChunk = 32;
// Software prefetch as in the f32 AVX2 kernels (matvec_avx2.cpp, where it was measured).
constexpr int64_t kPrefetchGroups = 2;
constexpr int64_t kPrefetchBytes = 256;
constexpr int64_t kTileBytes = 256 * 1024;

inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// --- prepared activations (the layout of matvec_vnni.cpp) ---------------------------------------------------------
// Per pair of chunks (64 values), 256 bytes: int8 q[64] | int32 bias[16] (-offset * the sum of each lane's four q)
// | f32 d[16] (each chunk's scale in its eight lanes) | f32 s[16] (d * sum(q) of the chunk / 8 in each of its
// lanes). Chunk c is half c % 2 of pair c / 2.
constexpr int64_t kPairBytes = 256;

thread_local Scratch scratch;  // the prepared activations

inline const char* chunk_of(const char* prepared_row, int64_t c) {
  return prepared_row + c / 2 * kPairBytes + c % 2 * 32;
}

inline int hsum_epi32(__m256i v) {
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
  return _mm_cvtsi128_si32(t);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// A chunk of 32 activations rounded to int8 levels (the rule in matvec.hpp), in order, and its scale d.
inline __m256i quantize_levels(const float* x, float& d) {
  __m256 v[4];
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float a = _mm_cvtss_f32(m);
  d = a / 127.f;
  const float id = a > 0 ? 127.f / a : 0.f;
  __m256i q[4];
  for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(id)));
  // packs work within 128-bit lanes: the permutation puts the four groups of eight back in order.
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])),
                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline void quantize_chunk(const float* x, char* at, int offset) {
  float d;
  const __m256i packed = quantize_levels(x, d);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(at), packed);
  const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), packed), _mm256_set1_epi16(1));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(at + 64), _mm256_mullo_epi32(sums, _mm256_set1_epi32(-offset)));
  _mm256_storeu_ps(reinterpret_cast<float*>(at + 128), _mm256_set1_ps(d));
  _mm256_storeu_ps(reinterpret_cast<float*>(at + 192),
                   _mm256_set1_ps(d * static_cast<float>(hsum_epi32(sums)) * 0.125f));
}

// x rows [m, k] (k a multiple of 32) -> m prepared rows of `pairs` pairs each.
const char* prepare(const float* x, int64_t m, int64_t k, int offset, int64_t& pairs) {
  const int64_t nc = k / kChunk;
  pairs = (nc + 1) / 2;
  char* out = scratch.bytes(m * pairs * kPairBytes);
  for (int64_t j = 0; j < m; ++j) {
    char* row = out + j * pairs * kPairBytes;
    if (nc % 2) std::memset(row + (pairs - 1) * kPairBytes, 0, kPairBytes);
    for (int64_t c = 0; c < nc; ++c)
      quantize_chunk(x + j * k + c * kChunk, const_cast<char*>(chunk_of(row, c)), offset);
  }
  return out;
}

// --- decoders: chunk c of a row -> 32 levels, the scale of each lane, and (formats with a min) the chunk's min -----
// kOffset: subtracted from every level; kSigned: the levels are signed bytes (q8_0); kMins: the format has a min.

struct DecQuant {
  static constexpr bool kSigned = false;
  const float* f16;
};

struct DecQ8_0 : DecQuant {
  static constexpr bool kSigned = true;
  static constexpr int kOffset = 0;
  static constexpr bool kMins = false;
  static constexpr int64_t kChunkBytes = sizeof(BlockQ8_0);
  void load(const char* row, int64_t c, __m256i& u, __m256& ws, __m256&) const {
    const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(row) + c;
    u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs));
    ws = _mm256_broadcast_ss(f16 + b->d);
  }
};

// q4 and q5 blocks: byte i holds value i in its low nibble and value i + 16 in its high one; bit i of qh (q5) is
// the fifth bit of value i, spread to a byte mask by a shuffle and a compare.
template <class Block>
struct DecQ4 : DecQuant {
  static constexpr bool kMins = requires(Block b) { b.m; };
  static constexpr bool kFifth = requires(Block b) { b.qh; };
  static constexpr int kOffset = kMins ? 0 : kFifth ? 16 : 8;
  static constexpr int64_t kChunkBytes = sizeof(Block);
  void load(const char* row, int64_t c, __m256i& u, __m256& ws, __m256& mn) const {
    const Block* b = reinterpret_cast<const Block*>(row) + c;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
    u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(15));
    if constexpr (kFifth) {
      uint32_t qh;
      std::memcpy(&qh, b->qh, 4);
      __m256i bits =
          _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)),
                              _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
      bits = _mm256_cmpeq_epi8(_mm256_or_si256(bits, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)), _mm256_set1_epi64x(-1));
      u = _mm256_or_si256(u, _mm256_and_si256(bits, _mm256_set1_epi8(16)));
    }
    ws = _mm256_broadcast_ss(f16 + b->d);
    if constexpr (kMins) mn = _mm256_broadcast_ss(f16 + b->m);
  }
};

// q4_K / q5_K: chunk c is sub-block j = c % 8 of super-block c / 8: the low (j even) or high nibbles of bytes
// 32 (j / 2) .. + 31, and bit j of qh. The eight scales and mins of a super-block are worked out together, once
// (block_scales, at its first chunk), and each chunk's levels on their own (levels).
template <class Block>
struct DecQ45_K : DecQuant {
  static constexpr int kOffset = 0;
  static constexpr bool kMins = true;
  static constexpr int64_t kBlockBytes = sizeof(Block), kChunkBytes = kBlockBytes / 8;
  // d * sc[j] and -dmin * m[j] of super-block `block`, j < 8.
  void block_scales(const char* row, int64_t block, float* ws, float* mins) const {
    const Block* b = reinterpret_cast<const Block*>(row) + block;
    uint32_t a, bb, c;  // the six-bit scales and mins assembled as the bytes of two 64-bit words (k_scales.hpp)
    std::memcpy(&a, b->scales, 4);
    std::memcpy(&bb, b->scales + 4, 4);
    std::memcpy(&c, b->scales + 8, 4);
    const uint64_t sc = (a & 0x3f3f3f3fu) | uint64_t{(c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u)} << 32;
    const uint64_t m = (bb & 0x3f3f3f3fu) | uint64_t{((c >> 4) & 0x0f0f0f0fu) | ((bb >> 2) & 0x30303030u)} << 32;
    const __m256 fsc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(sc))));
    const __m256 fm = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(m))));
    _mm256_storeu_ps(ws, _mm256_mul_ps(_mm256_set1_ps(f16[b->d]), fsc));
    _mm256_storeu_ps(mins, _mm256_mul_ps(_mm256_set1_ps(-f16[b->dmin]), fm));
  }
  void levels(const char* row, int64_t c, __m256i& u) const {
    const Block* b = reinterpret_cast<const Block*>(row) + c / 8;
    const int64_t j = c % 8;
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs + 32 * (j / 2)));
    u = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(static_cast<int>(4 * (j % 2)))), _mm256_set1_epi8(15));
    if constexpr (requires { b->qh; }) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh));
      const __m256i bit =
          _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(static_cast<int>(j))), _mm256_set1_epi8(1));
      u = _mm256_or_si256(u, _mm256_slli_epi16(bit, 4));
    }
  }
};

// q6_K: chunk c is quarter t of half h of its super-block (q6_chunk in matvec_simd.hpp); values 0..15 have the
// scale scales[0], values 16..31 scales[1].
struct DecQ6_K : DecQuant {
  static constexpr int kOffset = 32;
  static constexpr bool kMins = false;
  static constexpr int64_t kBlockBytes = sizeof(BlockQ6_K), kChunkBytes = kBlockBytes / 8;
  void load(const char* row, int64_t c, __m256i& u, __m256& ws, __m256&) const {
    const Q6Chunk k = q6_chunk(row, c);
    const __m256i lo = _mm256_and_si256(
        _mm256_srl_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.ql)), _mm_cvtsi32_si128(k.lshift)),
        _mm256_set1_epi8(15));
    const __m256i hi = _mm256_and_si256(
        _mm256_srl_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.qh)), _mm_cvtsi32_si128(k.hshift)),
        _mm256_set1_epi8(3));
    u = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
    const float d = f16[k.d];
    ws = _mm256_set_m128(_mm_set1_ps(d * static_cast<float>(k.scales[1])),
                         _mm_set1_ps(d * static_cast<float>(k.scales[0])));
  }
};

using DecQ4_0 = DecQ4<BlockQ4_0>;
using DecQ4_1 = DecQ4<BlockQ4_1>;
using DecQ5_0 = DecQ4<BlockQ5_0>;
using DecQ5_1 = DecQ4<BlockQ5_1>;
using DecQ4_K = DecQ45_K<BlockQ4_K>;
using DecQ5_K = DecQ45_K<BlockQ5_K>;

// --- the driver ----------------------------------------------------------------------------------------------------

// Rows [r, r + R) against M prepared rows (stride xs bytes): out[i][j]. With chunk c of row i, the bytes at
// ahead + i * stride + c * kChunkBytes are prefetched (none when null).
template <class D, int R, int M>
inline void dot_rows(const D& dec, const char* w, int64_t stride, int64_t nc, const char* xp, int64_t xs,
                     const char* ahead, float (&out)[R][M]) {
  __m256 acc[R][M];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < M; ++j) acc[i][j] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  alignas(32) float block_ws[R][8], block_mins[R][8];  // a super-block's scales and mins (the K-quants with mins)
  for (int64_t c = 0; c < nc; ++c) {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      __m256i u;
      __m256 ws, mn = _mm256_setzero_ps();
      if (ahead) _mm_prefetch(ahead + i * stride + c * D::kChunkBytes, _MM_HINT_T0);
      if constexpr (requires { &D::block_scales; }) {
        if (c % 8 == 0) dec.block_scales(w + i * stride, c / 8, block_ws[i], block_mins[i]);
        dec.levels(w + i * stride, c, u);
        ws = _mm256_broadcast_ss(&block_ws[i][c % 8]);
        mn = _mm256_broadcast_ss(&block_mins[i][c % 8]);
      } else {
        dec.load(w + i * stride, c, u, ws, mn);
      }
      __m256i magnitude = u;
      if constexpr (D::kSigned) magnitude = _mm256_sign_epi8(u, u);
#pragma GCC unroll 4
      for (int j = 0; j < M; ++j) {
        const char* a = chunk_of(xp + j * xs, c);
        __m256i q = _mm256_load_si256(reinterpret_cast<const __m256i*>(a));
        if constexpr (D::kSigned) q = _mm256_sign_epi8(q, u);
        const __m256i isum = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, q), ones),
                                              _mm256_load_si256(reinterpret_cast<const __m256i*>(a + 64)));
        acc[i][j] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
                            _mm256_mul_ps(ws, _mm256_load_ps(reinterpret_cast<const float*>(a + 128))), acc[i][j]);
        if constexpr (D::kMins)
          acc[i][j] = _mm256_fmadd_ps(mn, _mm256_load_ps(reinterpret_cast<const float*>(a + 192)), acc[i][j]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < M; ++j) out[i][j] = hsum(acc[i][j]);
}

// Weight rows per pass: R * M accumulators plus the decoded chunk must fit in 16 registers.
template <int M>
constexpr int kRowsPerPass = M <= 2 ? 4 : 2;

template <class D, int M>
void run(const D& dec, const char* w, int64_t stride, int64_t nc, const char* xp, int64_t xs, float* y, int64_t ldy,
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
    dot_rows<D, R, M>(dec, w + r * stride, stride, nc, xp, xs, ahead, out);
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < M; ++j) y[j * ldy + r + i] = out[i][j];
  }
  for (; r < r1; ++r) {
    float one[1][M];
    dot_rows<D, 1, M>(dec, w + r * stride, stride, nc, xp, xs, M == 1 ? nullptr : w + r * stride + kPrefetchBytes, one);
    for (int j = 0; j < M; ++j) y[j * ldy + r] = one[0][j];
  }
}

template <class D>
void mv_rows(const void* w, int64_t k, const float* x, int64_t m, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const char* wb = static_cast<const char*>(w);
  const D dec{{f16_to_f32_table()}};
  const int64_t stride = row_stride<D>(k), nc = k / kChunk;
  int64_t pairs;
  const char* xp = prepare(x, m, k, D::kOffset, pairs);
  const int64_t xs = pairs * kPairBytes;
  passes_over_tiles(m, r0, r1, max64(4, kTileBytes / stride / 4 * 4), [&]<int M>(int64_t i0, int64_t t0, int64_t t1) {
    run<D, M>(dec, wb, stride, nc, xp + i0 * xs, xs, y + i0 * ldy, ldy, t0, t1, r1);
  });
}

template <class D>
void mv(const void* w, int64_t k, const float* x, float* y, int64_t r0, int64_t r1) {
  mv_rows<D>(w, k, x, 1, y, 0, r0, r1);
}

// --- interleaved rows (kernels/interleaved_rows.hpp), as in matvec_vnni.cpp at half the width --------------------
// A 64-byte vector of a record is two 256-bit halves, rows 0..7 and 8..15. vpmaddubsw multiplies a half's levels
// with a word of 4 activations broadcast to every lane into int16 pairs; pairs of several words are added in int16
// while that cannot overflow (kWordsPerSum: 8 words of levels up to 15 stay below 2^15, 4 up to 31, 2 up to 63),
// then vpmaddwd turns each lane's two int16 into its row's int32.

// Prepared activations: kR16ChunkBytes per chunk (matvec_simd.hpp).
inline void quantize_chunk_r16(const float* x, char* out, int offset) {
  float d;
  const __m256i q = quantize_levels(x, d);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), q);
  const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
  alignas(32) int32_t s[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(s), sums);
  store_r16_fields(out, d, s[0] + s[1] + s[2] + s[3], s[4] + s[5] + s[6] + s[7], offset);
}

inline __m256i word(const char* a, int w) {  // activation word w (values 4w .. 4w + 3) in every lane
  int32_t v;
  std::memcpy(&v, a + 4 * w, 4);
  return _mm256_set1_epi32(v);
}
inline __m256i int16_pairs(__m256i s) { return _mm256_madd_epi16(s, _mm256_set1_epi16(1)); }
inline __m256 chunk_scale(const char* a) { return _mm256_set1_ps(*reinterpret_cast<const float*>(a + 36)); }
inline __m256 chunk_dsum(const char* a) { return _mm256_set1_ps(*reinterpret_cast<const float*>(a + 40)); }
inline __m256i chunk_bias(const char* a, int at) {
  return _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(a + at));
}
inline __m256i load(const char* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256 scales8(const char* p) {  // 8 f16 -> f32
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// q4_0 / q4_1 (mins after the scales): 8 words of levels up to 15 summed in int16. Both halves of the record meet
// each broadcast word of x: one broadcast feeds two products (the rows 0..7 and 8..15 of the same values).
template <class Block>
struct A16Q4 {
  static constexpr bool kMins = requires(Block b) { b.m; };
  static constexpr int kOffset = kMins ? 0 : 8;
  static constexpr int64_t kRecordBytes = 16 * sizeof(Block);
  static constexpr int64_t kLevels = kMins ? 64 : 32;
  static constexpr int64_t kChunks = 1;
  template <int M>
  static void add(const char* rec, const char* xp, int64_t, __m256 (&acc)[M][2], int64_t xs) {
    const __m256i nib = _mm256_set1_epi8(15);
    __m256i s[M][2];
    for (int j = 0; j < M; ++j) s[j][0] = s[j][1] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      const __m256i v0 = load(rec + kLevels + 64 * t), v1 = load(rec + kLevels + 64 * t + 32);
      const __m256i lo0 = _mm256_and_si256(v0, nib), lo1 = _mm256_and_si256(v1, nib);
#pragma GCC unroll 4
      for (int j = 0; j < M; ++j) {
        const __m256i w = word(xp + j * xs, t);
        s[j][0] = _mm256_add_epi16(s[j][0], _mm256_maddubs_epi16(lo0, w));
        s[j][1] = _mm256_add_epi16(s[j][1], _mm256_maddubs_epi16(lo1, w));
      }
      const __m256i hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), nib);
      const __m256i hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), nib);
#pragma GCC unroll 4
      for (int j = 0; j < M; ++j) {
        const __m256i w = word(xp + j * xs, t + 4);
        s[j][0] = _mm256_add_epi16(s[j][0], _mm256_maddubs_epi16(hi0, w));
        s[j][1] = _mm256_add_epi16(s[j][1], _mm256_maddubs_epi16(hi1, w));
      }
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256 ws = scales8(rec + 16 * h);
#pragma GCC unroll 4
      for (int j = 0; j < M; ++j) {
        const char* a = xp + j * xs;
        const __m256i isum = _mm256_add_epi32(int16_pairs(s[j][h]), chunk_bias(a, 32));
        acc[j][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(ws, chunk_scale(a)), acc[j][h]);
        if constexpr (kMins) acc[j][h] = _mm256_fmadd_ps(scales8(rec + 32 + 16 * h), chunk_dsum(a), acc[j][h]);
      }
    }
  }
};

// Signed levels (q8_0, iq4_nl): their magnitudes meet the activations with the levels' signs (vpsignb), one word
// per int16 sum (|level| <= 128). Levels::word(rec, v, h) gives word v's signed levels of half h of the record.
template <class Levels>
struct A16Signed {
  static constexpr int kOffset = 0;
  static constexpr int64_t kRecordBytes = Levels::kRecordBytes;
  static constexpr int64_t kChunks = 1;
  template <int M>
  static void add(const char* rec, const char* xp, int64_t, __m256 (&acc)[M][2], int64_t xs) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i s[M];
      for (int j = 0; j < M; ++j) s[j] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
        const __m256i q = Levels::word(rec, v, h), mag = _mm256_abs_epi8(q);
#pragma GCC unroll 4
        for (int j = 0; j < M; ++j)
          s[j] =
              _mm256_add_epi32(s[j], int16_pairs(_mm256_maddubs_epi16(mag, _mm256_sign_epi8(word(xp + j * xs, v), q))));
      }
      const __m256 ws = scales8(rec + 16 * h);
#pragma GCC unroll 4
      for (int j = 0; j < M; ++j)
        acc[j][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[j]), _mm256_mul_ps(ws, chunk_scale(xp + j * xs)), acc[j][h]);
    }
  }
};
// q8_0: levels stored as q + 128.
struct Q8_0Levels {
  static constexpr int64_t kRecordBytes = 16 * sizeof(BlockQ8_0);
  static __m256i word(const char* rec, int v, int h) {
    return _mm256_xor_si256(load(rec + 32 + 64 * v + 32 * h), _mm256_set1_epi8(-128));
  }
};
// iq4_nl (q4_0's record): word v is the low (v < 4) or high nibbles of vector v % 4, looked up in the grid.
struct IQ4_NLLevels {
  static constexpr int64_t kRecordBytes = 16 * sizeof(BlockIQ4_NL);
  static __m256i word(const char* rec, int v, int h) {
    const __m256i grid = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
    const __m256i bytes = load(rec + 32 + 64 * (v % 4) + 32 * h);
    const __m256i nibbles = v < 4 ? bytes : _mm256_srli_epi16(bytes, 4);
    return _mm256_shuffle_epi8(grid, _mm256_and_si256(nibbles, _mm256_set1_epi8(15)));
  }
};

// Rows 0..7 and 8..15 of a record in turn (the AVX2 kernels' two halves of a vector of 16 rows): body(half, sums)
// with the half's sums of each row of x in registers, where acc[j][half] with half a loop variable would live on the
// stack (each chunk's sum a store and a load).
template <int M, class Body>
inline void by_halves(__m256 (&acc)[M][2], Body&& body) {
#pragma GCC unroll 1
  for (int half = 0; half < 2; ++half) {
    __m256 sums[M];
    for (int j = 0; j < M; ++j) sums[j] = acc[j][half];
    body(half, sums);
    for (int j = 0; j < M; ++j) acc[j][half] = sums[j];
  }
}

// q4_K / q5_K (the record of R16Q45_K in matvec_vnni.cpp): per half and sub-block, 8 words of levels up to 15
// (q4_K) or two sums of 4 words up to 31 (q5_K) in int16.
template <class Block>
struct A16Q45_K {
  static constexpr bool kFifth = requires(Block b) { b.qh; };
  static constexpr int kOffset = 0;
  static constexpr int64_t kRecordBytes = 16 * sizeof(Block);
  static constexpr int64_t kChunks = 8;
  static constexpr int64_t kQs = kFifth ? 256 + 512 : 256;
  static constexpr int kWordsPerSum = kFifth ? 4 : 8;
  template <int M>
  static void add(const char* rec, const char* xp, int64_t, __m256 (&acc)[M][2], int64_t xs) {
    const __m256i six = _mm256_set1_epi32(63), four = _mm256_set1_epi32(15), two = _mm256_set1_epi32(3);
    const __m256i nib = _mm256_set1_epi8(15), bit = _mm256_set1_epi8(16);
    by_halves<M>(acc, [&](int h, __m256(&sums)[M]) {
      const __m256 d = scales8(rec + 16 * h), dmin = scales8(rec + 32 + 16 * h);
      const __m256i A = load(rec + 64 + 32 * h), B = load(rec + 128 + 32 * h), C = load(rec + 192 + 32 * h);
#pragma GCC unroll 1
      for (int i = 0; i < 4; ++i) {
        __m256 ws[2], wm[2];
        for (int e = 0; e < 2; ++e) {
          const int j = 2 * i + e;
          __m256i sc, mn;
          if (j < 4) {
            sc = _mm256_and_si256(_mm256_srli_epi32(A, 8 * j), six);
            mn = _mm256_and_si256(_mm256_srli_epi32(B, 8 * j), six);
          } else {
            const int sh = 8 * (j - 4);
            sc = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(C, sh), four),
                                 _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(A, sh + 6), two), 4));
            mn = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(C, sh + 4), four),
                                 _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(B, sh + 6), two), 4));
          }
          ws[e] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc));
          wm[e] = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(mn));
        }
        __m256i lo[M], hi[M], lo16[M], hi16[M];
        for (int j = 0; j < M; ++j) lo[j] = hi[j] = lo16[j] = hi16[j] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int t = 0; t < 8; ++t) {
          const __m256i v = load(rec + kQs + 64 * (8 * i + t) + 32 * h);
          __m256i ul = _mm256_and_si256(v, nib), uh = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
          if constexpr (kFifth) {  // bits 2i and 2i + 1 of qh, moved to bit 4 of each byte
            const __m256i qh = load(rec + 256 + 64 * t + 32 * h);
            const __m256i h0 = 2 * i <= 4 ? _mm256_slli_epi16(qh, 4 - 2 * i) : _mm256_srli_epi16(qh, 2 * i - 4);
            const __m256i h1 = 2 * i + 1 <= 4 ? _mm256_slli_epi16(qh, 3 - 2 * i) : _mm256_srli_epi16(qh, 2 * i - 3);
            ul = _mm256_or_si256(ul, _mm256_and_si256(h0, bit));
            uh = _mm256_or_si256(uh, _mm256_and_si256(h1, bit));
          }
#pragma GCC unroll 4
          for (int j = 0; j < M; ++j) {
            const char* a = xp + j * xs + 2 * i * kR16ChunkBytes;
            lo16[j] = _mm256_add_epi16(lo16[j], _mm256_maddubs_epi16(ul, word(a, t)));
            hi16[j] = _mm256_add_epi16(hi16[j], _mm256_maddubs_epi16(uh, word(a + kR16ChunkBytes, t)));
            if ((t + 1) % kWordsPerSum == 0) {
              lo[j] = _mm256_add_epi32(lo[j], int16_pairs(lo16[j]));
              hi[j] = _mm256_add_epi32(hi[j], int16_pairs(hi16[j]));
              lo16[j] = hi16[j] = _mm256_setzero_si256();
            }
          }
        }
#pragma GCC unroll 4
        for (int j = 0; j < M; ++j) {
          const char* a = xp + j * xs + 2 * i * kR16ChunkBytes;
          const char* b = a + kR16ChunkBytes;
          __m256 r = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo[j]), _mm256_mul_ps(ws[0], chunk_scale(a)), sums[j]);
          r = _mm256_fnmadd_ps(wm[0], chunk_dsum(a), r);
          r = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi[j]), _mm256_mul_ps(ws[1], chunk_scale(b)), r);
          sums[j] = _mm256_fnmadd_ps(wm[1], chunk_dsum(b), r);
        }
      }
    });
  }
};

// The record's address, opaque to the compiler for one iteration of a loop: without it GCC hoists the loads that do
// not depend on the loop's variable (q6_K's qh vectors, shared by four chunks; q2_K's 8 qs vectors of a half) out of it
// and spills them to the stack, and the accumulators with them.
inline const char* reloaded(const char* p) {
  asm("" : "+r"(p));
  return p;
}

// q6_K (the record of R16Q6_K in matvec_vnni.cpp): levels up to 63, two words per int16 sum. For one row of x,
// the four chunks of a half of the values share each load of qh, as in the VNNI kernel; for several rows, one chunk
// at a time: four at a time hold 4 x M sums and 4 x M int16 sums, with M = 4 32 vectors in AVX2's 16 registers,
// spilled to the stack (a Q6_K prefill 1.3-1.7x faster one at a time: docs/PERFORMANCE.md). Both
// add each chunk's parts to the row's sums in the same order (part, then chunk), so a row's result does not depend
// on its batch.
struct A16Q6_K {
  static constexpr int kOffset = 32;
  static constexpr int64_t kRecordBytes = 16 * sizeof(BlockQ6_K);
  static constexpr int64_t kChunks = 8;
  static __m256 scale(const char* rec, const __m256& d, int hv, int half, int t, int part) {
    const __m256i sv = load(rec + 32 + 64 * (2 * hv + t / 2) + 32 * half);
    const int byte = 2 * (t % 2) + part;
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(sv, 24 - 8 * byte), 24)));
  }
  // Chunk t of half hv of the values: (ql of run t % 2, nibble t / 2) | (qh >> 2t & 3) << 4.
  static void levels(__m256i hb, __m256i l0, __m256i l1, __m256i (&u)[4]) {
    const __m256i nib = _mm256_set1_epi8(15), top = _mm256_set1_epi8(0x30);
    u[0] = _mm256_or_si256(_mm256_and_si256(l0, nib), _mm256_and_si256(_mm256_slli_epi16(hb, 4), top));
    u[1] = _mm256_or_si256(_mm256_and_si256(l1, nib), _mm256_and_si256(_mm256_slli_epi16(hb, 2), top));
    u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), nib), _mm256_and_si256(hb, top));
    u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), nib),
                           _mm256_and_si256(_mm256_srli_epi16(hb, 2), top));
  }
  // Words 4 part .. 4 part + 3 of chunk T of half hv of the values, rows of `half`, for M rows of x: sums[j] +=
  // the chunk's integer sums times its scale.
  template <int T, int M>
  [[gnu::always_inline]] static void chunk(const char* rec, const __m256& d, int half, int hv, int part, const char* xp,
                                           int64_t xs, __m256 (&sums)[M]) {
    // Opaque: the compiler would keep the qh vectors that the four chunks share from the first chunk, and spill.
    const char* qh = reloaded(rec) + 288 + 1536 * hv + 768 * part + 32 * half;
    const char* ql = qh + 256;
    const char* a = xp + (4 * hv + T) * kR16ChunkBytes;
    __m256i sum[M], s16[M];
#pragma GCC unroll 4
    for (int j = 0; j < M; ++j) sum[j] = chunk_bias(a + j * xs, 44 + 4 * part), s16[j] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int w = 0; w < 4; ++w) {
      __m256i u[4];  // only u[T] is used
      levels(load(qh + 64 * w), load(ql + 64 * w), load(ql + 256 + 64 * w), u);
#pragma GCC unroll 4
      for (int j = 0; j < M; ++j) {
        s16[j] = _mm256_add_epi16(s16[j], _mm256_maddubs_epi16(u[T], word(a + j * xs, 4 * part + w)));
        if (w % 2 == 1) {
          sum[j] = _mm256_add_epi32(sum[j], int16_pairs(s16[j]));
          s16[j] = _mm256_setzero_si256();
        }
      }
    }
    const __m256 ws = scale(rec, d, hv, half, T, part);
#pragma GCC unroll 4
    for (int j = 0; j < M; ++j)
      sums[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[j]), _mm256_mul_ps(ws, chunk_scale(a + j * xs)), sums[j]);
  }
  // The four chunks of a half of the values at a time, each load of qh shared by the four, as in the VNNI kernel: for
  // one row of x (a version of this for one row with its loops written for one row decoded 20-30 % slower, for no
  // reason found in its instructions).
  template <int M>
  static void four_chunks_at_a_time(const char* rec, const char* xp, __m256 (&acc)[M][2], int64_t xs) {
    const __m256i nib = _mm256_set1_epi8(15), top = _mm256_set1_epi8(0x30);
#pragma GCC unroll 1
    for (int half = 0; half < 2; ++half) {  // rows 0..7, 8..15
      const __m256 d = scales8(rec + 16 * half);
#pragma GCC unroll 1
      for (int hv = 0; hv < 2; ++hv)  // values 0..127, 128..255
#pragma GCC unroll 1
        for (int part = 0; part < 2; ++part) {
          const char* qh = rec + 288 + 1536 * hv + 768 * part + 32 * half;
          const char* ql = qh + 256;
          __m256i sum[M][4], s16[M][4];
#pragma GCC unroll 4
          for (int j = 0; j < M; ++j)
#pragma GCC unroll 4
            for (int t = 0; t < 4; ++t) {
              sum[j][t] = chunk_bias(xp + j * xs + (4 * hv + t) * kR16ChunkBytes, 44 + 4 * part);
              s16[j][t] = _mm256_setzero_si256();
            }
#pragma GCC unroll 4
          for (int w = 0; w < 4; ++w) {
            const __m256i hb = load(qh + 64 * w), l0 = load(ql + 64 * w), l1 = load(ql + 256 + 64 * w);
            const __m256i u[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, nib), _mm256_and_si256(_mm256_slli_epi16(hb, 4), top)),
                _mm256_or_si256(_mm256_and_si256(l1, nib), _mm256_and_si256(_mm256_slli_epi16(hb, 2), top)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), nib), _mm256_and_si256(hb, top)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), nib),
                                _mm256_and_si256(_mm256_srli_epi16(hb, 2), top))};
#pragma GCC unroll 4
            for (int j = 0; j < M; ++j)
#pragma GCC unroll 4
              for (int t = 0; t < 4; ++t) {
                const char* a = xp + j * xs + (4 * hv + t) * kR16ChunkBytes;
                s16[j][t] = _mm256_add_epi16(s16[j][t], _mm256_maddubs_epi16(u[t], word(a, 4 * part + w)));
                if (w % 2 == 1) {
                  sum[j][t] = _mm256_add_epi32(sum[j][t], int16_pairs(s16[j][t]));
                  s16[j][t] = _mm256_setzero_si256();
                }
              }
          }
#pragma GCC unroll 4
          for (int t = 0; t < 4; ++t) {
            const __m256 ws = scale(rec, d, hv, half, t, part);
#pragma GCC unroll 4
            for (int j = 0; j < M; ++j)
              acc[j][half] = _mm256_fmadd_ps(
                  _mm256_cvtepi32_ps(sum[j][t]),
                  _mm256_mul_ps(ws, chunk_scale(xp + j * xs + (4 * hv + t) * kR16ChunkBytes)), acc[j][half]);
          }
        }
    }
  }
  template <int M>
  static void add(const char* rec, const char* xp, int64_t, __m256 (&acc)[M][2], int64_t xs) {
    if constexpr (M == 1) {
      four_chunks_at_a_time<1>(rec, xp, acc, xs);
      return;
    }
    by_halves<M>(acc, [&](int half, __m256(&sums)[M]) {  // rows 0..7, 8..15
      const __m256 d = scales8(rec + 16 * half);
#pragma GCC unroll 1
      for (int hv = 0; hv < 2; ++hv)  // values 0..127, 128..255
#pragma GCC unroll 1
        for (int part = 0; part < 2; ++part) {  // words 0..3 (each chunk's first scale), then 4..7
          chunk<0, M>(rec, d, half, hv, part, xp, xs, sums);
          chunk<1, M>(rec, d, half, hv, part, xp, xs, sums);
          chunk<2, M>(rec, d, half, hv, part, xp, xs, sums);
          chunk<3, M>(rec, d, half, hv, part, xp, xs, sums);
        }
    });
  }
};

// q2_K / q3_K (the records of R16Q2_K / R16Q3_K in matvec_vnni.cpp): per chunk half, 4 words of levels up to 3 or
// 7 summed in int16. Chunk c = 4h + t has the low bits of word w in qs vector 8h + w, shifted by 2t. Both kernels
// are bound by their instructions, not by memory.
inline __m256i a16_low_bits(const char* qs, int h, int t, int w, int half) {
  return _mm256_and_si256(_mm256_srli_epi16(load(qs + 64 * (8 * h + w) + 32 * half), 2 * t), _mm256_set1_epi8(3));
}

// vpshufb controls for lanes of 4 bytes (a row's bytes of four sub-blocks): bytes b and b + 1 of each lane into its
// two int16 (the scales of a chunk's two halves), and int16 i of each lane into both of its int16.
inline __m256i byte_pair_control(int b) {
  const __m256i lanes = _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c, 0, 0x04040404, 0x08080808, 0x0c0c0c0c);
  return _mm256_add_epi32(_mm256_set1_epi32(b | 0x80 << 8 | (b + 1) << 16 | 0x80 << 24), lanes);
}
inline __m256i int16_in_both_control(int i) {
  const __m256i lanes = _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c, 0, 0x04040404, 0x08080808, 0x0c0c0c0c);
  return _mm256_add_epi32(_mm256_set1_epi32(2 * i | (2 * i + 1) << 8 | 2 * i << 16 | (2 * i + 1) << 24), lanes);
}

// The sums of pairs (int16) of chunk c's two halves (values 0..15: words 0..3, 16..31: words 4..7) for M rows of x,
// with levels(w) the levels of word w.
template <int M, class Levels>
void a16_half_sums(const char* xp, int64_t xs, int c, Levels&& levels, __m256i (&s16)[M][2]) {
  for (int j = 0; j < M; ++j) s16[j][0] = s16[j][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int w = 0; w < 8; ++w) {
    const __m256i u = levels(w);
#pragma GCC unroll 4
    for (int j = 0; j < M; ++j)
      s16[j][w / 4] =
          _mm256_add_epi16(s16[j][w / 4], _mm256_maddubs_epi16(u, word(xp + j * xs + c * kR16ChunkBytes, w)));
  }
}

// sc0 * (sums of half 0) + sc1 * (sums of half 1) in each lane, for the pair of int16 scales sc = (sc0, sc1).
struct HalfScales {
  __m256i first = int16_in_both_control(0), second = int16_in_both_control(1);
  __m256i apply(const __m256i (&s16)[2], __m256i sc) const {
    return _mm256_add_epi32(_mm256_madd_epi16(s16[0], _mm256_shuffle_epi8(sc, first)),
                            _mm256_madd_epi16(s16[1], _mm256_shuffle_epi8(sc, second)));
  }
};

// The integer sums of chunk (h, t) for M rows of x, per half of the chunk (values 0..15, 16..31), started at `start`
// (the chunk's bias of that half, or 0), with levels(w) the levels of word w.
template <int M, class Levels>
void a16_chunk_sums(const char* xp, int64_t xs, int c, int start_at, Levels&& levels, __m256i (&sum)[M][2]) {
#pragma GCC unroll 4
  for (int j = 0; j < M; ++j)
    for (int part = 0; part < 2; ++part)
      sum[j][part] =
          start_at ? chunk_bias(xp + j * xs + c * kR16ChunkBytes, start_at + 4 * part) : _mm256_setzero_si256();
#pragma GCC unroll 2
  for (int part = 0; part < 2; ++part) {
    __m256i s16[M];
    for (int j = 0; j < M; ++j) s16[j] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int w = 4 * part; w < 4 * part + 4; ++w) {
      const __m256i u = levels(w);
#pragma GCC unroll 4
      for (int j = 0; j < M; ++j)
        s16[j] = _mm256_add_epi16(s16[j], _mm256_maddubs_epi16(u, word(xp + j * xs + c * kR16ChunkBytes, w)));
    }
    for (int j = 0; j < M; ++j) sum[j][part] = _mm256_add_epi32(sum[j][part], int16_pairs(s16[j]));
  }
}

// q3_K: signed 6-bit scales per 16 values, each half of a chunk scaled in f32 (its integer scales, as q2_K's are
// applied, measured 20 % slower; so did its sums kept in registers through by_halves, 15 %).
struct A16Q3_K {
  static constexpr int kOffset = 4;
  static constexpr int64_t kRecordBytes = 16 * sizeof(BlockQ3_K);
  static constexpr int64_t kChunks = 8;
  static constexpr int kScales = 32, kHmask = 32 + 192, kQs = 32 + 192 + 512;
  static __m256 scale(const char* rec, const __m256& d, int j, int half) {
    const int low_byte = j % 8;
    const __m256i lowv = load(rec + kScales + 64 * (low_byte / 4) + 32 * half);
    const __m256i highv = load(rec + kScales + 128 + 32 * half);
    const __m256i low =
        _mm256_and_si256(_mm256_srli_epi32(lowv, 8 * (low_byte % 4) + (j < 8 ? 0 : 4)), _mm256_set1_epi32(15));
    const __m256i high = _mm256_and_si256(_mm256_srli_epi32(highv, 8 * (j % 4) + 2 * (j / 4)), _mm256_set1_epi32(3));
    const __m256i sc = _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(high, 4)), _mm256_set1_epi32(32));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc));
  }
  template <int M>
  static void add(const char* rec, const char* xp, int64_t, __m256 (&acc)[M][2], int64_t xs) {
    const __m256i four = _mm256_set1_epi8(4);
#pragma GCC unroll 1
    for (int half = 0; half < 2; ++half) {  // rows 0..7, 8..15
      const __m256 d = scales8(rec + 16 * half);
#pragma GCC unroll 1
      for (int h = 0; h < 2; ++h)
#pragma GCC unroll 1
        for (int t = 0; t < 4; ++t) {
          const int bit = 4 * h + t;  // of hmask, moved to bit 2
          __m256i sum[M][2];
          a16_chunk_sums<M>(
              xp, xs, 4 * h + t, kHalfBiasAt,
              [&](int w) {
                const __m256i hm = load(rec + kHmask + 64 * w + 32 * half);
                const __m256i hb = bit >= 2 ? _mm256_srli_epi16(hm, bit - 2) : _mm256_slli_epi16(hm, 2 - bit);
                return _mm256_or_si256(a16_low_bits(rec + kQs, h, t, w, half), _mm256_and_si256(hb, four));
              },
              sum);
          const __m256 ws[2] = {scale(rec, d, 8 * h + 2 * t, half), scale(rec, d, 8 * h + 2 * t + 1, half)};
#pragma GCC unroll 4
          for (int j = 0; j < M; ++j) {
            const __m256 xd = chunk_scale(xp + j * xs + (4 * h + t) * kR16ChunkBytes);
            acc[j][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[j][0]), _mm256_mul_ps(ws[0], xd), acc[j][half]);
            acc[j][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[j][1]), _mm256_mul_ps(ws[1], xd), acc[j][half]);
          }
        }
    }
  }
};

// q2_K: 4-bit scales and mins per 16 values, so a chunk's sums stay integers until the chunk is done: each half's
// sums of pairs meet their scale in vpmaddwd, the mins meet the halves' sums of x (kHalfSumsAt) in one more, and one
// f32 step per chunk and row of x follows, where scaling each half in f32 took about twice the instructions
// (bench_matvec, one thread: 10.2-11.3 -> 12.4-13.7 GB/s).
struct A16Q2_K {
  static constexpr int kOffset = 0;
  static constexpr int64_t kRecordBytes = 16 * sizeof(BlockQ2_K);
  static constexpr int64_t kChunks = 8;
  static constexpr int kScales = 64, kQs = 64 + 256;
  template <int M>
  static void add(const char* rec, const char* xp, int64_t, __m256 (&acc)[M][2], int64_t xs) {
    const __m256i nib = _mm256_set1_epi16(15);
    const __m256i pairs[2] = {byte_pair_control(0), byte_pair_control(2)};
    const HalfScales halves;
    by_halves<M>(acc, [&](int half, __m256(&sums)[M]) {  // rows 0..7, 8..15
      const __m256 d = scales8(rec + 16 * half), dmin = scales8(rec + 32 + 16 * half);
#pragma GCC unroll 1
      for (int h = 0; h < 2; ++h)
#pragma GCC unroll 1
        for (int t = 0; t < 4; ++t) {
          // Sub-blocks 8h + 2t and the next: bytes 2 (t % 2) and the next of scale vector 2h + t / 2 (the scale in
          // the low nibble, the min in the high one).
          const __m256i p = _mm256_shuffle_epi8(load(rec + kScales + 64 * (2 * h + t / 2) + 32 * half), pairs[t % 2]);
          const __m256i sc = _mm256_and_si256(p, nib), mn = _mm256_and_si256(_mm256_srli_epi16(p, 4), nib);
          __m256i s16[M][2];
          const char* r = reloaded(rec);
          a16_half_sums<M>(
              xp, xs, 4 * h + t, [&](int w) { return a16_low_bits(r + kQs, h, t, w, half); }, s16);
#pragma GCC unroll 4
          for (int j = 0; j < M; ++j) {
            const char* a = xp + j * xs + (4 * h + t) * kR16ChunkBytes;
            const __m256i mins = _mm256_madd_epi16(mn, chunk_bias(a, kHalfSumsAt));
            const __m256 r = _mm256_fmsub_ps(_mm256_cvtepi32_ps(halves.apply(s16[j], sc)), d,
                                             _mm256_mul_ps(_mm256_cvtepi32_ps(mins), dmin));
            sums[j] = _mm256_fmadd_ps(r, chunk_scale(a), sums[j]);
          }
        }
    });
  }
};

// How far ahead a pass prefetches, in records: with the formats of small records (4 and 8 bits with one scale per
// 32 values: 288-544 bytes for 16 rows) a one-row pass waits on memory one record at a time without it (0.55-0.71
// of a read sweep on an AVX2 EPYC, 0.85-0.92 with the record ~600 bytes ahead in flight; passes over weights in
// L2 lose nothing). The K-quants' large records keep the cores busy enough: their kernels are bound by their own
// instructions, which prefetches only add to. A prefetch past the matrix's end is harmless (it never faults).
template <class F>
constexpr int64_t prefetch_records_ahead() {
  return F::kRecordBytes > 1024 ? 0 : (640 + F::kRecordBytes - 1) / F::kRecordBytes;
}

template <class F>
void mv_prepared_r16(const void* w, int64_t k, const char* xp, int64_t m, float* y, int64_t ldy, int64_t r0,
                     int64_t r1) {
  const int64_t nc = k / kChunk;
  interleaved_matvec(w, k, xp, m, y, ldy, r0, r1, nc / F::kChunks * F::kRecordBytes,
                     [&]<int M>(const char* group, const char* xq, int64_t xs, float(&out)[M][16]) {
                       __m256 acc[M][2];
                       for (int j = 0; j < M; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
                       constexpr int64_t ahead = prefetch_records_ahead<F>() * F::kRecordBytes;
                       for (int64_t c = 0; c < nc; c += F::kChunks) {
                         const char* rec = group + c / F::kChunks * F::kRecordBytes;
                         if constexpr (ahead > 0)  // past the group's end: the next group's records
                           for (int64_t p = 0; p < F::kRecordBytes; p += 64) _mm_prefetch(rec + ahead + p, _MM_HINT_T0);
                         F::template add<M>(rec, xq + c * kR16ChunkBytes, 0, acc, xs);
                       }
                       for (int j = 0; j < M; ++j) {
                         _mm256_storeu_ps(out[j], acc[j][0]);
                         _mm256_storeu_ps(out[j] + 8, acc[j][1]);
                       }
                     });
}

// Format F read with rows interleaved by 16, from activations prepared once per product or per call.
template <class F>
void set_r16(MatvecKernels& s, DType plain) {
  set_interleaved_r16<quantize_chunk_r16, F::kOffset, mv_prepared_r16<F>>(s, plain);
}

}  // namespace

void use_avx2_integer_dot_products(MatvecKernels& s) {
  s.set(DType::q8_0, mv<DecQ8_0>, mv_rows<DecQ8_0>);
  s.set(DType::q4_0, mv<DecQ4_0>, mv_rows<DecQ4_0>);
  s.set(DType::q4_1, mv<DecQ4_1>, mv_rows<DecQ4_1>);
  s.set(DType::q5_0, mv<DecQ5_0>, mv_rows<DecQ5_0>);
  s.set(DType::q5_1, mv<DecQ5_1>, mv_rows<DecQ5_1>);
  s.set(DType::q4_K, mv<DecQ4_K>, mv_rows<DecQ4_K>);
  s.set(DType::q5_K, mv<DecQ5_K>, mv_rows<DecQ5_K>);
  s.set(DType::q6_K, mv<DecQ6_K>, mv_rows<DecQ6_K>);
  set_r16<A16Q4<BlockQ4_0>>(s, DType::q4_0);
  set_r16<A16Q4<BlockQ4_1>>(s, DType::q4_1);
  set_r16<A16Signed<Q8_0Levels>>(s, DType::q8_0);
  set_r16<A16Q45_K<BlockQ4_K>>(s, DType::q4_K);
  set_r16<A16Q45_K<BlockQ5_K>>(s, DType::q5_K);
  set_r16<A16Q6_K>(s, DType::q6_K);
  set_r16<A16Q2_K>(s, DType::q2_K);
  set_r16<A16Q3_K>(s, DType::q3_K);
  set_r16<A16Signed<IQ4_NLLevels>>(s, DType::iq4_nl);
}

}  // namespace corolla
