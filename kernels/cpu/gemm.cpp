#include "kernels/cpu/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "kernels/cpu/matvec.hpp"

extern "C" void omp_set_num_threads(int);
extern "C" void openblas_set_num_threads(int);

namespace corolla {
namespace {

// Rows of w converted per tile: 128 rows of K = 5632 are 2.9 MB of f32, about one core's share of L2+L3.
constexpr int64_t kTileRows = 128;

void openblas_sgemm(int64_t m, int64_t rows, int64_t k, const float* x, const float* w, float* y, int64_t ldy) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(rows),
              static_cast<int>(k), 1.f, x, static_cast<int>(k), w, static_cast<int>(k), 0.f, y,
              static_cast<int>(ldy));
}

// y[m, rows] (leading dimension ldy) = x[m, k] · w[rows, k]ᵀ with oneDNN on the calling thread only: OpenMP is set
// to one thread in every thread that calls it, so oneDNN never starts an OpenMP team (whose idle threads would
// spin on cores other servers share). Primitives are cached per thread and shape.
void onednn_sgemm(int64_t m, int64_t rows, int64_t k, const float* x, const float* w, float* y, int64_t ldy) {
  using dnnl::memory;
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  struct PerThread {
    PerThread() { omp_set_num_threads(1); }
    dnnl::stream stream{engine};
    std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, std::tuple<dnnl::matmul, memory::desc, memory::desc,
                                                                      memory::desc>>
        prims;
  };
  thread_local PerThread t;
  auto key = std::make_tuple(m, rows, k, ldy);
  auto it = t.prims.find(key);
  if (it == t.prims.end()) {
    if (t.prims.size() >= 64) t.prims.clear();  // prefill lengths vary: keep the cache small
    const memory::desc src({m, k}, memory::data_type::f32, memory::dims{k, 1});
    const memory::desc wei({k, rows}, memory::data_type::f32, memory::dims{1, k});  // w's rows are columns
    const memory::desc dst({m, rows}, memory::data_type::f32, memory::dims{ldy, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), engine);
    it = t.prims.emplace(key, std::make_tuple(dnnl::matmul(pd), src, wei, dst)).first;
  }
  auto& [prim, src, wei, dst] = it->second;
  prim.execute(t.stream, {{DNNL_ARG_SRC, memory(src, engine, const_cast<float*>(x))},
                          {DNNL_ARG_WEIGHTS, memory(wei, engine, const_cast<float*>(w))},
                          {DNNL_ARG_DST, memory(dst, engine, y)}});
  t.stream.wait();
}

}  // namespace

void init_blas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

int64_t matvec_max_rows(DType weights) {
  return weights == DType::f32 ? kMatvecMaxRowsF32 : kMatvecMaxRowsConverted;
}

void cpu_matmul(ThreadPool& pool, const float* x, int64_t m, int64_t k, const Tensor& w, float* y) {
  if (m <= matvec_max_rows(w.dtype())) {
    cpu_matvec_rows(pool, x, m, k, w, y);
  } else {
    cpu_gemm(pool, GemmLibrary::onednn, x, m, k, w, y);
  }
}

void cpu_matvec_rows(ThreadPool& pool, const float* x, int64_t m, int64_t k, const Tensor& w, float* y) {
  const int64_t n = w.dim(0);
  const DType wt = w.dtype();
  const char* wdata = static_cast<const char*>(w.data());
  // Split rows of w across threads; each thread reads its rows once for all m rows of x.
  if (m == 1) {
    const MatvecFn mv = best_matvec_kernels().for_dtype(wt);
    pool.parallel_for(n, 16, [&](int64_t r0, int64_t r1) { mv(wdata, k, x, y, r0, r1); });
  } else {
    const MatvecRowsFn mv = best_matvec_kernels().rows_for_dtype(wt);
    pool.parallel_for(n, 16, [&](int64_t r0, int64_t r1) { mv(wdata, k, x, m, y, n, r0, r1); });
  }
}

void cpu_gemm(ThreadPool& pool, GemmLibrary lib, const float* x, int64_t m, int64_t k, const Tensor& w, float* y) {
  const int64_t n = w.dim(0);
  const DType wt = w.dtype();
  const char* wdata = static_cast<const char*>(w.data());
  auto sgemm = lib == GemmLibrary::openblas ? openblas_sgemm : onednn_sgemm;
  if (lib == GemmLibrary::openblas) init_blas_single_threaded();
  const int64_t row_bytes = storage_bytes(wt, k);
  const DequantFn dequant = best_matvec_kernels().dequant_for_dtype(wt);
  pool.parallel_for(n, kTileRows, [&](int64_t r0, int64_t r1) {
    if (wt == DType::f32) {
      sgemm(m, r1 - r0, k, x, reinterpret_cast<const float*>(wdata) + r0 * k, y + r0, n);
      return;
    }
    thread_local std::vector<float> tile;
    tile.resize(static_cast<size_t>(std::min(kTileRows, r1 - r0) * k));
    for (int64_t t0 = r0; t0 < r1; t0 += kTileRows) {
      const int64_t rows = std::min(kTileRows, r1 - t0);
      dequant(wdata + t0 * row_bytes, tile.data(), rows * k);
      sgemm(m, rows, k, x, tile.data(), y + t0, n);
    }
  });
}

}  // namespace corolla
