// Tensor <-> Cap'n Proto. Writing references the tensor's bytes (no copy into the builder); reading returns a
// view into the message's buffer, kept alive by `keep_alive`.
#pragma once

#include <memory>
#include <string>

#include "kernels/tensor.hpp"
#include "schema/tensor.capnp.h"

namespace corolla {

// Throws std::invalid_argument for a tensor not on the host.
void write_tensor(wire::Tensor::Builder b, const Tensor& t, capnp::Orphanage orphanage);
// Checks dtype, rank, dimensions and byte count; on a problem returns an error text naming `what`.
std::string read_tensor(wire::Tensor::Reader r, const std::shared_ptr<const void>& keep_alive, const char* what,
                        Tensor& out);

}  // namespace corolla
