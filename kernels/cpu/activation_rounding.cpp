#include "kernels/cpu/activation_rounding.hpp"

#include <algorithm>
#include <cmath>

namespace corolla {

void quantize_activation_chunk(const float* x, int8_t* q, float& d, int32_t& sum) {
  float amax = 0;
  for (int64_t i = 0; i < kActivationChunk; ++i) amax = std::max(amax, std::fabs(x[i]));
  d = amax / 127.f;
  const float id = amax > 0 ? 127.f / amax : 0.f;
  sum = 0;
  for (int64_t i = 0; i < kActivationChunk; ++i) {
    const float r = std::nearbyint(x[i] * id);  // ties to even, as the SIMD conversions round
    q[i] = static_cast<int8_t>(r >= 127.f ? 127 : r <= -127.f ? -127 : r == r ? static_cast<int>(r) : 0);
    sum += q[i];
  }
}

}  // namespace corolla
