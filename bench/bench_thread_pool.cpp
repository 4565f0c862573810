// bench_thread_pool: what the kernels' fork-join pool costs. Dispatch overhead of an empty parallel_for (back to
// back, and after idle gaps that let the workers fall asleep), CPU burnt by workers waiting between jobs, and the
// CPU time of an idle pool over one second (must be about zero: several servers share two cores).
//   bench_thread_pool [--threads=2]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.hpp"

using namespace corolla;
using namespace corolla::bench;

namespace {

void busy_for(double seconds) {
  const double end = wall_s() + seconds;
  while (wall_s() < end) {
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = std::stoi(arg(argc, argv, "threads", "2"));
  ThreadPool pool(threads);
  auto noop = [](int64_t, int64_t) {};
  for (int i = 0; i < 1000; ++i) pool.parallel_for(threads, 1, noop);

  std::printf("ThreadPool with %d threads (spin before blocking: COROLLA_SPIN_US, default 50)\n", threads);
  {
    const int n = 20000;
    const double t0 = wall_s();
    for (int i = 0; i < n; ++i) pool.parallel_for(threads, 1, noop);
    std::printf("  empty parallel_for, back to back: %.2f us\n", (wall_s() - t0) / n * 1e6);
  }
  // A job of `work` seconds of CPU split in 64 pieces, after the caller computed alone for `gap` seconds (between
  // two kernels, or between two tokens). Ideal wall time: work / threads. On a loaded machine the tail (p90, mean)
  // shows how long the caller waits for workers that the OS has not scheduled.
  const double work = 200e-6;
  const auto caller = std::this_thread::get_id();
  std::atomic<int64_t> worker_pieces{0};  // pieces of work run by the workers
  auto job = [&](int64_t b, int64_t e) {
    if (std::this_thread::get_id() != caller) worker_pieces += e - b;
    busy_for(work * static_cast<double>(e - b) / 64);
  };
  std::printf("  job of %.0f us of work (ideal %.0f us), after a gap of caller-only work; load average %s\n",
              work * 1e6, work / threads * 1e6, load_average().c_str());
  std::printf("  %10s %12s %12s %12s %26s\n", "gap (us)", "median (us)", "p90 (us)", "mean (us)",
              "workers' waiting CPU/gap (us)");
  for (double gap : {0.0, 20e-6, 200e-6, 2e-3}) {
    std::vector<double> wall;
    const int n = gap < 1e-3 ? 1000 : 200;
    const double cpu0 = process_cpu_s(), main0 = thread_cpu_s();
    worker_pieces = 0;
    for (int i = 0; i < n; ++i) {
      busy_for(gap);
      const double t0 = wall_s();
      pool.parallel_for(64, 1, job);
      wall.push_back(wall_s() - t0);
    }
    // The workers' CPU time beyond the work they did is what they burnt waiting for jobs.
    const double worker_cpu = (process_cpu_s() - cpu0) - (thread_cpu_s() - main0);
    double mean = 0;
    for (double w : wall) mean += w;
    mean /= static_cast<double>(wall.size());
    const double waiting = (worker_cpu - work * static_cast<double>(worker_pieces.load()) / 64) / n;
    std::sort(wall.begin(), wall.end());
    std::printf("  %10.0f %12.1f %12.1f %12.1f %26.1f\n", gap * 1e6, median(wall) * 1e6,
                wall[wall.size() * 9 / 10] * 1e6, mean * 1e6, std::max(0.0, waiting) * 1e6);
  }
  {
    pool.parallel_for(64, 1, job);
    const double cpu0 = process_cpu_s();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    std::printf("  idle pool, CPU time over 1 s: %.2f ms\n", (process_cpu_s() - cpu0) * 1e3);
  }
  return 0;
}
