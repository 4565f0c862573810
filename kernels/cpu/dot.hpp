// A portable f32 dot product with eight partial sums, which the compiler vectorises without reassociating
// floating-point math (so results do not depend on -ffast-math).
#pragma once

#include <cstdint>

namespace corolla {

inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  for (float v : acc) s += v;
  return s;
}

}  // namespace corolla
