// GELU and its derivative, one formula for every backend (the CPU's loops and the CUDA kernels call these), in f32
// as PyTorch computes them.
#pragma once

#include <math.h>

#include "kernels/backend.hpp"

namespace corolla {

// √(2/π) and the cubic coefficient of the tanh approximation.
inline constexpr float kGeluTanhScale = 0.7978845608028654f;
inline constexpr float kGeluTanhCubic = 0.044715f;

COROLLA_HOST_DEVICE inline float gelu_value(float x, Gelu form) {
  if (form == Gelu::tanh) return 0.5f * x * (1.0f + tanhf(kGeluTanhScale * (x + kGeluTanhCubic * x * x * x)));
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

// d gelu(x) / dx.
COROLLA_HOST_DEVICE inline float gelu_derivative(float x, Gelu form) {
  if (form == Gelu::tanh) {
    const float t = tanhf(kGeluTanhScale * (x + kGeluTanhCubic * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluTanhScale * (1.0f + 3.0f * kGeluTanhCubic * x * x);
  }
  const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
  const float pdf = expf(-0.5f * x * x) * 0.3989422804014327f;  // 1/√(2π)
  return cdf + x * pdf;
}

}  // namespace corolla
