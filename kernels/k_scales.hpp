// The 6-bit scale and min of sub-block j of a q4_K / q5_K super-block (layout in dtype.hpp). Internal linkage on
// purpose: the kernel files compiled with their own ISA flags include it too, and each must keep its own copy (an
// inline function with external linkage would let the linker pick one compiled for AVX-512 for everyone).
#pragma once

#include <cstdint>
#include <cstring>

namespace corolla {
namespace {

// Branch-free: the eight scales (and mins) are assembled as the bytes of one 64-bit word, four at a time.
inline void k_scale_min(const uint8_t* s, int64_t j, int& sc, int& m) {
  uint32_t a, b, c;  // s[0..3], s[4..7], s[8..11]
  std::memcpy(&a, s, 4);
  std::memcpy(&b, s + 4, 4);
  std::memcpy(&c, s + 8, 4);
  const uint64_t scales = (a & 0x3f3f3f3fu) | uint64_t{(c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u)} << 32;
  const uint64_t mins = (b & 0x3f3f3f3fu) | uint64_t{((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u)} << 32;
  sc = static_cast<int>(scales >> (8 * j) & 0xff);
  m = static_cast<int>(mins >> (8 * j) & 0xff);
}

}  // namespace
}  // namespace corolla
