// The "avx512amx" kernel set: the AVX-512 VNNI set with bf16 weights and the interleaved formats whose scales are
// per 32 values (q8_0, q4_0, q4_1, iq4_nl, q4_K, q5_K with rows interleaved by 16) multiplied on AMX tiles (Intel
// Advanced Matrix Extensions) where enough rows of x share the weights. This file alone is compiled with AMX flags;
// call it only where cpu_runs_amx() (matvec.cpp) said yes, which also asked the kernel for the tile state. The 8-bit
// part is further down.
//
// bf16 (TDPBF16PS): one instruction multiplies a 16x32 tile of bf16 weights by a 32x16 tile of bf16 activations
// into 16x16 f32 sums, 8,192 products in about 16 cycles, against 16 per FMA (2 per cycle) when bf16 is widened to
// f32. Activations are f32, so each is split into three bf16 parts, x = hi + mid + lo exactly (hi = x rounded to 8
// significant bits, mid = the rest rounded to 8, lo = what is left, at most 8 bits), and each weight tile meets the
// three parts. A bf16 times a bf16 is exact in f32 (8 x 8 bits), so every product is the one f32 arithmetic makes and
// only the order of the f32 sums differs from the FMA kernels: the golden models' 1e-4 holds on this path as on the
// others. A pass of tiles costs the same for 1 and for 16 rows of x, so one row stays on the FMA kernels.
//
// Layouts (tile rows x bytes): a weight tile (A) is 16 weight rows x 64 bytes (32 bf16), loaded straight from the
// matrix with the row stride, so weights are never repacked. An activation tile (B) is what TDPBF16PS wants: tile
// row p holds, for each of 16 activation rows j, the pair of values 2p, 2p + 1 of the chunk (4 bytes at 4j). x is
// prepared once per product into such tiles: per group of 16 rows of x, per chunk of 32 values, the three parts'
// tiles (1 KiB each) one after the other; rows past m are zeros. C = A B is then [weight row][activation row].
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/matvec.hpp"
#include "kernels/cpu/matvec_simd.hpp"
#include "kernels/interleaved_rows.hpp"

