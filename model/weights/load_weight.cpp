#include "model/weights/load_weight.hpp"

#include <stdexcept>

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
    throw std::runtime_error(backend.name() + " cannot compute with " + std::string(dtype_name(want)) + " weights");
  if (want != t.dtype()) t = t.cast(want);
  return t;
}

// `placed`, what the backend made of `host`; when that is a copy, the source's mapped pages of `host` go.
Tensor released_if_copied(const WeightSource& src, const Tensor& host, Tensor placed) {
  if (placed.data() != host.data()) src.release(host);
  return placed;
}

}  // namespace

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

}  // namespace corolla
