// Shared by the kernel files compiled with their own ISA flags (matvec_avx2.cpp, matvec_avx512.cpp). Internal
// linkage on purpose: each file keeps its own copy (an inline function or template with external linkage would let
// the linker pick one compiled for AVX-512 for everyone).
#pragma once

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/matvec.hpp"
#include "kernels/dtype.hpp"

namespace corolla {
namespace {

// A per-thread buffer (each kernel file keeps a thread_local one), 64-byte aligned, grown on demand: the activations
// as a kernel reads them (de-interleaved for bf16, quantized for the integer kernels).
struct Scratch {
  char* data = nullptr;
  int64_t cap = 0;
  ~Scratch() { std::free(data); }
  char* bytes(int64_t n) {
    if (n > cap) {
      std::free(data);
      cap = (n + 63) / 64 * 64;
      data = static_cast<char*>(std::aligned_alloc(64, static_cast<size_t>(cap)));
    }
    return data;
  }
  float* floats(int64_t n) { return reinterpret_cast<float*>(bytes(n * 4)); }
};

// iq4_nl's grid as unsigned bytes (value + 128), a table for vpshufb.
alignas(16) constexpr auto kIq4nlGridPlus128 = [] {
  std::array<uint8_t, 16> g{};
  for (int i = 0; i < 16; ++i) g[static_cast<size_t>(i)] = static_cast<uint8_t>(kIq4nlValues[i] + 128);
  return g;
}();

// --- activations for the interleaved-row kernels (kernels/interleaved_rows.hpp), in both SIMD files ---------------
// Per chunk of 32 values, 64 bytes (kPreparedChunkBytes, matvec.hpp): int8 q[32] | int32 bias (-offset * sum(q)) |
// f32 d | f32 d * sum(q) (for the formats with a min) | int32 bias of values 0..15 | int32 bias of values 16..31
// (two scales per chunk: q6_K, q3_K) | f32 d * sum of q[0..15] | f32 d * sum of q[16..31] (a min per 16 values:
// q2_K) | int16 sum of q[0..15] | int16 sum of q[16..31] (a pair for vpmaddwd with a pair of integer mins). The
// offset is the one the format's unsigned levels are stored with, so the prepared x is per offset.
constexpr int64_t kR16ChunkBytes = kPreparedChunkBytes;
static_assert(kR16ChunkBytes == 64, "the fields below fill 64 bytes");
constexpr int kBiasAt = 32, kScaleAt = 36, kDsumAt = 40, kHalfBiasAt = 44, kHalfDsumAt = 52, kHalfSumsAt = 60;

// The fields after q, from the chunk's scale d and the sums of its two halves of levels.
inline void store_r16_fields(char* chunk, float d, int32_t lo, int32_t hi, int offset) {
  const int32_t biases[5] = {-offset * (lo + hi), 0, 0, -offset * lo, -offset * hi};
  std::memcpy(chunk + kBiasAt, biases, sizeof biases);
  const float dsum = d * static_cast<float>(lo + hi);
  const float half_dsums[2] = {d * static_cast<float>(lo), d * static_cast<float>(hi)};
  std::memcpy(chunk + kScaleAt, &d, 4);
  std::memcpy(chunk + kDsumAt, &dsum, 4);
  std::memcpy(chunk + kHalfDsumAt, half_dsums, sizeof half_dsums);
  const int16_t half_sums[2] = {static_cast<int16_t>(lo), static_cast<int16_t>(hi)};  // |sum| <= 16 * 127
  std::memcpy(chunk + kHalfSumsAt, half_sums, sizeof half_sums);
}

// x rows [m, k] (k a multiple of 32) -> m rows of k / 32 prepared chunks, each written by Quantize(x, chunk,
// Offset): a PrepareFn (matvec.hpp).
template <void (*Quantize)(const float*, char*, int), int Offset>
void prepare_r16(const float* x, int64_t m, int64_t k, char* out) {
  const int64_t nc = k / kQuantBlock;
  for (int64_t j = 0; j < m; ++j)
    for (int64_t c = 0; c < nc; ++c) Quantize(x + j * k + c * kQuantBlock, out + (j * nc + c) * kR16ChunkBytes, Offset);
}

// Rows [r0, r1) of the weights against m activation rows: up to kMatvecMaxRows rows of x share each pass, and with
// more than that, the groups of x take turns over tiles of `tile` weight rows (sized to stay in L2).
// pass.template operator()<M>(i0, t0, t1) runs rows [t0, t1) against rows i0 .. i0 + M - 1 of x.
template <class Pass>
void passes_over_tiles(int64_t m, int64_t r0, int64_t r1, int64_t tile, Pass&& pass) {
  if (m <= kMatvecMaxRows) tile = r1 - r0;
  for (int64_t t0 = r0; t0 < r1; t0 += tile) {
    const int64_t t1 = t0 + tile < r1 ? t0 + tile : r1;
    for (int64_t i0 = 0; i0 < m; i0 += kMatvecMaxRows) switch (m - i0 < kMatvecMaxRows ? m - i0 : kMatvecMaxRows) {
        case 1: pass.template operator()<1>(i0, t0, t1); break;
        case 2: pass.template operator()<2>(i0, t0, t1); break;
        case 3: pass.template operator()<3>(i0, t0, t1); break;
        default: pass.template operator()<4>(i0, t0, t1); break;
      }
  }
}
static_assert(kMatvecMaxRows == 4, "passes_over_tiles dispatches 1..4 rows of x");

// y = x · wᵀ for rows [r0, r1) of a matrix interleaved by 16 rows whose groups are group_bytes each, x prepared
// (xp), group by group (a group cut by the bounds is computed whole, only its rows in range written) with
// dot.template operator()<M>(group, prepared x, prepared row stride, float (&out)[M][16]).
inline constexpr int64_t kInterleavedTileBytes = 256 * 1024;

template <class Dot>
void interleaved_matvec(const void* w, int64_t k, const char* xp, int64_t m, float* y, int64_t ldy, int64_t r0,
                        int64_t r1, int64_t group_bytes, Dot&& dot) {
  const char* wb = static_cast<const char*>(w);
  const int64_t xs = k / kQuantBlock * kR16ChunkBytes;
  const int64_t groups_per_tile = kInterleavedTileBytes / group_bytes;  // several rows of x: L2-sized tiles
  const int64_t tile = 16 * (groups_per_tile > 1 ? groups_per_tile : 1);
  passes_over_tiles(m, r0, r1, tile, [&]<int M>(int64_t i0, int64_t t0, int64_t t1) {
    float out[M][16];
    for (int64_t g = t0 / 16; g * 16 < t1; ++g) {
      dot.template operator()<M>(wb + g * group_bytes, xp + i0 * xs, xs, out);
      const int64_t lo = t0 > g * 16 ? t0 : g * 16, hi = t1 < g * 16 + 16 ? t1 : g * 16 + 16;
      for (int j = 0; j < M; ++j)
        for (int64_t r = lo; r < hi; ++r) y[(i0 + j) * ldy + r] = out[j][r - g * 16];
    }
  });
}

// An interleaved format's whole set of kernels from its MatvecPreparedFn: the MatvecRowsFn and MatvecFn prepare x
// (with Quantize, the including file's own) into a per-thread buffer of that file, then read it; a product split
// over threads prepares once instead (matvec.hpp). set_interleaved_r16 registers the four.
inline Scratch& r16_scratch() {
  thread_local Scratch s;
  return s;
}

template <void (*Quantize)(const float*, char*, int), int Offset, MatvecPreparedFn Prepared>
void rows_r16(const void* w, int64_t k, const float* x, int64_t m, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  char* xp = r16_scratch().bytes(prepared_bytes(m, k));
  prepare_r16<Quantize, Offset>(x, m, k, xp);
  Prepared(w, k, xp, m, y, ldy, r0, r1);
}

template <void (*Quantize)(const float*, char*, int), int Offset, MatvecPreparedFn Prepared>
void one_row_r16(const void* w, int64_t k, const float* x, float* y, int64_t r0, int64_t r1) {
  rows_r16<Quantize, Offset, Prepared>(w, k, x, 1, y, 0, r0, r1);
}

template <void (*Quantize)(const float*, char*, int), int Offset, MatvecPreparedFn Prepared>
void set_interleaved_r16(MatvecKernels& s, DType plain) {
  s.set_interleaved(plain, one_row_r16<Quantize, Offset, Prepared>, rows_r16<Quantize, Offset, Prepared>,
                    prepare_r16<Quantize, Offset>, Prepared);
}

// Bytes per row of k values for decoder D, which reads chunks of 32 values: whole super-blocks of 256 values
// (kBlockBytes each) for the K-quants, whose kChunkBytes is only their mean size per 32 values (how far ahead to
// prefetch); whole chunks of kChunkBytes plus a tail of single values otherwise.
template <class D>
int64_t row_stride(int64_t k) {
  if constexpr (requires { D::kBlockBytes; })
    return k / kSuperBlock * D::kBlockBytes;
  else
    return (k / kQuantBlock) * D::kChunkBytes + (k % kQuantBlock) * (D::kChunkBytes / kQuantBlock);
}

// Chunk c (32 values) of a q6_K row: quarter t of half h of super-block c / 8. Its low nibbles are the 32 bytes
// at ql shifted right by lshift, its high two bits the 32 bytes at qh shifted right by hshift; values 0..15 have
// the scale scales[0], values 16..31 scales[1].
struct Q6Chunk {
  const uint8_t* ql;
  const uint8_t* qh;
  const int8_t* scales;
  uint16_t d;
  int lshift, hshift;
};

inline Q6Chunk q6_chunk(const char* row, int64_t c) {
  const BlockQ6_K* blk = reinterpret_cast<const BlockQ6_K*>(row) + c / 8;
  const int64_t h = (c % 8) / 4, t = c % 4;
  return {blk->ql + 64 * h + 32 * (t & 1), blk->qh + 32 * h,       blk->scales + 8 * h + 2 * t, blk->d,
          static_cast<int>(4 * (t >> 1)),  static_cast<int>(2 * t)};
}

}  // namespace
}  // namespace corolla
