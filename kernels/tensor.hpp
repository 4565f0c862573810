// Tensor: a typed, shaped, contiguous view over storage that someone owns.
//
// The storage may be a heap buffer (Tensor::empty), a memory-mapped weight file (Tensor::view with the mapping as
// keep-alive), or device memory owned by a backend. Copies of a Tensor share the storage; nothing is copied
// unless a function says so. Row-major, no strides: every kernel may assume contiguity.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "kernels/dtype.hpp"

namespace corolla {

enum class Device : uint8_t { cpu, cuda };

class Shape {
 public:
  static constexpr int kMaxDims = 4;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i < 0 ? i + rank_ : i]; }
  int64_t numel() const;
  // The element count, or nullopt when the product overflows int64: what shapes read from outside (the wire,
  // model files) are counted with before anything trusts numel().
  std::optional<int64_t> checked_numel() const;
  bool operator==(const Shape& o) const;
  std::string str() const;  // "[2, 3, 4]"
  friend std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

class Tensor {
 public:
  Tensor() = default;

  // A new zero-filled host tensor, 64-byte aligned.
  static Tensor empty(DType dtype, Shape shape);
  // A view over memory owned by `keep_alive` (a mapping, a message buffer, a device allocation).
  static Tensor view(void* data, DType dtype, Shape shape, std::shared_ptr<const void> keep_alive,
                     Device device = Device::cpu);

  void* data() const { return data_; }
  template <class T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  // The product of all dimensions but the last (1 for a scalar): the "rows" of the backends' operations, counted
  // without dividing by a last dimension that may be 0.
  int64_t rows() const {
    int64_t r = 1;
    for (int i = 0; i + 1 < rank(); ++i) r *= dim(i);
    return r;
  }
  int64_t nbytes() const { return storage_bytes(dtype_, numel()); }
  bool defined() const { return data_ != nullptr || numel() == 0; }
  const std::shared_ptr<const void>& owner() const { return owner_; }

  // Same storage, another shape with the same number of elements.
  Tensor reshaped(Shape shape) const;
  // Rows [begin, end) of the outermost dimension, sharing storage.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // A host copy with the same dtype (for host tensors: a deep copy).
  Tensor clone() const;
  // A host f32 copy of a host tensor of any dtype.
  Tensor to_f32() const;
  // A host copy converted to `dtype` (quantizing if asked).
  Tensor cast(DType dtype) const;

  std::string describe() const;  // "bf16[2048, 5632]"

 private:
  std::shared_ptr<const void> owner_;
  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
  Shape shape_;
};

}  // namespace corolla
