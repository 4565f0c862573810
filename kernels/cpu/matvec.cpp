#include "kernels/cpu/matvec.hpp"

#include <stdexcept>
#include <string>

namespace corolla {

MatvecFn MatvecKernels::for_dtype(DType t) const {
  switch (t) {
    case DType::f32: return f32;
    case DType::f16: return f16;
    case DType::bf16: return bf16;
    case DType::q8_0: return q8_0;
    case DType::q4_0: return q4_0;
    case DType::q4_1: return q4_1;
    default: throw std::invalid_argument("no matrix-vector kernel for weights of dtype " + std::string(dtype_name(t)));
  }
}

const MatvecKernels& best_matvec_kernels() {
  static const MatvecKernels& chosen = scalar_matvec_kernels();
  return chosen;
}

}  // namespace corolla
