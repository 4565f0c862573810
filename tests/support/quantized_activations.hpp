// Activations as the matrix-vector kernels multiply quantized weights with (kernels/cpu/matvec.hpp): each chunk of
// 32 values rounded to the nearest (ties to even) of the levels d * q, q in -127..127, d = max|x| / 127. Written
// from that rule, apart from the kernels, so that a test's reference can apply it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace corolla::test {

inline std::vector<float> activations_as_quantized(const float* x, int64_t k) {
  std::vector<float> out(static_cast<size_t>(k));
  for (int64_t c = 0; c < k; c += 32) {
    float amax = 0;
    for (int64_t i = c; i < c + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.f, id = amax > 0 ? 127.f / amax : 0.f;
    for (int64_t i = c; i < c + 32; ++i) out[static_cast<size_t>(i)] = d * std::nearbyint(x[i] * id);
  }
  return out;
}

}  // namespace corolla::test