namespace corolla {
namespace {

constexpr int64_t kTileRows = 16;  // rows of every tile: weight rows of A, activation rows of B's columns
constexpr int64_t kTileK = 32;     // bf16 values per tile row of A (64 bytes)
constexpr int64_t kTileBytes = 1024;
constexpr int kParts = 3;                                  // hi, mid, lo
constexpr int64_t kGroupChunkBytes = kParts * kTileBytes;  // one chunk of one group of 16 rows of x, prepared
// Weight rows per pass: four A tiles meet the same three B tiles (tiles 0-3 accumulate, 4 holds A, 5-7 hold B).
constexpr int64_t kPassGroups = 4;
// Bytes of weights per tile of rows run over every group of x rows before the next tile (well inside L2), so the
// weights come from memory once however many rows x has.
constexpr int64_t kL2TileBytes = 512 * 1024;
// How far ahead in each weight row the next lines are asked for (bytes), as in the FMA kernels.
constexpr int64_t kPrefetchBytes = 512;

inline int64_t groups_of(int64_t m) { return (m + kTileRows - 1) / kTileRows; }
inline int64_t chunks_of(int64_t k) { return (k + kTileK - 1) / kTileK; }

// A tile configuration (palette 1); each kernel call loads its own.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
  void set(int tile, int tile_rows, int row_bytes) {
    rows[tile] = static_cast<uint8_t>(tile_rows);
    bytes_per_row[tile] = static_cast<uint16_t>(row_bytes);
  }
};

// bf16: 8 tiles of 16 rows x 64 bytes.
const TileConfig& bf16_tiles() {
  static const TileConfig c = [] {
    TileConfig t;
    for (int i = 0; i < 8; ++i) t.set(i, kTileRows, 64);
    return t;
  }();
  return c;
}

// Tiles hold state the kernel saves on every context switch: configured for one call and released after it, so a
// thread that does other work carries none (and a tile configuration another library left is never relied on).
class TileSession {
 public:
  explicit TileSession(const TileConfig& config) { _tile_loadconfig(&config); }
  ~TileSession() { _tile_release(); }
  TileSession(const TileSession&) = delete;
  TileSession& operator=(const TileSession&) = delete;
};

// f32 bits rounded to their top 16 (bf16, ties to even), as f32 bits with the low half zero.
inline __m512i round_to_bf16(__m512i u) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i sum = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
  return _mm512_and_si512(sum, _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
}

// 16 f32 -> three vectors of f32 that are bf16 values, x = hi + mid + lo exactly (for x neither tiny nor huge).
inline void split3(__m512 x, __m512i (&parts)[kParts]) {
  parts[0] = round_to_bf16(_mm512_castps_si512(x));
  const __m512 r1 = _mm512_sub_ps(x, _mm512_castsi512_ps(parts[0]));
  parts[1] = round_to_bf16(_mm512_castps_si512(r1));
  const __m512 r2 = _mm512_sub_ps(r1, _mm512_castsi512_ps(parts[1]));
  parts[2] = round_to_bf16(_mm512_castps_si512(r2));
}

// Two vectors of bf16-valued f32 (values 0..15 and 16..31 of a chunk) -> the chunk's 16 pairs as 32-bit words.
inline __m512i pack_pairs(__m512i lo16, __m512i hi16) {
  // Word p of the result is (value 2p+1) << 16 | value 2p: the top halves of the f32 words, two by two.
  const __m512i idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i idx_odd = _mm512_add_epi32(idx, _mm512_set1_epi32(1));
  const __m512i even = _mm512_permutex2var_epi32(lo16, idx, hi16);
  const __m512i odd = _mm512_permutex2var_epi32(lo16, idx_odd, hi16);
  const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  return _mm512_or_si512(_mm512_srli_epi32(even, 16), _mm512_and_si512(odd, high_half));
}

int64_t amx_prepared_size(int64_t m, int64_t k) { return groups_of(m) * chunks_of(k) * kGroupChunkBytes; }

// x [m, k] -> groups of 16 rows, each chunk's three B tiles (see the header). A chunk past k is zero-padded.
void amx_prepare(const float* x, int64_t m, int64_t k, char* out) {
  const int64_t nc = chunks_of(k);
  std::memset(out, 0, static_cast<size_t>(amx_prepared_size(m, k)));
  const __m512i columns = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                             _mm512_set1_epi32(static_cast<int>(kTileRows)));
  for (int64_t row = 0; row < m; ++row) {
    const int64_t g = row / kTileRows, j = row % kTileRows;
    const float* xr = x + row * k;
    for (int64_t c = 0; c < nc; ++c) {
      alignas(64) float padded[kTileK];
      const float* src = xr + c * kTileK;
      if ((c + 1) * kTileK > k) {
        std::memset(padded, 0, sizeof padded);
        std::memcpy(padded, src, static_cast<size_t>(k - c * kTileK) * sizeof(float));
        src = padded;
      }
      __m512i lo[kParts], hi[kParts];
      split3(_mm512_loadu_ps(src), lo);
      split3(_mm512_loadu_ps(src + 16), hi);
      char* chunk = out + (g * nc + c) * kGroupChunkBytes;
      // Pair p of this row goes to word p * 16 + j of each part's tile.
      for (int p = 0; p < kParts; ++p)
        _mm512_i32scatter_epi32(chunk + p * kTileBytes + j * 4, columns, pack_pairs(lo[p], hi[p]), 4);
    }
  }
}

// A weight matrix as the A tiles read it: 16 rows' chunk c straight from the matrix with the row stride; the last,
// partial chunk of k (a tile must not read past a row) and the rows of a last, partial group go through zero-padded
// copies (pad_rows).
struct WeightRows {
  const char* w;
  int64_t stride;  // bytes per weight row
  int64_t k;
};

// y[j, r + i] for i < rows (<= 16) and j < m_here, from a C tile stored as [weight row][activation row].
inline void store_tile(const float* c, int64_t rows, int64_t m_here, float* y, int64_t ldy, int64_t r) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < m_here; ++j) y[j * ldy + r + i] = c[i * kTileRows + j];
}

