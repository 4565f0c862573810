// bench_memory: the machine's read bandwidth, a plain sweep over a buffer far larger than any cache.
//   bench_memory [--threads=2] [--mib=1024] [--reps=5]
#include <algorithm>
#include <cstdio>
#include <string>

#include "bench/bench_util.hpp"

using namespace corolla;
using namespace corolla::bench;

int main(int argc, char** argv) {
  const int threads = std::stoi(arg(argc, argv, "threads", "2"));
  const size_t mib = std::stoul(arg(argc, argv, "mib", "1024"));
  const int reps = std::stoi(arg(argc, argv, "reps", "5"));
  ThreadPool one(1), pool(threads);
  std::printf("read bandwidth, %zu MiB buffer, best of %d sweeps (load average %s), GB/s\n", mib, reps,
              load_average().c_str());
  std::printf("  %-24s %10s %10s %8s\n", "sweep", "1 thread", "threads", "ratio");
  double best = 0;
  for (SweepWidth w : {SweepWidth::plain, SweepWidth::avx2, SweepWidth::avx512}) {
    if (!sweep_available(w)) continue;
    const double bw1 = measure_read_bandwidth(one, mib << 20, reps, w);
    const double bwn = measure_read_bandwidth(pool, mib << 20, reps, w);
    std::printf("  %-24s %10.1f %10.1f %7.2fx\n", sweep_name(w), bw1, bwn, bwn / bw1);
    best = std::max(best, bwn);
  }
  std::printf("machine read bandwidth with %d threads: %.1f GB/s\n", threads, best);
  return 0;
}
