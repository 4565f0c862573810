// Gradients of y = x · wᵀ on the CPU: with respect to x for weights of any dtype (block weights, frozen while a
// client trains through them), and with respect to an f32 weight (a client's own head).
#pragma once

#include <cstdint>

#include "kernels/cpu/thread_pool.hpp"
#include "kernels/tensor.hpp"

namespace corolla {

// dx[m, k] = dy[m, n] · w[n, k]. Threads split the k columns of dx (in multiples of the quantization block, so
// each thread dequantizes whole blocks of its part of every weight row) and own them: no reduction between
// threads. Non-f32 weights are converted one tile of rows at a time, as the forward GEMM does.
void cpu_matmul_backward(ThreadPool& pool, const float* dy, int64_t m, const Tensor& w, float* dx);

// dw[n, k] += dy[m, n]ᵀ · x[m, k] for f32 dw; threads split the n rows of dw.
void cpu_matmul_weight_grad(ThreadPool& pool, const float* dy, const float* x, int64_t m, int64_t n, int64_t k,
                            float* dw);

}  // namespace corolla
