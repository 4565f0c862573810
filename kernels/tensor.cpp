#include "kernels/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "kernels/interleaved_rows.hpp"

namespace corolla {

Shape::Shape(std::initializer_list<int64_t> dims) {
  if (dims.size() > kMaxDims) throw std::invalid_argument("tensor rank above 4");
  for (int64_t d : dims) {
    if (d < 0) throw std::invalid_argument("negative tensor dimension");
    dims_[rank_++] = d;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

std::optional<int64_t> Shape::checked_numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i)
    if (__builtin_mul_overflow(n, dims_[i], &n)) return std::nullopt;
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + "]";
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  const size_t bytes = static_cast<size_t>(storage_bytes(dtype, shape.numel()));
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded ? rounded : 64);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  Tensor t;
  t.owner_ = std::shared_ptr<const void>(p, [](const void* q) { std::free(const_cast<void*>(q)); });
  t.data_ = p;
  t.dtype_ = dtype;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::view(void* data, DType dtype, Shape shape, std::shared_ptr<const void> keep_alive, Device device) {
  Tensor t;
  t.owner_ = std::move(keep_alive);
  t.data_ = data;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.device_ = device;
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  if (shape.numel() != numel()) throw std::invalid_argument("cannot reshape " + describe() + " to " + shape.str());
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  if (rank() == 0 || begin < 0 || end > dim(0) || begin > end)
    throw std::out_of_range("row slice [" + std::to_string(begin) + ", " + std::to_string(end) + ") of " + describe());
  const int64_t row = numel() / (dim(0) ? dim(0) : 1);
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + storage_bytes(dtype_, row * begin);
  std::array<int64_t, Shape::kMaxDims> d{};
  for (int i = 0; i < rank(); ++i) d[i] = dim(i);
  d[0] = end - begin;
  switch (rank()) {
    case 1: t.shape_ = Shape{d[0]}; break;
    case 2: t.shape_ = Shape{d[0], d[1]}; break;
    case 3: t.shape_ = Shape{d[0], d[1], d[2]}; break;
    default: t.shape_ = Shape{d[0], d[1], d[2], d[3]}; break;
  }
  return t;
}

Tensor Tensor::clone() const {
  if (device_ != Device::cpu) throw std::logic_error("clone() of a device tensor: use the backend");
  Tensor t = empty(dtype_, shape_);
  std::memcpy(t.data_, data_, static_cast<size_t>(nbytes()));
  return t;
}

Tensor Tensor::to_f32() const { return cast(DType::f32); }

Tensor Tensor::cast(DType dtype) const {
  if (device_ != Device::cpu) throw std::logic_error("cast() of a device tensor: use the backend");
  if (dtype == dtype_) return clone();
  Tensor t = empty(dtype, shape_);
  if (is_interleaved(dtype_)) {  // row by row back to f32
    const int64_t k = shape_[-1], rows = numel() / k;
    Tensor f = dtype == DType::f32 ? t : empty(DType::f32, shape_);
    for (int64_t r = 0; r < rows; ++r) interleaved_row_to_f32(dtype_, data_, k, r, 0, k, f.data_as<float>() + r * k);
    if (dtype != DType::f32) from_f32(dtype, f.data_as<const float>(), t.data_, numel());
  } else if (dtype_ == DType::f32) {
    from_f32(dtype, static_cast<const float*>(data_), t.data_, numel());
  } else if (dtype == DType::f32) {
    corolla::to_f32(dtype_, data_, static_cast<float*>(t.data_), numel());
  } else {
    Tensor f = to_f32();
    from_f32(dtype, f.data_as<const float>(), t.data_, numel());
  }
  return t;
}

std::string Tensor::describe() const { return std::string(dtype_name(dtype_)) + shape_.str(); }

}  // namespace corolla
