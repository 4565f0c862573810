// Element types a Tensor can hold, their storage sizes, and scalar conversions.
//
// Quantized types follow GGUF's block layouts (llama.cpp's ggml), so GGUF weights are used in place:
//   q8_0: 32 values = f16 scale d + 32 x int8            (34 bytes), x = d * q
//   q4_0: 32 values = f16 scale d + 16 bytes of nibbles  (18 bytes), x = d * (q - 8)
//   q4_1: 32 values = f16 scale d + f16 min m + nibbles  (20 bytes), x = d * q + m
// In q4 blocks byte j holds value j in its low nibble and value j + 16 in its high nibble.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace corolla {

enum class DType : uint8_t { f32, f16, bf16, q8_0, q4_0, q4_1, i32, i64 };

inline constexpr int64_t kQuantBlock = 32;

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
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);

// Elements per storage block (1 for plain types, 32 for quantized ones).
int64_t block_elems(DType t);
// Bytes per storage block.
int64_t block_bytes(DType t);
// Bytes needed for n elements; n must be a multiple of block_elems(t).
int64_t storage_bytes(DType t, int64_t n);
bool is_quantized(DType t);
std::string_view dtype_name(DType t);
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

// Converts n elements of `src` (type t) to f32. n must be a multiple of block_elems(t).
void to_f32(DType t, const void* src, float* dst, int64_t n);
// Converts n f32 values to type t (quantizing as llama.cpp's reference quantizers do).
void from_f32(DType t, const float* src, void* dst, int64_t n);

}  // namespace corolla
