#include "actors/client/server_output.hpp"

#include "actors/protocol/errors.hpp"

namespace corolla {

caf::error malformed_output(const Tensor& got, const Shape& want, const std::string& address, std::string_view what) {
  if (got.dtype() == DType::f32 && got.shape() == want) return {};
  return make_error(errc::wrong_output, "server " + address + " returned " + std::string(what) + " " + got.describe() +
                                            ", expected f32" + want.str());
}

}  // namespace corolla
