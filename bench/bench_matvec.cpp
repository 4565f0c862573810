// bench_matvec: decode matrix-vector products at TinyLlama-1.1B shapes, for every weight dtype and instruction
// set, as achieved GB/s of weight reading and as a fraction of the read bandwidth of a plain sweep (bench_memory's
// widest loads) over the same buffer with the same threads, the two alternated so that both see the same moments
// of a shared machine. Each matrix is replicated until the copies exceed --mib (default 1 GiB) and the copies are
// read in turn, so the weights come from memory, as a whole model's do, not from the last-level cache.
// A second table shows small-batch decode: m = 2..4 activation rows sharing one pass over the weights.
//   bench_matvec [--threads=2] [--mib=1024] [--reps=5] [--isa=simd|all|best] [--dtypes=f32,f16,bf16,q8_0,q4_0,q4_1]
//   (a quantized dtype with "_r16", e.g. q4_0_r16: its rows interleaved by 16, as the CPU backend places them)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/matvec.hpp"
#include "kernels/interleaved_rows.hpp"
#include "kernels/tensor.hpp"

using namespace corolla;
using namespace corolla::bench;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = s.find(',', b);
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return out;
}

// Copies of one matrix, enough to exceed the cache.
struct Replicas {
  std::shared_ptr<char> buf;
  int64_t bytes = 0;  // of one copy
  int copies = 0;
  const char* copy(int i) const { return buf.get() + static_cast<int64_t>(i) * bytes; }
};

Replicas replicate(const Tensor& w, size_t min_total) {
  Replicas r;
  r.bytes = w.nbytes();
  r.copies = static_cast<int>(
      std::max<size_t>(1, (min_total + static_cast<size_t>(r.bytes) - 1) / static_cast<size_t>(r.bytes)));
  r.buf = aligned_buffer(static_cast<size_t>(r.bytes) * static_cast<size_t>(r.copies));
  for (int i = 0; i < r.copies; ++i)
    std::memcpy(r.buf.get() + static_cast<int64_t>(i) * r.bytes, w.data(), static_cast<size_t>(r.bytes));
  return r;
}

// Bandwidth (GB/s) of y = W x with m activation rows over all copies, and of a plain read sweep over the same
// copies, alternated `reps` times (best of each): both see the same moments of a shared machine.
struct Measured {
  double matvec_gbs, sweep_gbs;
};

// One pass of y = W x with m activation rows over all copies of W, split as cpu_matmul's decode path does.
struct Pass {
  ThreadPool& pool;
  const MatvecKernels& ks;
  DType t;
  const Replicas& w;
  int64_t n, k, m;
  std::vector<float> x, y;
  Pass(ThreadPool& p, const MatvecKernels& kernels, DType type, const Replicas& weights, int64_t rows, int64_t cols,
       int64_t xrows)
      : pool(p),
        ks(kernels),
        t(type),
        w(weights),
        n(rows),
        k(cols),
        m(xrows),
        x(static_cast<size_t>(xrows * cols)),
        y(static_cast<size_t>(xrows * rows)) {
    fill_random(x.data(), m * k, 99);
  }
  void operator()() {
    const MatvecFn mv = ks.for_dtype(t);
    const MatvecRowsFn mvr = ks.rows_for_dtype(t);
    for (int c = 0; c < w.copies; ++c) {
      const char* wc = w.copy(c);
      if (m == 1) {
        pool.parallel_for(n, 16, [&](int64_t r0, int64_t r1) { mv(wc, k, x.data(), y.data(), r0, r1); });
      } else {
        pool.parallel_for(n, 16, [&](int64_t r0, int64_t r1) { mvr(wc, k, x.data(), m, y.data(), n, r0, r1); });
      }
    }
  }
};

// Bandwidth (GB/s) of the kernel and of a plain read sweep over the same copies, alternated `reps` times (best of
// each): both see the same moments of a shared machine.
Measured measure(ThreadPool& pool, const MatvecKernels& ks, DType t, const Replicas& w, int64_t n, int64_t k,
                 int reps) {
  Pass pass(pool, ks, t, w, n, k, 1);
  const size_t total = static_cast<size_t>(w.bytes) * static_cast<size_t>(w.copies) / 256 * 256;
  volatile uint64_t sink = 0;
  auto sweep = [&] {
    for (SweepWidth width : {SweepWidth::avx512, SweepWidth::avx2, SweepWidth::plain})
      if (sweep_available(width)) {
        sink = sink + read_sweep(pool, w.buf.get(), total, width);
        return;
      }
  };
  pass();  // warm-up
  double best_pass = 1e30, best_sweep = 1e30;
  for (int i = 0; i < reps; ++i) {
    best_sweep = std::min(best_sweep, best_time(1, sweep));
    best_pass = std::min(best_pass, best_time(1, pass));
  }
  const double bytes = static_cast<double>(w.bytes) * w.copies;
  return {bytes / best_pass / 1e9, static_cast<double>(total) / best_sweep / 1e9};
}

