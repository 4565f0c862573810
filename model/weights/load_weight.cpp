#include "model/weights/load_weight.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

namespace corolla {
namespace {

Tensor checked(const WeightSource& src, const std::string& name, Shape expected) {
  Tensor t = src.get(name);
  if (!(t.shape() == expected))
    throw std::runtime_error(src.origin() + ": tensor '" + name + "' has shape " + t.shape().str() + ", expected " +
                             expected.str());
  return t;
}

// The matrix `name` in `dtype` (nullopt: as stored), on the host.
Tensor host_matrix(const WeightSource& src, const std::string& name, Shape expected, std::optional<DType> dtype,
                   const Backend& backend) {
  Tensor t = checked(src, name, expected);
  if (t.dtype() == DType::i32 || t.dtype() == DType::i64)
    throw std::runtime_error(src.origin() + ": tensor '" + name + "' holds integers (" + t.describe() + ")");
  const DType want = dtype.value_or(t.dtype());
  if (!backend.supports_weight(want))
    throw std::runtime_error(backend.name() + " cannot compute with " + std::string(dtype_name(want)) +
                             " weights (a --dtype it supports, e.g. f16 or q8_0, converts them on loading)");
  if (want != t.dtype()) {
    const int64_t row = t.dim(t.rank() - 1);
    if (row % block_elems(want) != 0)
      throw std::runtime_error(src.origin() + ": tensor '" + name + "' has rows of " + std::to_string(row) +
                               " values, which do not fill whole " + std::string(dtype_name(want)) + " blocks of " +
                               std::to_string(block_elems(want)) + "; choose another --dtype");
    t = t.cast(want);
  }
  return t;
}

// `placed`, what the backend made of `host`; when that is a copy, the source's mapped pages of `host` go.
Tensor released_if_copied(const WeightSource& src, const Tensor& host, Tensor placed) {
  if (placed.data() != host.data()) src.release(host);
  return placed;
}

// Rows of t (any dtype: whole rows are moved as bytes) in `order`.
Tensor reordered_rows(const Tensor& t, std::span<const int64_t> order, const std::string& what) {
  const int64_t rows = t.dim(0);
  if (static_cast<int64_t>(order.size()) != rows) throw std::logic_error(what + ": a row order of the wrong length");
  const int64_t row_bytes = t.nbytes() / rows;
  Tensor out = Tensor::empty(t.dtype(), t.shape());
  const auto* src = static_cast<const char*>(t.data());
  auto* dst = static_cast<char*>(out.data());
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t from = order[static_cast<size_t>(i)];
    if (from < 0 || from >= rows) throw std::logic_error(what + ": a row order naming a row out of range");
    std::memcpy(dst + i * row_bytes, src + from * row_bytes, static_cast<size_t>(row_bytes));
  }
  return out;
}

}  // namespace

Tensor load_matrix(const WeightSource& src, const std::string& name, Shape expected, std::optional<DType> dtype,
                   Backend& backend, std::span<const int64_t> order) {
  const Tensor t = host_matrix(src, name, expected, dtype, backend);
  const Tensor placed = backend.upload_weight(reordered_rows(t, order, src.origin() + ": " + name));
  src.release(t);
  return placed;
}

Tensor load_vector(const WeightSource& src, const std::string& name, int64_t expected, Backend& backend,
                   std::span<const int64_t> order) {
  Tensor t = checked(src, name, Shape{expected});
  return backend.upload(reordered_rows(t.dtype() == DType::f32 ? t : t.to_f32(), order, src.origin() + ": " + name));
}

Tensor load_matrix(const WeightSource& src, const std::string& name, Shape expected, std::optional<DType> dtype,
                   Backend& backend) {
  const Tensor t = host_matrix(src, name, expected, dtype, backend);
  return released_if_copied(src, t, backend.upload_weight(t));
}

Tensor load_table(const WeightSource& src, const std::string& name, Shape expected, std::optional<DType> dtype,
                  Backend& backend) {
  const Tensor t = host_matrix(src, name, expected, dtype, backend);
  return released_if_copied(src, t, backend.upload(t));
}

Tensor load_vector(const WeightSource& src, const std::string& name, int64_t expected, Backend& backend) {
  Tensor t = checked(src, name, Shape{expected});
  return backend.upload(t.dtype() == DType::f32 ? t : t.to_f32());
}

NormPlusOne load_norm_plus_one(const WeightSource& src, const std::string& name, int64_t expected, Backend& backend) {
  const Tensor t = checked(src, name, Shape{expected}), stored = t.dtype() == DType::f32 ? t : t.to_f32();
  Tensor plus_one = stored.clone();  // a copy: the source may be a read-only mapping
  float* w = plus_one.data_as<float>();
  for (int64_t i = 0; i < plus_one.numel(); ++i) w[i] = 1.0f + w[i];
  return {backend.upload(stored), backend.upload(plus_one)};
}

}  // namespace corolla
