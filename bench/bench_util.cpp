#include "bench/bench_util.hpp"

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <utility>

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
  // Model weights are mapped from the page cache in huge folios where the kernel offers them (FilePmdMapped), so
  // a buffer that stands for them asks for huge pages too: the sweep then sees no more TLB misses than a kernel.
  madvise(p, rounded, MADV_HUGEPAGE);
  std::memset(p, 1, rounded);
  return std::shared_ptr<char>(p, [](char* q) { std::free(q); });
}

namespace {

// Sums 64-bit words of [b, e) lines of 64 bytes; three widths, since one core's read bandwidth grows with the
// width of its loads (more bytes in flight per load-buffer entry).
uint64_t sweep_plain(const char* buf, int64_t b, int64_t e) {
  uint64_t s[8] = {};
  const uint64_t* p = reinterpret_cast<const uint64_t*>(buf);
  for (int64_t l = b; l < e; ++l)
    for (int j = 0; j < 8; ++j) s[j] += p[l * 8 + j];
  uint64_t t = 0;
  for (uint64_t v : s) t += v;
  return t;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t sweep_avx2(const char* buf, int64_t b, int64_t e) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t l = b; l + 2 <= e; l += 2) {
    const char* p = buf + l * 64;
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 96)));
  }
  a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  return static_cast<uint64_t>(_mm256_extract_epi64(a0, 0) + _mm256_extract_epi64(a0, 3));
}

__attribute__((target("avx512f"))) uint64_t sweep_avx512(const char* buf, int64_t b, int64_t e) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t l = b; l + 4 <= e; l += 4) {
    const char* p = buf + l * 64;
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + 128));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + 192));
  }
  return static_cast<uint64_t>(
      _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3))));
}
#endif

using SweepFn = uint64_t (*)(const char*, int64_t, int64_t);

SweepFn sweep_fn(SweepWidth width) {
  switch (width) {
#if defined(__x86_64__)
    case SweepWidth::avx2: return __builtin_cpu_supports("avx2") ? sweep_avx2 : nullptr;
    case SweepWidth::avx512: return __builtin_cpu_supports("avx512f") ? sweep_avx512 : nullptr;
#else
    case SweepWidth::avx2:
    case SweepWidth::avx512: return nullptr;
#endif
    default: return sweep_plain;
  }
}

}  // namespace

const char* sweep_name(SweepWidth width) {
  switch (width) {
    case SweepWidth::avx2: return "avx2 (32-byte loads)";
    case SweepWidth::avx512: return "avx512 (64-byte loads)";
    default: return "plain (compiler's loads)";
  }
}

bool sweep_available(SweepWidth width) { return sweep_fn(width) != nullptr; }

uint64_t read_sweep(ThreadPool& pool, const char* buf, size_t bytes, SweepWidth width) {
  const SweepFn fn = sweep_fn(width);
  const int64_t lines = static_cast<int64_t>(bytes / 64);
  std::atomic<uint64_t> sum{0};
  // Chunks of 1024 lines (64 KiB): every chunk is a multiple of 4 lines, as the wide sweeps want.
  pool.parallel_for(lines, 1024, [&](int64_t b, int64_t e) { sum += fn(buf, b, e); });
  return sum.load();
}

namespace {

// Best time of `reps` sweeps of buf[0, bytes) with one width, after a warm-up sweep.
double sweep_seconds(ThreadPool& pool, const char* buf, size_t bytes, int reps, SweepWidth width) {
  volatile uint64_t sink = read_sweep(pool, buf, bytes, width);
  return best_time(reps, [&] { sink = sink + read_sweep(pool, buf, bytes, width); });
}

// The width whose sweeps read buf fastest, and its best time.
std::pair<SweepWidth, double> fastest_sweep(ThreadPool& pool, const char* buf, size_t bytes, int reps) {
  std::pair<SweepWidth, double> best{SweepWidth::plain, 1e30};
  for (SweepWidth w : {SweepWidth::plain, SweepWidth::avx2, SweepWidth::avx512})
    if (sweep_available(w))
      if (const double t = sweep_seconds(pool, buf, bytes, reps, w); t < best.second) best = {w, t};
  return best;
}

}  // namespace

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int reps, SweepWidth width) {
  auto buf = aligned_buffer(bytes);
  return static_cast<double>(bytes) / sweep_seconds(pool, buf.get(), bytes, reps, width) / 1e9;
}

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int reps) {
  auto buf = aligned_buffer(bytes);
  return static_cast<double>(bytes) / fastest_sweep(pool, buf.get(), bytes, reps).second / 1e9;
}

SweepWidth best_sweep_width(ThreadPool& pool, const char* buf, size_t bytes) {
  return fastest_sweep(pool, buf, bytes, 2).first;
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

void fill_random(float* p, int64_t n, uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    p[i] = static_cast<float>(static_cast<int64_t>(s >> 40) - (1 << 23)) / static_cast<float>(1 << 23);
  }
}

}  // namespace corolla::bench
