#include "model/weights/tensor_extent.hpp"

#include <algorithm>
#include <stdexcept>

namespace corolla {

std::optional<int64_t> checked_tensor_bytes(DType dtype, const Shape& shape) {
  const auto n = shape.checked_numel();
  if (!n) return std::nullopt;
  const int64_t row = shape.rank() == 0 ? 1 : shape[shape.rank() - 1];
  if (row % block_elems(dtype) != 0) return std::nullopt;
  int64_t bytes = 0;
  if (__builtin_mul_overflow(*n / block_elems(dtype), block_bytes(dtype), &bytes)) return std::nullopt;
  return bytes;
}

void check_no_overlap(std::vector<TensorExtent> extents, const std::string& path) {
  std::sort(extents.begin(), extents.end(), [](const TensorExtent& a, const TensorExtent& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Empty tensors hold no bytes and overlap nothing.
  const TensorExtent* last = nullptr;
  for (const auto& e : extents) {
    if (e.begin == e.end) continue;
    if (last && e.begin < last->end)
      throw std::runtime_error(path + ": tensors '" + last->name + "' and '" + e.name + "' overlap (bytes " +
                               std::to_string(last->begin) + ".." + std::to_string(last->end) + " and " +
                               std::to_string(e.begin) + ".." + std::to_string(e.end) + ")");
    if (!last || e.end > last->end) last = &e;
  }
}

}  // namespace corolla