// C tile t += the A tile at `a` (16 weight rows, `stride` apart) times the three parts of x in tiles 5-7. Tile
// numbers are immediates, so t picks one of four copies.
inline void multiply_parts(int t, const char* a, int64_t stride) {
  _tile_loadd(4, a, stride);
#define COROLLA_AMX_PARTS(c) \
  _tile_dpbf16ps(c, 4, 5);   \
  _tile_dpbf16ps(c, 4, 6);   \
  _tile_dpbf16ps(c, 4, 7);
  switch (t) {
    case 0: COROLLA_AMX_PARTS(0) break;
    case 1: COROLLA_AMX_PARTS(1) break;
    case 2: COROLLA_AMX_PARTS(2) break;
    default: COROLLA_AMX_PARTS(3) break;
  }
#undef COROLLA_AMX_PARTS
}

// Groups of 16 weight rows (the first at `rows`, `stride` bytes apart, nc_full whole chunks, then `tail_tiles`, the
// last partial chunk as padded A tiles, if any) against the group of x rows at xg; y_at[j * ldy + i] for the first
// `stored` rows. Only the first group of x rows (`from_memory`) asks for the weights ahead; the later ones find them
// in L2 (the caller's tile of rows).
template <int Groups>
void full_groups(const char* rows, int64_t stride, int64_t nc_full, const char* tail_tiles, const char* xg,
                 int64_t m_here, float* y_at, int64_t ldy, int64_t stored, bool from_memory) {
  static_assert(Groups >= 1 && Groups <= kPassGroups);
  _tile_zero(0);
  if constexpr (Groups > 1) _tile_zero(1);
  if constexpr (Groups > 2) _tile_zero(2);
  if constexpr (Groups > 3) _tile_zero(3);
  for (int64_t c = 0; c < nc_full; ++c) {
    const char* xc = xg + c * kGroupChunkBytes;
    _tile_loadd(5, xc, 64);
    _tile_loadd(6, xc + kTileBytes, 64);
    _tile_loadd(7, xc + 2 * kTileBytes, 64);
    if (from_memory)
      for (int64_t i = 0; i < Groups * kTileRows; ++i)
        _mm_prefetch(rows + i * stride + c * 64 + kPrefetchBytes, _MM_HINT_T0);
    for (int t = 0; t < Groups; ++t) multiply_parts(t, rows + t * kTileRows * stride + c * 64, stride);
  }
  if (tail_tiles) {
    const char* xc = xg + nc_full * kGroupChunkBytes;
    _tile_loadd(5, xc, 64);
    _tile_loadd(6, xc + kTileBytes, 64);
    _tile_loadd(7, xc + 2 * kTileBytes, 64);
    for (int t = 0; t < Groups; ++t) multiply_parts(t, tail_tiles + t * kTileBytes, 64);
  }
  alignas(64) float c[kPassGroups][kTileRows * kTileRows];
  _tile_stored(0, c[0], 64);
  if constexpr (Groups > 1) _tile_stored(1, c[1], 64);
  if constexpr (Groups > 2) _tile_stored(2, c[2], 64);
  if constexpr (Groups > 3) _tile_stored(3, c[3], 64);
  for (int g = 0; g < Groups; ++g)
    store_tile(c[g], std::min(kTileRows, stored - g * kTileRows), m_here, y_at, ldy, g * kTileRows);
}

thread_local Scratch padded_rows;  // a partial group's rows, zero-padded to 16 rows and whole chunks
thread_local Scratch tail_chunks;  // the last partial chunk of 16 * kPassGroups rows, as padded A tiles

// Copies rows [r, r + n) (n <= 16), columns [c0, k), into a [16, 32 * chunks] bf16 block at dst, zeros elsewhere.
void pad_rows(const WeightRows& w, int64_t r, int64_t n, int64_t c0, int64_t chunks, char* dst) {
  const int64_t dst_stride = chunks * kTileK * 2;
  std::memset(dst, 0, static_cast<size_t>(kTileRows * dst_stride));
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(dst + i * dst_stride, w.w + (r + i) * w.stride + c0 * 2, static_cast<size_t>((w.k - c0) * 2));
}

