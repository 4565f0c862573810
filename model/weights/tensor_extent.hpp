// Where a weight file's header says its tensors lie. Headers come from outside: each tensor's size is counted
// without overflow from its type and shape, and no two tensors may share bytes (a copy-on-load conversion of one
// would otherwise be a write into the other's data).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"

namespace corolla {

// The bytes of a tensor of `dtype` and `shape`, or nullopt when its element count or size overflows int64 or its
// rows do not fill whole quantization blocks.
std::optional<int64_t> checked_tensor_bytes(DType dtype, const Shape& shape);

struct TensorExtent {
  std::string name;
  uint64_t begin = 0;  // byte offsets from the start of the file, end excluded
  uint64_t end = 0;
};

// Throws std::runtime_error "PATH: tensors 'A' and 'B' overlap (...)" for the first pair that shares a byte.
void check_no_overlap(std::vector<TensorExtent> extents, const std::string& path);

}  // namespace corolla
