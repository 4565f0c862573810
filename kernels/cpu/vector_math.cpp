#include "kernels/cpu/vector_math.hpp"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "kernels/cpu/matvec.hpp"

namespace corolla {
namespace {

void softmax_row_scalar(float* p, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, p[i]);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (p[i] = std::exp(p[i] - mx));
  const float inv = 1.f / sum;
  for (int64_t i = 0; i < n; ++i) p[i] *= inv;
}

void silu_mul_scalar(const float* g, const float* u, float* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
}

void exp_shifted_scalar(const float* x, float shift, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(x[i] - shift);
}

}  // namespace

const VectorKernels& scalar_vector_kernels() {
  static const VectorKernels k{.isa = "scalar",
                               .softmax_row = softmax_row_scalar,
                               .silu_mul = silu_mul_scalar,
                               .exp_shifted = exp_shifted_scalar};
  return k;
}

namespace {

// The vector kernels of a matrix-vector set's ISA (VNNI and AMX add nothing they use).
const VectorKernels& vector_kernels_for(std::string_view isa) {
#if defined(COROLLA_HAVE_X86_KERNELS)
  if (isa.starts_with("avx512")) return avx512_vector_kernels();
  if (isa == "avx2") return avx2_vector_kernels();
#endif
  return scalar_vector_kernels();
}

}  // namespace

std::vector<const VectorKernels*> available_vector_kernels() {
  std::vector<const VectorKernels*> sets;
  for (const MatvecKernels* m : available_matvec_kernels()) {
    const VectorKernels* v = &vector_kernels_for(m->isa);
    if (sets.empty() || sets.back() != v) sets.push_back(v);
  }
  return sets;
}

const VectorKernels& best_vector_kernels() {
  static const VectorKernels& chosen = vector_kernels_for(best_matvec_kernels().isa);
  return chosen;
}

}  // namespace corolla