// y[m, rows r0..r1) from x prepared by amx_prepare: a MatvecPreparedFn.
void amx_bf16_prepared(const void* wv, int64_t k, const char* xp, int64_t m, float* y, int64_t ldy, int64_t r0,
                       int64_t r1) {
  if (r0 >= r1 || m <= 0) return;
  TileSession tiles(bf16_tiles());
  const WeightRows w{static_cast<const char*>(wv), k * 2, k};
  const int64_t nc = chunks_of(k), nc_full = k / kTileK, groups = groups_of(m);
  const int64_t full_end = r0 + (r1 - r0) / kTileRows * kTileRows;
  const int64_t tile_rows = std::max<int64_t>(
      kPassGroups * kTileRows, kL2TileBytes / w.stride / (kPassGroups * kTileRows) * kPassGroups * kTileRows);
  char* tail = nc_full < nc ? tail_chunks.bytes(kPassGroups * kTileBytes) : nullptr;
  for (int64_t t0 = r0; t0 < full_end; t0 += tile_rows) {
    const int64_t t1 = std::min(full_end, t0 + tile_rows);
    for (int64_t g = 0; g < groups; ++g) {
      const char* xg = xp + g * nc * kGroupChunkBytes;
      const int64_t m_here = std::min(kTileRows, m - g * kTileRows);
      float* yg = y + g * kTileRows * ldy;
      for (int64_t r = t0; r < t1;) {
        const int n = static_cast<int>(std::min(kPassGroups, (t1 - r) / kTileRows));
        if (tail)
          for (int i = 0; i < n; ++i)
            pad_rows(w, r + i * kTileRows, kTileRows, nc_full * kTileK, 1, tail + i * kTileBytes);
        const char* rows = w.w + r * w.stride;
        const int64_t stored = n * kTileRows;
        switch (n) {
          case 4: full_groups<4>(rows, w.stride, nc_full, tail, xg, m_here, yg + r, ldy, stored, g == 0); break;
          case 3: full_groups<3>(rows, w.stride, nc_full, tail, xg, m_here, yg + r, ldy, stored, g == 0); break;
          case 2: full_groups<2>(rows, w.stride, nc_full, tail, xg, m_here, yg + r, ldy, stored, g == 0); break;
          default: full_groups<1>(rows, w.stride, nc_full, tail, xg, m_here, yg + r, ldy, stored, g == 0); break;
        }
        r += n * kTileRows;
      }
    }
  }
  if (full_end < r1) {  // fewer than 16 rows left: run them as a zero-padded group of 16 whole chunks
    const int64_t n = r1 - full_end;
    char* block = padded_rows.bytes(kTileRows * nc * kTileK * 2);
    pad_rows(w, full_end, n, 0, nc, block);
    for (int64_t g = 0; g < groups; ++g)
      full_groups<1>(block, nc * kTileK * 2, nc, nullptr, xp + g * nc * kGroupChunkBytes,
                     std::min(kTileRows, m - g * kTileRows), y + g * kTileRows * ldy + full_end, ldy, n, false);
  }
}

thread_local Scratch prepared_x;  // x prepared by the per-call entry point

// Below this many rows of x the VNNI set's FMA kernels (bf16 widened to f32) are faster: they read the weights at
// the memory's speed and their cost grows with m, while a pass of AMX tiles costs the same for 1 to 16 rows (and
// reads weights at about 25 GB/s per core in cache, three tile products per tile of weights).
// bench_batch_decode (TinyLlama's shape, bf16, 2 threads, docs/PERFORMANCE.md) put the crossing near 10 sessions.
constexpr int64_t kAmxMinRows = 10;
MatvecRowsFn fma_rows = nullptr;  // the VNNI set's bf16 kernel, set with the AMX set

void amx_bf16_rows(const void* w, int64_t k, const float* x, int64_t m, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  if (m < kAmxMinRows) return fma_rows(w, k, x, m, y, ldy, r0, r1);
  char* xp = prepared_x.bytes(amx_prepared_size(m, k));
  amx_prepare(x, m, k, xp);
  amx_bf16_prepared(w, k, xp, m, y, ldy, r0, r1);
}

