#include "kernels/cpu/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>

namespace corolla {
namespace {

// How long an idle worker spins before it blocks, unless COROLLA_SPIN_US says otherwise. Measured on a 2-core VM:
// the kernels of one decode step follow each other within a few µs, so they find the workers awake.
constexpr int64_t kDefaultSpinNs = 50'000;
// The caller waits for chunks that workers are running; it spins this many times longer than an idle worker.
constexpr int64_t kCallerSpinFactor = 4;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t spin_ns_from_env() {
  const char* v = std::getenv("COROLLA_SPIN_US");
  if (!v || !*v) return kDefaultSpinNs;
  char* end = nullptr;
  const long long us = std::strtoll(v, &end, 10);
  return (end && *end == 0 && us >= 0) ? us * 1000 : kDefaultSpinNs;
}

// Spins until pred() holds or `ns` have passed; true if pred() held.
template <class Pred>
bool spin_until(Pred pred, int64_t ns) {
  if (pred()) return true;
  if (ns <= 0) return false;
  const int64_t deadline = now_ns() + ns;
  for (int i = 1;; ++i) {
    cpu_relax();
    if (pred()) return true;
    if ((i & 15) == 0 && now_ns() >= deadline) return false;
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) : spin_ns_(spin_ns_from_env()) {
  threads = std::max(1, threads);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  wake_.fetch_add(1);
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  for (;;) {
    uint32_t job = seen;
    const bool woke = spin_until([&] { return (job = wake_.load(std::memory_order_acquire)) != seen; }, spin_ns_);
    if (!woke) {
      // Block. The caller reads sleeping_workers_ after publishing the job and we read wake_ after announcing
      // ourselves (both sequentially consistent): either we see the new job or it sees us and wakes us.
      sleeping_workers_.fetch_add(1);
      while ((job = wake_.load()) == seen) wake_.wait(seen);
      sleeping_workers_.fetch_sub(1);
    }
    seen = job;
    if (stop_.load()) return;
    run_chunks(job);
  }
}

void ThreadPool::run_chunks(uint32_t job) {
  uint64_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    const uint32_t parts = static_cast<uint32_t>(s >> 16) & 0xffff, next = static_cast<uint32_t>(s) & 0xffff;
    if (static_cast<uint32_t>(s >> 32) != job || next >= parts) return;
    if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      run_chunk(next, parts);
      s = state_.load(std::memory_order_acquire);
    }
  }
}

void ThreadPool::run_chunk(uint32_t index, uint32_t parts) {
  const int64_t b = std::min(n_, units_ * index / parts * grain_);
  const int64_t e = std::min(n_, units_ * (index + 1) / parts * grain_);
  try {
    if (b < e) (*fn_)(b, e);
  } catch (...) {
    std::lock_guard lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
  // Same handshake as the workers' sleep: the caller announces it sleeps, then reads done_.
  if (done_.fetch_add(1) + 1 == parts && caller_sleeping_.load()) done_.notify_one();
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t units = (n + grain - 1) / grain;
  const int64_t parts = std::min<int64_t>(units, static_cast<int64_t>(size()) * kChunksPerThread);
  if (parts <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  std::lock_guard lock(call_mutex_);
  fn_ = &fn;
  n_ = n;
  grain_ = grain;
  units_ = units;
  error_ = nullptr;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t job = ++job_;
  state_.store(pack(job, static_cast<uint32_t>(parts), 0), std::memory_order_release);
  wake_.store(job);
  if (sleeping_workers_.load() > 0) wake_.notify_all();

  run_chunks(job);

  const uint32_t all = static_cast<uint32_t>(parts);
  if (!spin_until([&] { return done_.load(std::memory_order_acquire) == all; }, spin_ns_ * kCallerSpinFactor)) {
    caller_sleeping_.store(true);
    for (uint32_t d; (d = done_.load()) != all;) done_.wait(d);
    caller_sleeping_.store(false);
  }
  fn_ = nullptr;
  if (error_) {
    std::exception_ptr e = std::exchange(error_, nullptr);
    std::rethrow_exception(e);
  }
}

std::shared_ptr<ThreadPool> ThreadPool::shared(int threads) {
  static std::mutex mutex;
  static std::map<int, std::shared_ptr<ThreadPool>> pools;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::lock_guard lock(mutex);
  auto& pool = pools[threads];
  if (!pool) pool = std::make_shared<ThreadPool>(threads);
  return pool;
}

}  // namespace corolla
