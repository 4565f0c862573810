// The 6-bit scale and min of sub-block j of a q4_K / q5_K super-block (layout in dtype.hpp). Internal linkage on
// purpose: the kernel files compiled with their own ISA flags include it too, and each must keep its own copy (an
// inline function with external linkage would let the linker pick one compiled for AVX-512 for everyone).
#pragma once

#include <cstdint>

namespace corolla {
namespace {

inline void k_scale_min(const uint8_t* s, int64_t j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

}  // namespace
}  // namespace corolla