// --- quantized weights with rows interleaved by 16 (kernels/interleaved_rows.hpp): TDPBSUD ---------------------
// (q6_K, q2_K and q3_K, whose scales change every 16 values, stay on the VNNI kernels.)
// x is what the VNNI kernels read, prepared once per product (each chunk of 32 values as int8 levels with its scale
// and sums, matvec_simd.hpp), and a record of 16 rows' blocks of one chunk holds their levels as 64-byte vectors
// whose lane r is 4 levels of row r: vector v is row v of a B tile (8 rows x 64 bytes), straight from the record for
// q8_0, from the nibbles (and q5_K's fifth bits) unpacked for the others. One TDPBSUD multiplies 16 rows of x by a
// chunk's levels: the 16 x 16 integer sums the VNNI kernels build lane by lane, exactly. Each chunk has its own
// scales, so each chunk's sums come out of the tile and are scaled in f32 as the VNNI kernels scale theirs, in the
// same order: the results are theirs bit for bit, and rows of x past the last whole group of 16 run on the VNNI
// kernels.

// C: tiles 0-3 (16 x 16 int32 each, chunks in turn); A: tiles 4 and 5 (16 rows x 32 levels); B: tiles 6 and 7.
const TileConfig& int8_tiles() {
  static const TileConfig c = [] {
    TileConfig t;
    for (int i = 0; i < 4; ++i) t.set(i, kTileRows, 64);
    t.set(4, kTileRows, 32);
    t.set(5, kTileRows, 32);
    t.set(6, 8, 64);
    t.set(7, 8, 64);
    return t;
  }();
  return c;
}

// A format on tiles: kRecordBytes per record of kChunks chunks (32 values each); kOffset: its levels carry an offset
// (taken off through the prepared chunk's bias); scales(record, chunk, ws, wm) gives
// chunk's 16 rows' scales and mins as the VNNI kernels compute them (kMins: none, +1: + wm * dsum, -1: - wm * dsum);
// unpack(record, chunk, tile) writes the chunk's levels as a B tile, unless kUnpacks is false (q8_0's levels, after
// the record's scales, are a B tile as stored: q + 128).
inline __m512 half_scales(const char* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

struct AmxQ8_0 {
  static constexpr bool kOffset = true;  // levels stored as q + 128
  static constexpr int kMins = 0;
  static constexpr bool kUnpacks = false;
  static constexpr int64_t kChunks = 1;
  static constexpr int64_t kRecordBytes = 16 * sizeof(BlockQ8_0);
  static void scales(const char* rec, int, __m512& ws, __m512&) { ws = half_scales(rec); }
};

template <class Block>
struct AmxQ4 {
  static constexpr bool kHasMins = requires(Block b) { b.m; };
  static constexpr int kMins = kHasMins ? 1 : 0;
  static constexpr bool kGrid = std::is_same_v<Block, BlockIQ4_NL>;
  static constexpr bool kOffset = !kHasMins;  // q4_0's levels are q + 8, iq4_nl's grid values + 128
  static constexpr bool kUnpacks = true;
  static constexpr int64_t kChunks = 1;
  static constexpr int64_t kRecordBytes = 16 * sizeof(Block);
  static void scales(const char* rec, int, __m512& ws, __m512& wm) {
    ws = half_scales(rec);
    if constexpr (kMins != 0) wm = half_scales(rec + 32);
  }
  // Vector t of nibbles: low nibbles are levels 4t.. (B row t), high ones 16 + 4t.. (B row t + 4).
  static void unpack(const char* rec, int, char* tile) {
    const __m512i mask = _mm512_set1_epi8(15);
    const __m512i grid =
        _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kIq4nlGridPlus128.data())));
    for (int t = 0; t < 4; ++t) {
      const __m512i v = _mm512_loadu_si512(rec + (kMins != 0 ? 64 : 32) + 64 * t);
      __m512i lo = _mm512_and_si512(v, mask), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
      if constexpr (kGrid) lo = _mm512_shuffle_epi8(grid, lo), hi = _mm512_shuffle_epi8(grid, hi);
      _mm512_store_si512(tile + 64 * t, lo);
      _mm512_store_si512(tile + 64 * (t + 4), hi);
    }
  }
};

