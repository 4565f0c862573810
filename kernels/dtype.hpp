// Element types a Tensor can hold, their storage sizes, and scalar conversions.
//
// Quantized types follow GGUF's block layouts (llama.cpp's ggml), so GGUF weights are used in place:
//   q8_0: 32 values = f16 scale d + 32 x int8            (34 bytes), x = d * q
//   q4_0: 32 values = f16 scale d + 16 bytes of nibbles  (18 bytes), x = d * (q - 8)
//   q4_1: 32 values = f16 scale d + f16 min m + nibbles  (20 bytes), x = d * q + m
//   q5_0: 32 values = f16 scale d + 32 fifth bits qh + nibbles  (22 bytes), x = d * (q - 16)
//   q5_1: 32 values = f16 d + f16 min m + qh + nibbles         (24 bytes), x = d * q + m
// In q4 and q5 blocks byte j holds value j in its low nibble and value j + 16 in its high nibble; bit i of the
// little-endian 32-bit qh is the fifth bit of value i.
//
//   iq4_nl: 32 values = f16 scale d + nibbles as q4_0's (18 bytes), x = d * kIq4nlValues[q]
// K-quants (llama.cpp's Q4_K_M / Q5_K_M / Q6_K files) pack 256 values per super-block of 8 or 16 sub-blocks:
//   q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales sc[8] and mins m[8], 128 bytes of nibbles (144 bytes);
//         sub-block j (32 values) is x = d * sc[j] * q - dmin * m[j], q in 0..15. Bytes 32i..32i+31 of qs hold
//         sub-block 2i in their low nibbles and sub-block 2i + 1 in their high nibbles.
//   q5_K: as q4_K plus qh[32] (176 bytes): bit j of qh[l] is the fifth bit of value l of sub-block j, q in 0..31.
//   q6_K: ql[128] low nibbles, qh[64] 2-bit highs, int8 scales[16], f16 d (210 bytes): two halves of 128 values;
//         in half h, value l (l < 32) of quarter t (t < 4) is q = (ql[64h + 32(t & 1) + l] >> 4(t >> 1) & 15) |
//         (qh[32h + l] >> 2t & 3) << 4, and x = d * scales[8h + 2t + l / 16] * (q - 32).
//   q2_K: scales[16], qs[64], f16 d, f16 dmin (84 bytes); 16 sub-blocks of 16 values, sub-block j has x =
//         d * (scales[j] & 15) * q - dmin * (scales[j] >> 4), q in 0..3.
//   q3_K: hmask[32], qs[64], 12 bytes of 6-bit scales, f16 d (110 bytes); 16 sub-blocks of 16 values, x =
//         d * (scale[j] - 32) * (q - 4), q in 0..7 (q3_k_scale below).
//   In both, value l (l < 32) of quarter t (t < 4) of half h has its low two bits at qs[32h + l] >> 2t & 3 and
//   belongs to sub-block 8h + 2t + l / 16; q3_K's third bit is hmask[l] >> (4h + t) & 1.
// The 6-bit scales of q4_K/q5_K: for j < 4 sc[j] = s[j] & 63, m[j] = s[j + 4] & 63; for j >= 4 the low four bits
// come from s[j + 4] (sc: low nibble, m: high nibble) and the top two from s[j - 4] >> 6 (sc) and s[j] >> 6 (m).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace corolla {

// The *_r16 dtypes are q4_0, q8_0, q4_1, iq4_nl and the K-quants with their rows interleaved by 16, a layout of the
// CPU kernels (kernels/interleaved_rows.hpp): the same bytes per row on average, never in a file or on the wire.
enum class DType : uint8_t {
  f32,
  f16,
  bf16,
  q8_0,
  q4_0,
  q4_1,
  i32,
  i64,
  q4_K,
  q5_K,
  q6_K,
  q5_0,
  q5_1,
  q4_0_r16,
  q8_0_r16,
  q4_K_r16,
  q5_K_r16,
  q6_K_r16,
  q4_1_r16,
  q2_K,
  q3_K,
  iq4_nl,
  q2_K_r16,
  q3_K_r16,
  iq4_nl_r16
};
inline constexpr size_t kDTypeCount = static_cast<size_t>(DType::iq4_nl_r16) + 1;

inline constexpr int64_t kQuantBlock = 32;
inline constexpr int64_t kSuperBlock = 256;  // values per K-quant block

struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQuantBlock];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQuantBlock / 2];
};
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQuantBlock / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQuantBlock / 2];
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);

struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kSuperBlock / 2];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kSuperBlock / 8];
  uint8_t qs[kSuperBlock / 2];
};
struct BlockQ6_K {
  uint8_t ql[kSuperBlock / 2];
  uint8_t qh[kSuperBlock / 4];
  int8_t scales[kSuperBlock / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);
struct BlockQ2_K {
  uint8_t scales[kSuperBlock / 16];  // sub-block j: low nibble the scale, high nibble the min
  uint8_t qs[kSuperBlock / 4];
  uint16_t d;
  uint16_t dmin;
};
struct BlockQ3_K {
  uint8_t hmask[kSuperBlock / 8];
  uint8_t qs[kSuperBlock / 4];
  uint8_t scales[12];
  uint16_t d;
};
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockIQ4_NL) == 18);

// iq4_nl's 16 levels (a non-uniform grid, denser near zero).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// q3_K's 6-bit scale of sub-block j (0..15), before its offset of 32: the low four bits are the low (j < 8) or high
// nibble of packed[j % 8], the top two bits are bits 2(j / 4).. of packed[8 + j % 4].
inline int q3_k_scale(const uint8_t (&packed)[12], int j) {
  const int low = j < 8 ? packed[j] & 15 : packed[j - 8] >> 4;
  return low | ((packed[8 + j % 4] >> (2 * (j / 4))) & 3) << 4;
}

// The eight 6-bit scales and mins of a q4_K / q5_K super-block (see above).
void unpack_k_scales(const uint8_t (&packed)[12], uint8_t (&sc)[8], uint8_t (&m)[8]);

// Elements per storage block (1 for plain types, 32 for q8_0/q4_0/q4_1/q5_0/q5_1/iq4_nl, 256 for the K-quants).
int64_t block_elems(DType t);
// Bytes per storage block.
int64_t block_bytes(DType t);
// Bytes needed for n elements; n must be a multiple of block_elems(t).
int64_t storage_bytes(DType t, int64_t n);
bool is_quantized(DType t);
std::string_view dtype_name(DType t);
// The dtypes weights are stored and served in (files, --dtype), and their names as a list for messages.
std::span<const DType> weight_dtypes();
std::string weight_dtype_list();
// A name of weight_dtypes() or i32 / i64 (float32, float16, bfloat16 too); never an interleaved dtype.
std::optional<DType> parse_dtype(std::string_view name);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of `src` (type t) to f32. n must be a multiple of block_elems(t). Interleaved dtypes are
// refused (their rows are not contiguous: interleaved_row_to_f32 converts them).
void to_f32(DType t, const void* src, float* dst, int64_t n);
// Converts n f32 values to type t, not an interleaved one (quantizing as llama.cpp's reference quantizers do; the
// K-quants and iq4_nl with a plain fit per sub-block, a valid encoding but not llama-quantize's search for the least
// error).
void from_f32(DType t, const float* src, void* dst, int64_t n);

}  // namespace corolla
