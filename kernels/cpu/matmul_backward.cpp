#include "kernels/cpu/matmul_backward.hpp"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/matvec.hpp"
#include "kernels/interleaved_rows.hpp"

extern "C" void omp_set_num_threads(int);

namespace corolla {
namespace {

// Rows of w converted per tile, as in the forward GEMM (gemm.cpp).
constexpr int64_t kTileRows = 128;

// C[m, n] (ldc) = alpha · op(A) · op(B) + beta · C, row-major, on the calling thread only.
void sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
           float beta, float* c, int64_t ldc) {
  omp_set_num_threads(1);  // oneDNN computes in this thread only (the pool's other threads block, never spin)
  if (dnnl_sgemm(ta, tb, m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc) != dnnl_success)
    throw std::runtime_error("matmul_backward: oneDNN sgemm failed");
}

}  // namespace

void cpu_matmul_backward(ThreadPool& pool, const float* dy, int64_t m, const Tensor& w, float* dx) {
  const int64_t n = w.dim(0), k = w.dim(1);
  const DType wt = w.dtype();
  const char* wdata = static_cast<const char*>(w.data());
  const int64_t row_bytes = storage_bytes(wt, k);
  const bool interleaved = is_interleaved(wt);
  const DequantFn dequant = interleaved ? nullptr : best_matvec_kernels().dequant_for_dtype(wt);
  const int64_t grain = is_quantized(wt) ? block_elems(wt) : 16;
  pool.parallel_for(k, grain, [&](int64_t c0, int64_t c1) {
    const int64_t cols = c1 - c0;
    if (wt == DType::f32) {
      sgemm('N', 'N', m, cols, n, dy, n, reinterpret_cast<const float*>(wdata) + c0, k, 0.f, dx + c0, k);
      return;
    }
    // Columns [c0, c1) of a tile of rows, dequantized row by row (c0 is a multiple of the quantization block).
    thread_local std::vector<float> tile;
    tile.resize(static_cast<size_t>(std::min(kTileRows, n) * cols));
    const int64_t col_offset = storage_bytes(wt, c0);
    for (int64_t t0 = 0; t0 < n; t0 += kTileRows) {
      const int64_t rows = std::min(kTileRows, n - t0);
      for (int64_t r = 0; r < rows; ++r)
        if (interleaved)
          interleaved_row_to_f32(wt, wdata, k, t0 + r, c0, c1, tile.data() + r * cols);
        else
          dequant(wdata + (t0 + r) * row_bytes + col_offset, tile.data() + r * cols, cols);
      sgemm('N', 'N', m, cols, rows, dy + t0, n, tile.data(), cols, t0 == 0 ? 0.f : 1.f, dx + c0, k);
    }
  });
}

void cpu_matmul_weight_grad(ThreadPool& pool, const float* dy, const float* x, int64_t m, int64_t n, int64_t k,
                            float* dw) {
  pool.parallel_for(
      n, 16, [&](int64_t r0, int64_t r1) { sgemm('T', 'N', r1 - r0, k, m, dy + r0, n, x, k, 1.f, dw + r0 * k, k); });
}

}  // namespace corolla