// Time with m activation rows / time with one, the two alternated `reps` times (best of each).
double batch_ratio(ThreadPool& pool, const MatvecKernels& ks, DType t, const Replicas& w, int64_t n, int64_t k,
                   int64_t m, int reps) {
  Pass one(pool, ks, t, w, n, k, 1), many(pool, ks, t, w, n, k, m);
  one();
  many();
  double best_one = 1e30, best_many = 1e30;
  for (int i = 0; i < reps; ++i) {
    best_one = std::min(best_one, best_time(1, one));
    best_many = std::min(best_many, best_time(1, many));
  }
  return best_many / best_one;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = std::stoi(arg(argc, argv, "threads", "2"));
  const size_t mib = std::stoul(arg(argc, argv, "mib", "1024"));
  const int reps = std::stoi(arg(argc, argv, "reps", "5"));
  const std::string isa = arg(argc, argv, "isa", "simd");
  const std::vector<std::string> dtype_names = split(arg(argc, argv, "dtypes", "f32,f16,bf16,q8_0,q4_0,q4_1"));

  std::vector<const MatvecKernels*> sets;
  for (const MatvecKernels* s : available_matvec_kernels())
    if (isa == "all" || (isa == "simd" && std::string(s->isa) != "scalar")) sets.push_back(s);
  if (sets.empty() || isa == "best") sets = {&best_matvec_kernels()};

  ThreadPool pool(threads);
  const double bw = measure_read_bandwidth(pool, mib << 20, 5);
  std::printf("bench_matvec: %d threads, weights replicated past %zu MiB, best of %d passes, load average %s\n",
              threads, mib, reps, load_average().c_str());
  std::printf(
      "read bandwidth (best bench_memory sweep, same threads): %.1f GB/s; ratios below are to a sweep of\n"
      "the same weights alternated with the kernel\n\n",
      bw);

  std::printf("%-6s %-10s %-12s", "dtype", "matrix", "shape");
  for (const MatvecKernels* s : sets) std::printf(" %9s GB/s  ratio", s->isa);
  std::printf("\n");

  const MatvecKernels& best = *available_matvec_kernels().back();
  struct Batch {
    DType t;
    double ratio[kMatvecMaxRows + 1];
  };
  std::vector<Batch> batches;

  for (const std::string& name : dtype_names) {
    // A plain dtype, or one with "_r16": its rows interleaved as the CPU backend places them for some kernel sets.
    const bool r16 = name.size() > 4 && name.ends_with("_r16");
    const auto plain = parse_dtype(r16 ? name.substr(0, name.size() - 4) : name);
    const auto t = plain && r16 ? interleaved_form(*plain) : plain;
    if (!t) {
      std::fprintf(stderr, "unknown dtype %s\n", name.c_str());
      return 2;
    }
    std::vector<double> total_bytes(sets.size()), total_s(sets.size()), total_sweep_s(sets.size());
    for (const MatrixShape& sh : kTinyLlamaShapes) {
      Tensor f = Tensor::empty(DType::f32, {sh.n, sh.k});
      fill_random(f.data_as<float>(), sh.n * sh.k, static_cast<uint64_t>(sh.n * 31 + sh.k));
      Tensor w = f.cast(*plain);
      f = Tensor();
      if (r16) {
        Tensor rows = Tensor::empty(*t, w.shape());
        interleave_rows(*plain, w.data(), rows.data(), sh.n, sh.k);
        w = rows;
      }
      const Replicas rep = replicate(w, mib << 20);
      char shape[32];
      std::snprintf(shape, sizeof shape, "%lldx%lld", static_cast<long long>(sh.n), static_cast<long long>(sh.k));
      std::printf("%-7s %-10s %-12s", name.c_str(), sh.name, shape);
      for (size_t i = 0; i < sets.size(); ++i) {
        const Measured r = measure(pool, *sets[i], *t, rep, sh.n, sh.k, reps);
        total_bytes[i] += static_cast<double>(rep.bytes);
        total_s[i] += static_cast<double>(rep.bytes) / (r.matvec_gbs * 1e9);
        total_sweep_s[i] += static_cast<double>(rep.bytes) / (r.sweep_gbs * 1e9);
        std::printf(" %14.1f %6.2f", r.matvec_gbs, r.matvec_gbs / r.sweep_gbs);
      }
      std::printf("\n");
      std::fflush(stdout);
      if (sh.n == 2048 && sh.k == 5632) {
        // Small batches on the down projection: time for m rows relative to one row (m separate passes: m).
        Batch b{*t, {}};
        for (int64_t m = 2; m <= kMatvecMaxRows; ++m)
          b.ratio[m] = batch_ratio(pool, best, *t, rep, sh.n, sh.k, m, reps);
        batches.push_back(b);
      }
    }
    std::printf("%-6s %-23s", name.c_str(), "all five (one layer+head)");
    for (size_t i = 0; i < sets.size(); ++i)
      std::printf(" %14.1f %6.2f", total_bytes[i] / total_s[i] / 1e9, total_sweep_s[i] / total_s[i]);
    std::printf("\n\n");
  }

  std::printf("read bandwidth measured again at the end: %.1f GB/s\n\n", measure_read_bandwidth(pool, mib << 20, 5));
  std::printf("small-batch decode, %s, down proj 2048x5632: time for m activation rows / time for one row\n", best.isa);
  std::printf("%-6s", "dtype");
  for (int64_t m = 2; m <= kMatvecMaxRows; ++m) std::printf("   m=%lld", static_cast<long long>(m));
  std::printf("   (one pass per row would be m)\n");
  for (const Batch& b : batches) {
    std::printf("%-6s", std::string(dtype_name(b.t)).c_str());
    for (int64_t m = 2; m <= kMatvecMaxRows; ++m) std::printf(" %6.2f", b.ratio[m]);
    std::printf("\n");
  }
  return 0;
}