// q4_K / q5_K (kernels/interleaved_rows.hpp): a record is a super-block of 8 chunks; chunk 2i + h takes the low
// (h = 0) or high nibbles of qs vectors 8i..8i + 7 (and for q5_K bit 2i + h of qh vector t as its fifth bit), its
// scale d * sc and min dmin * m from the 6-bit pairs (the VNNI kernel's unpacking, lane by lane).
template <class Block>
struct AmxQ45_K {
  static constexpr bool kFifth = requires(Block b) { b.qh; };
  static constexpr bool kOffset = false;
  static constexpr int kMins = -1;
  static constexpr bool kUnpacks = true;
  static constexpr int64_t kChunks = 8;
  static constexpr int64_t kRecordBytes = 16 * sizeof(Block);
  static constexpr int64_t kQs = kFifth ? 256 + 512 : 256;
  static void scales(const char* rec, int j, __m512& ws, __m512& wm) {
    const __m512i A = _mm512_loadu_si512(rec + 64), B = _mm512_loadu_si512(rec + 128);
    const __m512i C = _mm512_loadu_si512(rec + 192);
    const __m512i six = _mm512_set1_epi32(63), four = _mm512_set1_epi32(15), two = _mm512_set1_epi32(3);
    __m512i sc, mn;
    if (j < 4) {
      sc = _mm512_and_si512(_mm512_srl_epi32(A, _mm_cvtsi32_si128(8 * j)), six);
      mn = _mm512_and_si512(_mm512_srl_epi32(B, _mm_cvtsi32_si128(8 * j)), six);
    } else {
      const __m128i s = _mm_cvtsi32_si128(8 * (j - 4)), s4 = _mm_cvtsi32_si128(8 * (j - 4) + 4);
      const __m128i s6 = _mm_cvtsi32_si128(8 * (j - 4) + 6);
      sc = _mm512_or_si512(_mm512_and_si512(_mm512_srl_epi32(C, s), four),
                           _mm512_slli_epi32(_mm512_and_si512(_mm512_srl_epi32(A, s6), two), 4));
      mn = _mm512_or_si512(_mm512_and_si512(_mm512_srl_epi32(C, s4), four),
                           _mm512_slli_epi32(_mm512_and_si512(_mm512_srl_epi32(B, s6), two), 4));
    }
    ws = _mm512_mul_ps(half_scales(rec), _mm512_cvtepi32_ps(sc));
    wm = _mm512_mul_ps(half_scales(rec + 32), _mm512_cvtepi32_ps(mn));
  }
  static void unpack(const char* rec, int j, char* tile) {
    const int i = j / 2, h = j % 2;
    const __m512i nib = _mm512_set1_epi8(15);
    for (int t = 0; t < 8; ++t) {
      const __m512i v = _mm512_loadu_si512(rec + kQs + 64 * (8 * i + t));
      __m512i u = h == 0 ? _mm512_and_si512(v, nib) : _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
      if constexpr (kFifth) {  // bit j of qh, moved to bit 4 of each byte
        const __m512i qh = _mm512_loadu_si512(rec + 256 + 64 * t), bit = _mm512_set1_epi8(16);
        const __m512i hb =
            j <= 4 ? _mm512_sll_epi16(qh, _mm_cvtsi32_si128(4 - j)) : _mm512_srl_epi16(qh, _mm_cvtsi32_si128(j - 4));
        u = _mm512_ternarylogic_epi32(u, hb, bit, 0xf8);
      }
      _mm512_store_si512(tile + 64 * t, u);
    }
  }
};

