// Shared helpers of the benchmarks: clocks, a memory-bandwidth sweep, aligned buffers, table printing.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"

namespace corolla::bench {

double wall_s();         // monotonic wall clock, seconds
double process_cpu_s();  // CPU time of the whole process (all threads), seconds
double thread_cpu_s();   // CPU time of the calling thread, seconds

// A 4096-byte aligned buffer of `bytes` in huge pages where the kernel grants them, every page touched (so the
// sweep measures memory, not page faults).
std::shared_ptr<char> aligned_buffer(size_t bytes);

// A read sweep with loads of a given width: one core's bandwidth grows with it, so the machine's bandwidth is the
// best of the widths it runs.
enum class SweepWidth { plain, avx2, avx512 };
const char* sweep_name(SweepWidth width);
bool sweep_available(SweepWidth width);

// Reads all of buf[0, bytes) once with the pool's threads; returns a checksum so the loads are not elided.
uint64_t read_sweep(ThreadPool& pool, const char* buf, size_t bytes, SweepWidth width);

// Best read bandwidth (GB/s) over `reps` sweeps of a buffer of `bytes` with the pool's threads: with one width,
// or the best of all widths this CPU runs.
double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int reps, SweepWidth width);
double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int reps);
// The width whose sweeps of buf[0, bytes) read fastest here (best of two each).
SweepWidth best_sweep_width(ThreadPool& pool, const char* buf, size_t bytes);

// Runs fn `reps` times and returns the fastest time in seconds.
template <class F>
double best_time(int reps, F&& fn) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = wall_s();
    fn();
    const double t = wall_s() - t0;
    if (t < best) best = t;
  }
  return best;
}

// The 1-minute load average (/proc/loadavg), to judge how busy the shared cores were during a run.
std::string load_average();

// Matrix shapes [rows N, columns K] of TinyLlama-1.1B: hidden 2048, 4 KV heads of 64 (k/v proj 256 rows),
// intermediate 5632, vocabulary 32000.
struct MatrixShape {
  const char* name;
  int64_t n, k;
};
inline constexpr MatrixShape kTinyLlamaShapes[] = {{"q/o proj", 2048, 2048},
                                                   {"k/v proj", 256, 2048},
                                                   {"gate/up", 5632, 2048},
                                                   {"down", 2048, 5632},
                                                   {"lm head", 32000, 2048}};

// Uniform values in [-1, 1) from a fast generator (benchmarks need plausible data, not good randomness).
void fill_random(float* p, int64_t n, uint64_t seed);

// Value of `--name=value` in argv, or `fallback`.
std::string arg(int argc, char** argv, const std::string& name, const std::string& fallback);

}  // namespace corolla::bench
