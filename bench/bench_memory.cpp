// bench_memory: the machine's read bandwidth, a plain sweep over a buffer far larger than any cache.
//   bench_memory [--threads=2] [--mib=1024] [--reps=5]
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
  const double bw1 = measure_read_bandwidth(one, mib << 20, reps);
  const double bwn = measure_read_bandwidth(pool, mib << 20, reps);
  std::printf("read bandwidth, %zu MiB buffer, best of %d sweeps (load average %s)\n", mib, reps,
              load_average().c_str());
  std::printf("  1 thread : %6.1f GB/s\n", bw1);
  std::printf("  %d threads: %6.1f GB/s  (%.2fx one thread)\n", threads, bwn, bwn / bw1);
  return 0;
}