// One group of 16 weight rows (records at `group`, their levels as B tiles at `levels`, one per chunk, levels_stride
// apart) against 16 prepared rows of x (row stride xs): out[j][0..16). Four C tiles take turns, so the tile unit
// multiplies the next chunks while the vector unit scales chunk c.
constexpr int64_t kLevelsBytes = 512;  // a chunk's levels unpacked: 8 rows x 64 bytes
template <class F>
void amx_group(const char* group, const char* levels, int64_t levels_stride, int64_t nc, const char* xp, int64_t xs,
               float (&out)[kTileRows][16]) {
  alignas(64) int32_t sums[kTileRows * 16];
  __m512 acc[kTileRows];
  for (int j = 0; j < kTileRows; ++j) acc[j] = _mm512_setzero_ps();
  // Chunk c's sums go to C tile c % 4 (tile numbers are immediates: one branch per case), three chunks ahead of
  // the chunk being scaled.
  auto multiply = [&](int64_t c) {
    const char* a = xp + c * kR16ChunkBytes;
    const char* b = levels + c * levels_stride;
    switch (c & 3) {
      case 0:
        _tile_loadd(4, a, xs);
        _tile_loadd(6, b, 64);
        _tile_zero(0);
        _tile_dpbsud(0, 4, 6);
        break;
      case 1:
        _tile_loadd(5, a, xs);
        _tile_loadd(7, b, 64);
        _tile_zero(1);
        _tile_dpbsud(1, 5, 7);
        break;
      case 2:
        _tile_loadd(4, a, xs);
        _tile_loadd(6, b, 64);
        _tile_zero(2);
        _tile_dpbsud(2, 4, 6);
        break;
      default:
        _tile_loadd(5, a, xs);
        _tile_loadd(7, b, 64);
        _tile_zero(3);
        _tile_dpbsud(3, 5, 7);
        break;
    }
  };
  constexpr int64_t kAhead = 3;
  for (int64_t c = 0; c < kAhead && c < nc; ++c) multiply(c);
  for (int64_t c = 0; c < nc; ++c) {
    switch (c & 3) {
      case 0: _tile_stored(0, sums, 64); break;
      case 1: _tile_stored(1, sums, 64); break;
      case 2: _tile_stored(2, sums, 64); break;
      default: _tile_stored(3, sums, 64); break;
    }
    if (c + kAhead < nc) multiply(c + kAhead);
    __m512 ws, wm = _mm512_setzero_ps();
    F::scales(group + c / F::kChunks * F::kRecordBytes, static_cast<int>(c % F::kChunks), ws, wm);
#pragma GCC unroll 16
    for (int j = 0; j < kTileRows; ++j) {
      const char* a = xp + j * xs + c * kR16ChunkBytes;
      float d, dsum;
      std::memcpy(&d, a + 36, 4);
      std::memcpy(&dsum, a + 40, 4);
      __m512i dot = _mm512_load_si512(sums + 16 * j);
      if constexpr (F::kOffset) {  // the levels' offset, through the chunk's bias (zero without one)
        int32_t bias;
        std::memcpy(&bias, a + 32, 4);
        dot = _mm512_add_epi32(dot, _mm512_set1_epi32(bias));
      }
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(ws, _mm512_set1_ps(d)), acc[j]);
      if constexpr (F::kMins > 0) acc[j] = _mm512_fmadd_ps(wm, _mm512_set1_ps(dsum), acc[j]);
      if constexpr (F::kMins < 0) acc[j] = _mm512_fnmadd_ps(wm, _mm512_set1_ps(dsum), acc[j]);
    }
  }
  for (int j = 0; j < kTileRows; ++j) _mm512_storeu_ps(out[j], acc[j]);
}

thread_local Scratch unpacked_levels;  // a tile's levels as B tiles, for the formats that pack them
constexpr int64_t kInt8L2TileBytes = 192 * 1024;

// From 16 rows of x the tiles run its whole groups of 16 rows (bench_batch_decode, TinyLlama's shape: q8_0 1.3x the
// VNNI kernels at 16-64 sessions, q4_0 1.1-1.2x; docs/PERFORMANCE.md).
constexpr int64_t kAmxInt8MinRows = 16;

template <class F>
MatvecPreparedFn vnni_prepared = nullptr;  // the VNNI set's kernel for the same dtype, set with the AMX set

