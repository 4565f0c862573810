// Elementwise kernels that need exp(): softmax rows (attention, Backend::softmax), the SiLU gate of the MLP and
// the sampler's weights over a whole vocabulary (model/sampling.cpp).
// A prefill evaluates exp() tens of millions of times per block, where the C library's scalar expf() costs a few
// percent of the whole forward; the SIMD sets use a polynomial exp with about 2 ulp of error instead.
//
// Scalar, AVX2 and AVX-512 sets, chosen with the matrix-vector kernels (the same CPU check and COROLLA_ISA cap);
// only vector_math_avx2.cpp and vector_math_avx512.cpp are compiled with ISA flags.
#pragma once

#include <cstdint>
#include <vector>

namespace corolla {

struct VectorKernels {
  const char* isa;  // "scalar", "avx2", "avx512"
  // In place over p[0, n): p = exp(p - max p) / sum.
  void (*softmax_row)(float* p, int64_t n);
  // out[i] = silu(gate[i]) · up[i] = gate[i] / (1 + exp(-gate[i])) · up[i]; out may alias gate or up.
  void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n);
  // out[i] = exp(x[i] - shift) for i < n; out may alias x.
  void (*exp_shifted)(const float* x, float shift, float* out, int64_t n);
};

const VectorKernels& scalar_vector_kernels();
#if defined(COROLLA_HAVE_X86_KERNELS)
// Call them only on a CPU that runs them.
const VectorKernels& avx2_vector_kernels();
const VectorKernels& avx512_vector_kernels();
#endif

// Every set this CPU runs, scalar first (the instruction sets of available_matvec_kernels()).
std::vector<const VectorKernels*> available_vector_kernels();
// The set of the instruction set best_matvec_kernels() chose.
const VectorKernels& best_vector_kernels();

}  // namespace corolla
