// Matrix-vector products for single-token decode: y[r] = dot(w[r, :], x) for rows r in [row_begin, row_end).
// They read weights in their stored dtype (bf16, f16, q8_0, q4_0, q4_1, f32) and never convert them up front:
// decode is bound by memory bandwidth, so the weight bytes read per token are what counts.
#pragma once

#include <cstdint>

#include "kernels/dtype.hpp"

namespace corolla {

using MatvecFn = void (*)(const void* w, int64_t k, const float* x, float* y, int64_t row_begin, int64_t row_end);

struct MatvecKernels {
  const char* isa;  // "scalar", "avx2", "avx512"
  MatvecFn f32, f16, bf16, q8_0, q4_0, q4_1;
  MatvecFn for_dtype(DType t) const;
};

const MatvecKernels& scalar_matvec_kernels();
// The best kernels this CPU runs (checked once at run time). COROLLA_ISA=scalar|avx2|avx512 caps the choice.
const MatvecKernels& best_matvec_kernels();

}  // namespace corolla
