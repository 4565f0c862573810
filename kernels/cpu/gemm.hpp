// y[M, N] = x[M, K] · w[N, K]ᵀ on the CPU for any weight dtype.
// Small M (decode, small batches) goes through the matrix-vector kernels, reading the weights as stored and once
// for all M rows (up to kMatvecMaxRows per pass, in L2-sized tiles beyond that). Larger M (prefill) goes to
// oneDNN's f32 GEMM run single-threaded in each chunk of the pool. Weights of any dtype are packed one tile of
// rows at a time into f32 panels in oneDNN's own blocked layout (PackFn, matvec.hpp): conversion and layout in
// one pass that stays in cache, O(N·K) against the GEMM's O(M·N·K), after which oneDNN's brgemm kernels read
// the tile as they want it instead of copying it once more. Where oneDNN has no such kernel (no AVX-512), tiles
// are converted to plain f32 rows for its strided GEMM. On this project's CPUs oneDNN's bf16 matmul is slower
// than its f32 one (docs/PERFORMANCE.md), so prefill computes in f32 whatever the weights' dtype. The limits
// between the paths were measured with bench_gemm (docs/PERFORMANCE.md). Quantized weights multiply x rounded to
// 8 bits on both paths (activation_rounding.hpp), so a row's result does not depend on the size of its batch.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/cpu/matvec.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/tensor.hpp"

namespace corolla {

void cpu_matmul(ThreadPool& pool, const float* x, int64_t m, int64_t k, const Tensor& w, float* y);

// Up to this many rows of x, cpu_matmul uses the matrix-vector kernels rather than a GEMM: for f32 weights; for
// 16-bit weights (bf16, f16), which the matrix-vector kernels widen cheaply; and for the quantized formats with a
// min or a sub-block scale per chunk (q4_1, q5_1, the K-quants), whose integer kernels pay an f32 term per chunk and
// row that the GEMM path (weights dequantized once per tile) does not. q8_0, q4_0 and q5_0 take the integer
// kernels at any number of rows, where they prefill as fast as the GEMM path or faster (q4_1 and the K-quants
// placed as rows prefill slower that way); there a row's product does not depend on how many rows its batch has.
// Where the kernel set multiplies bf16 on AMX tiles (matvec_amx.cpp) bf16 takes the matrix-vector path at any
// number of rows, which prefills faster than the GEMM path. The limits come from bench_gemm, bench_batch_decode
// and bench_decode --prefill=512 (docs/PERFORMANCE.md, "CPU kernels").
inline constexpr int64_t kMatvecMaxRowsF32 = 16;
inline constexpr int64_t kMatvecMaxRowsWide = 64;
inline constexpr int64_t kMatvecMaxRowsPacked = 32;
inline constexpr int64_t kMatvecAllRows = int64_t{1} << 62;
int64_t matvec_max_rows(DType weights);

// y_i[M, N_i] = x[M, K] · w_iᵀ for several weights at once, as cpu_matmul would compute each. Where every one
// takes the matrix-vector path, their rows are split over the pool as one job.
void cpu_matmul_many(ThreadPool& pool, const float* x, int64_t m, int64_t k, std::span<const Tensor* const> ws,
                     std::span<float* const> ys);

// The two paths of cpu_matmul, for benchmarks and tests that compare them.
// The matrix-vector path, for any m.
void cpu_matvec_rows(ThreadPool& pool, const float* x, int64_t m, int64_t k, const Tensor& w, float* y);
// The GEMM path: oneDNN's packed-weight kernels, and where it has none for a shape, its sgemm over tiles of weights
// converted to f32 (cpu_matmul's choice). Given `strided`, that function instead does every tile's product (another
// library's sgemm, for a benchmark that compares them, or a reference in a test). Either runs single-threaded inside
// the chunks of Corolla's pool: oneDNN by setting OpenMP to one thread in every thread that calls it (so it never
// starts an OpenMP team; other OpenMP code in those threads is affected too).
// y[m, rows] (leading dimension ldy) = x[m, k] · w[rows, k]ᵀ.
using Sgemm = void (*)(int64_t m, int64_t rows, int64_t k, const float* x, const float* w, float* y, int64_t ldy);
void cpu_gemm(ThreadPool& pool, const float* x, int64_t m, int64_t k, const Tensor& w, float* y,
              Sgemm strided = nullptr);

}  // namespace corolla
