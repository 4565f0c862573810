// What a server returns for a span, checked once for every place a client takes it in: hidden states of an
// inference step (relayed, pushed, or a forwarding server's copy), a training forward's output, and a backward's
// gradients. Blocks keep the shape of their input and a gradient has the shape of what it is the gradient of, all
// in f32; a reply that is not so is the server's failure (errc::wrong_output: the client replaces the server) and
// is never copied from or computed with (a hostile server's short tensor joined into a batch would be read past
// its end).
#pragma once

#include <caf/error.hpp>
#include <string>
#include <string_view>

#include "kernels/tensor.hpp"

namespace corolla {

// No error when `got` is f32 of shape `want`; else wrong_output naming the server at `address` and `what` it sent.
caf::error malformed_output(const Tensor& got, const Shape& want, const std::string& address, std::string_view what);

}  // namespace corolla
