// How messages write a span of blocks: as the flags take it (--block_indices FIRST:LAST), LAST excluded, so that
// what a message names can be given back to a flag as it is.
#pragma once

#include <cstdint>
#include <string>

namespace corolla {

inline std::string block_span(int64_t first, int64_t last) {
  return std::to_string(first) + ":" + std::to_string(last);
}

}  // namespace corolla
