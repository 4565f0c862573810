#include "bench/bench_util.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>

namespace corolla::bench {
namespace {
double clock_s(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
}  // namespace

double wall_s() { return clock_s(CLOCK_MONOTONIC); }
double process_cpu_s() { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }
double thread_cpu_s() { return clock_s(CLOCK_THREAD_CPUTIME_ID); }

std::shared_ptr<char> aligned_buffer(size_t bytes) {
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  char* p = static_cast<char*>(std::aligned_alloc(4096, rounded));
  if (!p) throw std::runtime_error("cannot allocate " + std::to_string(bytes) + " bytes");
  std::memset(p, 1, rounded);
  return std::shared_ptr<char>(p, [](char* q) { std::free(q); });
}

uint64_t read_sweep(ThreadPool& pool, const char* buf, size_t bytes) {
  // Eight independent sums over 64-byte lines: the compiler vectorises it, the loads stay independent.
  const int64_t lines = static_cast<int64_t>(bytes / 64);
  uint64_t sums[64] = {};
  pool.parallel_for(lines, 1024, [&](int64_t b, int64_t e) {
    uint64_t s[8] = {};
    const uint64_t* p = reinterpret_cast<const uint64_t*>(buf);
    for (int64_t l = b; l < e; ++l)
      for (int j = 0; j < 8; ++j) s[j] += p[l * 8 + j];
    uint64_t t = 0;
    for (uint64_t v : s) t += v;
    sums[(b / 1024) % 64] += t;
  });
  uint64_t t = 0;
  for (uint64_t v : sums) t += v;
  return t;
}

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int reps) {
  auto buf = aligned_buffer(bytes);
  volatile uint64_t sink = read_sweep(pool, buf.get(), bytes);  // warm-up
  const double t = best_time(reps, [&] { sink = sink + read_sweep(pool, buf.get(), bytes); });
  return static_cast<double>(bytes) / t / 1e9;
}

std::string load_average() {
  char buf[64] = {};
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (!std::fgets(buf, sizeof buf, f)) buf[0] = 0;
    std::fclose(f);
  }
  const std::string s(buf);
  return s.empty() ? "?" : s.substr(0, s.find(' '));
}

std::string arg(int argc, char** argv, const std::string& name, const std::string& fallback) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  return fallback;
}

}  // namespace corolla::bench
