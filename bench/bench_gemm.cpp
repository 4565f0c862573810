// bench_gemm: prefill GEMM, y[M, N] = x[M, K] · w[N, K]ᵀ with M = 512 tokens at TinyLlama-1.1B shapes, all with
// the same number of threads, measured side by side:
//   corolla/dnnl f32, bf16   cpu_matmul with oneDNN run single-threaded per chunk by Corolla's pool (bf16 weights
//                            converted to f32 one tile of rows at a time)
//   corolla/blas f32, bf16   the same with OpenBLAS sgemm per chunk
//   openblas                 cblas_sgemm alone, OpenBLAS's own threads
//   onednn f32           oneDNN matmul on the weights as stored (w read as a [K, N] "ba" matrix, no copy)
//   onednn f32 packed    the same with weights reordered once into oneDNN's preferred layout (not timed)
//   onednn bf16 (pk)     oneDNN matmul with bf16 weights (as stored, or packed) and x rounded to bf16 (timed)
// then the CPU time each library's idle threads burn in the second after its last GEMM.
//   bench_gemm [--threads=2] [--m=512] [--reps=3]   (reps: alternated rounds, each method's best counts)
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.hpp"
#include "bench/dnnl_matmul.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/tensor.hpp"

extern "C" void openblas_set_num_threads(int);
extern "C" void omp_set_num_threads(int);
extern "C" char* openblas_get_corename();

using namespace corolla;
using namespace corolla::bench;

namespace {

// OpenBLAS's sgemm on the calling thread (openblas_set_num_threads(1)), as cpu_gemm's strided path runs it when
// given: the comparison with the library Corolla used before oneDNN. Only this benchmark links OpenBLAS.
void openblas_sgemm(int64_t m, int64_t rows, int64_t k, const float* x, const float* w, float* y, int64_t ldy) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(rows), static_cast<int>(k),
              1.f, x, static_cast<int>(k), w, static_cast<int>(k), 0.f, y, static_cast<int>(ldy));
}

int thread_count() {
  int n = 0;
  if (FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f))
      if (std::strncmp(line, "Threads:", 8) == 0) n = std::atoi(line + 8);
    std::fclose(f);
  }
  return n;
}