template <class F>
void amx_r16_prepared(const void* w, int64_t k, const char* xp, int64_t m, float* y, int64_t ldy, int64_t r0,
                      int64_t r1) {
  const int64_t whole = m >= kAmxInt8MinRows ? m / kTileRows * kTileRows : 0;
  const int64_t nc = k / kQuantBlock, xs = nc * kR16ChunkBytes, group_bytes = nc / F::kChunks * F::kRecordBytes;
  if (whole > 0 && r0 < r1) {
    TileSession tiles(int8_tiles());
    const char* wb = static_cast<const char*>(w);
    float out[kTileRows][16];
    // Groups of weight rows in tiles that stay in L2 while every group of x rows runs over them: weights and x each
    // come from memory once (x would otherwise be read again for every group of 16 weight rows).
    const int64_t levels_bytes = F::kUnpacks ? nc * kLevelsBytes : 0;
    const int64_t per_tile = std::max<int64_t>(1, kInt8L2TileBytes / (group_bytes + levels_bytes));
    char* unpacked = F::kUnpacks ? unpacked_levels.bytes(per_tile * levels_bytes) : nullptr;
    for (int64_t g0 = r0 / 16; g0 * 16 < r1; g0 += per_tile) {
      const int64_t g1 = std::min(g0 + per_tile, (r1 + 15) / 16);
      // The levels as B tiles: from the records, or unpacked once for every group of x rows (written well before
      // the tiles load them; tile loads do not take data from stores still in flight).
      if constexpr (F::kUnpacks)
        for (int64_t g = g0; g < g1; ++g)
          for (int64_t c = 0; c < nc; ++c) {
            char* tile = unpacked + (g - g0) * levels_bytes + c * kLevelsBytes;
            const char* rec = wb + g * group_bytes + c / F::kChunks * F::kRecordBytes;
            F::unpack(rec, static_cast<int>(c % F::kChunks), tile);
          }
      for (int64_t i0 = 0; i0 < whole; i0 += kTileRows)
        for (int64_t g = g0; g < g1; ++g) {
          const char* group = wb + g * group_bytes;
          const char* levels = F::kUnpacks ? unpacked + (g - g0) * levels_bytes : group + 32;
          amx_group<F>(group, levels, F::kUnpacks ? kLevelsBytes : F::kRecordBytes, nc, xp + i0 * xs, xs, out);
          const int64_t lo = std::max(r0, g * 16), hi = std::min(r1, g * 16 + 16);
          for (int64_t j = 0; j < kTileRows; ++j)
            for (int64_t r = lo; r < hi; ++r) y[(i0 + j) * ldy + r] = out[j][r - g * 16];
        }
    }
  }
  if (whole < m) vnni_prepared<F>(w, k, xp + whole * xs, m - whole, y + whole * ldy, ldy, r0, r1);
}

template <class F>
PrepareFn vnni_prepare = nullptr;

thread_local Scratch prepared_r16;  // x prepared by the per-call entry point

template <class F>
void amx_r16_rows(const void* w, int64_t k, const float* x, int64_t m, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  char* xp = prepared_r16.bytes(prepared_bytes(m, k));
  vnni_prepare<F>(x, m, k, xp);
  amx_r16_prepared<F>(w, k, xp, m, y, ldy, r0, r1);
}

// The VNNI set's kernels for one row and for fewer than 16, AMX from 16 rows on (both read the same prepared x).
template <class F>
void set_amx_r16(MatvecKernels& s, DType plain) {
  const DTypeKernels& vnni = s.by_dtype[static_cast<size_t>(*interleaved_form(plain))];
  vnni_prepared<F> = vnni.prepared;
  vnni_prepare<F> = vnni.prepare;
  s.set_interleaved(plain, vnni.one_row, amx_r16_rows<F>, vnni.prepare, amx_r16_prepared<F>);
}

}  // namespace

const MatvecKernels& amx_matvec_kernels() {
  static const MatvecKernels k = [] {
    MatvecKernels s = avx512vnni_matvec_kernels();
    s.isa = "avx512amx";
    const DTypeKernels& fma = s.by_dtype[static_cast<size_t>(DType::bf16)];
    fma_rows = fma.rows;
    s.set(DType::bf16, fma.one_row, amx_bf16_rows);
    s.set_prepared(DType::bf16, amx_prepare, amx_bf16_prepared, amx_prepared_size, kTileRows, kAmxMinRows);
    set_amx_r16<AmxQ8_0>(s, DType::q8_0);
    set_amx_r16<AmxQ4<BlockQ4_0>>(s, DType::q4_0);
    set_amx_r16<AmxQ4<BlockQ4_1>>(s, DType::q4_1);
    set_amx_r16<AmxQ4<BlockIQ4_NL>>(s, DType::iq4_nl);
    set_amx_r16<AmxQ45_K<BlockQ4_K>>(s, DType::q4_K);
    set_amx_r16<AmxQ45_K<BlockQ5_K>>(s, DType::q5_K);
    return s;
  }();
  return k;
}

}  // namespace corolla
