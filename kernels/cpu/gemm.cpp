#include "kernels/cpu/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/matvec.hpp"

extern "C" void openblas_set_num_threads(int);

namespace corolla {
namespace {
// Rows of w converted per tile: 128 rows of K = 5632 are 2.9 MB of f32, about one core's share of L2+L3.
constexpr int64_t kTileRows = 128;
}  // namespace

void init_blas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void cpu_matmul(ThreadPool& pool, const float* x, int64_t m, int64_t k, const Tensor& w, float* y) {
  const int64_t n = w.dim(0);
  const DType wt = w.dtype();
  const char* wdata = static_cast<const char*>(w.data());
  if (m <= kMatvecMaxRows) {
    // Split rows of w across threads; each thread reads its rows once for all m rows of x.
    if (m == 1) {
      const MatvecFn mv = best_matvec_kernels().for_dtype(wt);
      pool.parallel_for(n, 16, [&](int64_t r0, int64_t r1) { mv(wdata, k, x, y, r0, r1); });
    } else {
      const MatvecRowsFn mv = best_matvec_kernels().rows_for_dtype(wt);
      pool.parallel_for(n, 16, [&](int64_t r0, int64_t r1) { mv(wdata, k, x, m, y, n, r0, r1); });
    }
    return;
  }
  const int64_t row_bytes = storage_bytes(wt, k);
  pool.parallel_for(n, kTileRows, [&](int64_t r0, int64_t r1) {
    if (wt == DType::f32) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(r1 - r0),
                  static_cast<int>(k), 1.f, x, static_cast<int>(k),
                  reinterpret_cast<const float*>(wdata) + r0 * k, static_cast<int>(k), 0.f, y + r0,
                  static_cast<int>(n));
      return;
    }
    thread_local std::vector<float> tile;
    tile.resize(static_cast<size_t>(std::min(kTileRows, r1 - r0) * k));
    for (int64_t t0 = r0; t0 < r1; t0 += kTileRows) {
      const int64_t rows = std::min(kTileRows, r1 - t0);
      to_f32(wt, wdata + t0 * row_bytes, tile.data(), rows * k);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(rows),
                  static_cast<int>(k), 1.f, x, static_cast<int>(k), tile.data(), static_cast<int>(k), 0.f, y + t0,
                  static_cast<int>(n));
    }
  });
}

}  // namespace corolla
