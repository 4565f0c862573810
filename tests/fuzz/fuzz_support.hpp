// What the fuzz targets share: a broken promise stops the run (libFuzzer reports it as a crash, with the input),
// and a reader that takes big-endian numbers from the input until it runs out (zeros after that).
#pragma once

#include <cstddef>
#include <cstdint>

namespace corolla::fuzz {

inline void require(bool ok) {
  if (!ok) __builtin_trap();
}

struct input {
  const uint8_t* p;
  size_t n;
  uint64_t take(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes && n > 0; ++i, ++p, --n) v = (v << 8) | *p;
    return v;
  }
};

}  // namespace corolla::fuzz
