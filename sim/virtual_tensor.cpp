#include "sim/virtual_tensor.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <string>

namespace corolla::sim {
namespace {

char* reserve() {
  void* p = mmap(nullptr, kVirtualBytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("cannot reserve address space for the simulator's tensors");
  return static_cast<char*>(p);
}

char* zero_region(VirtualSpace space) {
  static char* device = reserve();
  static char* host = reserve();
  return space == VirtualSpace::host ? host : device;
}

bool within(const Tensor& t, VirtualSpace space) {
  const char* p = static_cast<const char*>(t.data());
  const char* base = zero_region(space);
  return p >= base && p < base + kVirtualBytes;
}

}  // namespace

Tensor virtual_tensor(DType dtype, Shape shape, VirtualSpace space) {
  const uint64_t bytes = static_cast<uint64_t>(storage_bytes(dtype, shape.numel()));
  if (bytes > kVirtualBytes)
    throw std::length_error("a simulated tensor of " + shape.str() + " needs " + std::to_string(bytes >> 20) +
                            " MiB, more than the " + std::to_string(kVirtualBytes >> 30) + " GiB reserved");
  // Each tensor at its own address (a bump over the mapping, wrapping round): a pointer tells tensors apart as a
  // real allocation's does (the cost model keeps digests per cache pool by its address).
  static std::mutex mutex;
  static uint64_t next[2] = {0, 0};
  uint64_t& bump = next[space == VirtualSpace::host ? 1 : 0];
  uint64_t at = 0;
  {
    std::lock_guard lock(mutex);
    at = (bump + 63) & ~uint64_t{63};
    if (at + bytes > kVirtualBytes) at = 0;
    bump = at + std::max<uint64_t>(bytes, 64);
  }
  return Tensor::view(zero_region(space) + at, dtype, shape, nullptr);
}

bool is_virtual(const Tensor& t) { return within(t, VirtualSpace::device) || within(t, VirtualSpace::host); }
bool is_virtual_host(const Tensor& t) { return within(t, VirtualSpace::host); }

}  // namespace corolla::sim
