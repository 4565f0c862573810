#include "kernels/backend.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

namespace corolla {

#ifdef COROLLA_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(int device_index);  // kernels/cuda/cuda_backend.cu
bool cuda_device_present();
#endif

bool cuda_available() {
#ifdef COROLLA_HAVE_CUDA
  return cuda_device_present();
#else
  return false;
#endif
}

void Backend::copy_host_rows(const Tensor& src, int64_t src_row, Tensor& dst, int64_t dst_row, int64_t rows) {
  const int64_t row_bytes = storage_bytes(src.dtype(), src.dim(-1));
  std::memcpy(static_cast<char*>(dst.data()) + dst_row * row_bytes,
              static_cast<const char*>(src.data()) + src_row * row_bytes, static_cast<size_t>(rows * row_bytes));
}

std::unique_ptr<Backend> make_backend(std::string_view device, int cpu_threads) {
  if (device == "cpu") return make_cpu_backend(cpu_threads);
  if (device.substr(0, 4) == "cuda") {
    int index = 0;
    if (device.size() > 5 && device[4] == ':') index = std::stoi(std::string(device.substr(5)));
#ifdef COROLLA_HAVE_CUDA
    if (!cuda_device_present()) throw std::runtime_error("device '" + std::string(device) + "': no CUDA GPU found");
    return make_cuda_backend(index);
#else
    (void)index;
    throw std::runtime_error("device '" + std::string(device) + "': this build has no CUDA backend (nvcc was absent)");
#endif
  }
  throw std::runtime_error("unknown device '" + std::string(device) + "' (expected cpu, cuda or cuda:N)");
}

}  // namespace corolla
