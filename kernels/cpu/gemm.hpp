// y[M, N] = x[M, K] · w[N, K]ᵀ on the CPU for any weight dtype.
// Small M (decode, M <= kMatvecMaxRows) goes through the matrix-vector kernels, reading the weights as stored and
// once for all M rows. Larger M (prefill) goes to
// OpenBLAS sgemm; non-f32 weights are converted to f32 one tile of rows at a time, so the conversion stays in
// cache and costs O(N·K) against the GEMM's O(M·N·K).
#pragma once

#include <cstdint>

#include "kernels/cpu/matvec.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/tensor.hpp"

namespace corolla {

void cpu_matmul(ThreadPool& pool, const float* x, int64_t m, int64_t k, const Tensor& w, float* y);

// Pins OpenBLAS to one thread: Corolla parallelises around it with ThreadPool, whose idle threads block.
void init_blas_single_threaded();

}  // namespace corolla