double idle_cpu_ms_over_1s() {
  const double c0 = process_cpu_s();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  return (process_cpu_s() - c0) * 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = std::stoi(arg(argc, argv, "threads", "2"));
  const int64_t m = std::stoll(arg(argc, argv, "m", "512"));
  const int reps = std::stoi(arg(argc, argv, "reps", "3"));
  ThreadPool pool(threads);
  openblas_set_num_threads(1);  // Corolla's pool parallelises around it

  const char* names[] = {"corolla/dnnl", "corolla/blas", "openblas", "onednn",   "onednn pk",
                         "corolla/dnnl", "corolla/blas", "onednn",   "onednn pk"};
  const char* types[] = {"f32", "f32", "f32", "f32", "f32", "bf16 w", "bf16 w", "bf16 w+x", "bf16 w+x"};
  constexpr int kMethods = 9;
  std::printf(
      "bench_gemm: M = %lld tokens, %d threads, best of %d alternated rounds, load average %s, OpenBLAS core %s\n",
      static_cast<long long>(m), threads, reps, load_average().c_str(), openblas_get_corename());
  std::printf(
      "GFLOP/s (wall clock; last line: GFLOP per CPU-second of the process); ratio = corolla/dnnl f32 / the\n"
      "fastest f32 library alone\n");
  std::printf("%-10s %-11s", "", "");
  for (const char* t : types) std::printf(" %12s", t);
  std::printf("\n%-10s %-11s", "matrix", "N x K");
  for (const char* n : names) std::printf(" %12s", n);
  std::printf("  ratio\n");

  double flops_total = 0, seconds[kMethods] = {}, cpu_seconds[kMethods] = {};
  // The fastest of the libraries alone, leaving out a method this CPU lacks (nan).
  auto fastest = [](double a, double b, double c) { return std::fmin(a, std::fmin(b, c)); };
  for (const MatrixShape& sh : kTinyLlamaShapes) {
    const int64_t n = sh.n, k = sh.k;
    Tensor wf = Tensor::empty(DType::f32, {n, k});
    fill_random(wf.data_as<float>(), n * k, static_cast<uint64_t>(n + k));
    const Tensor wb = wf.cast(DType::bf16);
    std::vector<float> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
    fill_random(x.data(), m * k, 5);
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    flops_total += flops;

    // Every method once per round, `reps` rounds, each method's best round counting: alternated, so that a slow
    // stretch of this machine falls on all of them rather than on whichever ran then. The libraries alone run
    // their own threads, which spin for a while after a call (openblas ~100 ms, OpenMP a few ms): a pause after
    // them, untimed, keeps that from slowing the next method.
    std::vector<std::unique_ptr<DnnlMatmul>> dnnl(4);
    for (int v = 0; v < 4; ++v) {
      const bool bf16 = v >= 2, packed = v % 2 == 1;
      try {
        dnnl[static_cast<size_t>(v)] = std::make_unique<DnnlMatmul>(m, n, k, bf16, packed, bf16 ? wb.data() : wf.data(),
                                                                    x.data(), y.data(), threads);
      } catch (const dnnl::error&) {
        // oneDNN has no kernel for this on this CPU (bf16 x bf16 without AVX-512): printed as nan.
      }
    }
    const std::function<void()> methods[kMethods] = {
        [&] { cpu_gemm(pool, x.data(), m, k, wf, y.data()); },
        [&] { cpu_gemm(pool, x.data(), m, k, wf, y.data(), openblas_sgemm); },
        [&] {
          openblas_set_num_threads(threads);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                      static_cast<int>(k), 1.f, x.data(), static_cast<int>(k), wf.data_as<const float>(),
                      static_cast<int>(k), 0.f, y.data(), static_cast<int>(n));
          openblas_set_num_threads(1);
        },
        dnnl[0] ? std::function<void()>([&] { dnnl[0]->run(); }) : nullptr,
        dnnl[1] ? std::function<void()>([&] { dnnl[1]->run(); }) : nullptr,
        [&] { cpu_gemm(pool, x.data(), m, k, wb, y.data()); },
        [&] { cpu_gemm(pool, x.data(), m, k, wb, y.data(), openblas_sgemm); },
        dnnl[2] ? std::function<void()>([&] { dnnl[2]->run(); }) : nullptr,
        dnnl[3] ? std::function<void()>([&] { dnnl[3]->run(); }) : nullptr,
    };
    constexpr bool kOwnThreads[kMethods] = {false, false, true, true, true, false, false, true, true};
    double t[kMethods], cpu[kMethods];
    for (int i = 0; i < kMethods; ++i) {
      t[i] = cpu[i] = methods[i] ? 1e30 : std::numeric_limits<double>::quiet_NaN();
      if (methods[i]) methods[i]();  // warm-up (and first-touch of y)
    }
    for (int r = 0; r < reps; ++r)
      for (int i = 0; i < kMethods; ++i) {
        if (!methods[i]) continue;
        const double w0 = wall_s(), c0 = process_cpu_s();
        methods[i]();
        t[i] = std::min(t[i], wall_s() - w0);
        cpu[i] = std::min(cpu[i], process_cpu_s() - c0);
        if (kOwnThreads[i]) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    for (int i = 0; i < kMethods; ++i) cpu_seconds[i] += cpu[i];
    char shape[32];
    std::snprintf(shape, sizeof shape, "%lldx%lld", static_cast<long long>(n), static_cast<long long>(k));
    std::printf("%-10s %-11s", sh.name, shape);
    for (int i = 0; i < kMethods; ++i) {
      std::printf(" %12.1f", flops / t[i] / 1e9);
      seconds[i] += t[i];
    }
    std::printf("  %.2f\n", fastest(t[2], t[3], t[4]) / t[0]);
    std::fflush(stdout);
  }
  std::printf("%-22s", "all five");
  for (int i = 0; i < kMethods; ++i) std::printf(" %12.1f", flops_total / seconds[i] / 1e9);
  std::printf("  %.2f\n", fastest(seconds[2], seconds[3], seconds[4]) / seconds[0]);
  // Per CPU-second: what each core delivers, a figure that other processes on the shared cores disturb less.
  std::printf("%-22s", "all five, per CPU-s");
  for (int i = 0; i < kMethods; ++i) std::printf(" %12.1f", flops_total / cpu_seconds[i] / 1e9);
  std::printf("  %.2f\n", fastest(cpu_seconds[2], cpu_seconds[3], cpu_seconds[4]) / cpu_seconds[0]);

  // Where the matrix-vector path (weights read as stored, once per L2 tile for all rows) and the GEMM path
  // (weights converted to f32 per tile, then oneDNN) cross, on the gate/up projection.
  {
    const int64_t n = 5632, k = 2048;
    Tensor wf = Tensor::empty(DType::f32, {n, k});
    fill_random(wf.data_as<float>(), n * k, 17);
    std::printf(
        "\nmatrix-vector path vs GEMM path, %lldx%lld, ms (cpu_matmul switches above %lld rows for f32, %lld "
        "for bf16, f16 and q8_0, %lld for the packed formats)\n%-6s",
        static_cast<long long>(n), static_cast<long long>(k), static_cast<long long>(kMatvecMaxRowsF32),
        static_cast<long long>(kMatvecMaxRowsWide), static_cast<long long>(kMatvecMaxRowsPacked), "dtype");
    const int64_t ms[] = {4, 8, 16, 32, 64};
    for (int64_t mm : ms) std::printf("   m=%-3lld mv / gemm", static_cast<long long>(mm));
    std::printf("\n");
    for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0}) {
      const Tensor w = wf.cast(t);
      std::printf("%-6s", std::string(dtype_name(t)).c_str());
      for (int64_t mm : ms) {
        std::vector<float> x(static_cast<size_t>(mm * k)), y(static_cast<size_t>(mm * n));
        fill_random(x.data(), mm * k, 3);
        auto timed = [&](auto&& fn) {
          fn();
          return best_time(std::max(reps, 3), fn);
        };
        const double tm = timed([&] { cpu_matvec_rows(pool, x.data(), mm, k, w, y.data()); });
        const double tg = timed([&] { cpu_gemm(pool, x.data(), mm, k, w, y.data()); });
        std::printf("   %7.2f / %6.2f", tm * 1e3, tg * 1e3);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }

  // Idle threads: CPU time burnt in the second after each library's last GEMM (several servers share the cores).
  std::printf("\nidle CPU over the 1 s after a GEMM (ms):");
  {
    Tensor wf = Tensor::empty(DType::f32, {2048, 2048});
    std::vector<float> x(static_cast<size_t>(m * 2048)), y(static_cast<size_t>(m * 2048));
    cpu_matmul(pool, x.data(), m, 2048, wf, y.data());
    std::printf(" corolla pool %.1f (%d threads in the process),", idle_cpu_ms_over_1s(), thread_count());
    openblas_set_num_threads(threads);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), 2048, 2048, 1.f, x.data(), 2048,
                wf.data_as<const float>(), 2048, 0.f, y.data(), 2048);
    std::printf(" openblas %.1f,", idle_cpu_ms_over_1s());
    openblas_set_num_threads(1);
    DnnlMatmul f32(m, 2048, 2048, false, false, wf.data(), x.data(), y.data(), threads);
    f32.run();
    std::printf(" onednn (OpenMP) %.1f\n", idle_cpu_ms_over_1s());
  }
  return 0;
}
