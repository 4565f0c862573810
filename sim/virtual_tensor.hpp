// Virtual tensors: shape and dtype without storage of their own, for the simulator's big model shapes (a
// BLOOM-176B block holds gigabytes of weights and KV cache that the cost model never reads). Every virtual
// tensor is a view into one read-only anonymous mapping reserved once per process (at an address of its own
// until the mapping wraps round): reading it gives zeros (the
// kernel's shared zero page, so nothing is committed), and no physical memory is used whatever its size.
// Writing into one faults: only code that does no arithmetic (the cost backend) may be handed them as outputs.
#pragma once

#include <cstdint>

#include "kernels/tensor.hpp"

namespace corolla::sim {

// Where a virtual tensor stands for memory: on the modelled device, or in the host memory a server assembles its
// inputs in (which the cost model charges a copy to upload). Each has a zero mapping of its own.
enum class VirtualSpace { device, host };

// A tensor of `dtype` and `shape` over the space's zero mapping. Throws std::length_error when it is larger than
// the mapping (kVirtualBytes).
Tensor virtual_tensor(DType dtype, Shape shape, VirtualSpace space = VirtualSpace::device);
// Whether `t` lies in a zero mapping (either space), and in the host's.
bool is_virtual(const Tensor& t);
bool is_virtual_host(const Tensor& t);

constexpr uint64_t kVirtualBytes = uint64_t{64} << 30;  // address space only: 64 GiB per space, none committed

}  // namespace corolla::sim
