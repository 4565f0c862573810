// The rule by which quantized weights see their activations in the matrix-vector kernels (llama.cpp's q8_0
// activation blocks, rounding ties to even): each chunk of 32 values of x becomes int8 levels
// q = round(x * 127 / max|x|), |q| <= 127, with the scale d = max|x| / 127, so x ~ d * q. The scalar kernels use this
// function; the SIMD ones carry their own copy of the rule (a shared inline function would be compiled for their
// ISA), which tests/unit/test_matvec.cpp holds to this one.
#pragma once

#include <cstdint>

namespace corolla {

inline constexpr int64_t kActivationChunk = 32;

// One chunk of 32 values: its levels, its scale, and the sum of its levels.
void quantize_activation_chunk(const float* x, int8_t* q, float& d, int32_t& sum);

}  // namespace corolla
