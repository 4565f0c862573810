// Conversions of the low-bit GGUF formats q2_K, q3_K and iq4_nl (their layouts: dtype.hpp), for to_f32 / from_f32.
// The quantizers are a plain fit (each sub-block's range, then the super-block's f16 scales), a valid encoding but
// not llama-quantize's search for the least error; GGUF files bring their own.
#pragma once

#include <cstdint>

#include "kernels/dtype.hpp"

namespace corolla {

void dequant_q2_K(const BlockQ2_K& b, float* y);              // 256 values
void dequant_q3_K(const BlockQ3_K& b, float* y);              // 256 values
void dequant_iq4_nl(const void* src, float* dst, int64_t n);  // n a multiple of 32

void quantize_q2_K(const float* x, BlockQ2_K& b);
void quantize_q3_K(const float* x, BlockQ3_K& b);
void quantize_iq4_nl(const float* src, void* dst, int64_t n);

}  // namespace corolla
