#include "kernels/cpu/thread_pool.hpp"

#include <algorithm>
#include <map>

namespace corolla {
namespace {
// Spin this many times before blocking: long enough to catch the next kernel of a decode step (a few µs apart),
// short enough that an idle pool costs nothing.
constexpr int kSpins = 4000;

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

ThreadPool::ThreadPool(int threads) {
  threads = std::max(1, threads);
  chunks_.resize(static_cast<size_t>(threads));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop(int index) {
  uint32_t seen = 0;
  for (;;) {
    int spins = 0;
    uint32_t g;
    while ((g = generation_.load(std::memory_order_acquire)) == seen) {
      if (++spins < kSpins) {
        cpu_relax();
      } else {
        generation_.wait(seen);
      }
    }
    seen = g;
    if (stop_.load()) return;
    auto [begin, end] = chunks_[static_cast<size_t>(index)];
    if (begin < end) (*job_)(begin, end);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t units = (n + grain - 1) / grain;
  const int parts = static_cast<int>(std::min<int64_t>(size(), units));
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  std::lock_guard lock(call_mutex_);
  for (int i = 0; i < size(); ++i) {
    const int64_t b = std::min(n, units * i / parts * grain);
    const int64_t e = std::min(n, units * (i + 1) / parts * grain);
    chunks_[static_cast<size_t>(i)] = i < parts ? std::make_pair(b, e) : std::make_pair(n, n);
  }
  job_ = &fn;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  fn(chunks_[0].first, chunks_[0].second);
  int spins = 0;
  int left;
  while ((left = pending_.load(std::memory_order_acquire)) != 0) {
    if (++spins < kSpins) {
      cpu_relax();
    } else {
      pending_.wait(left);
    }
  }
  job_ = nullptr;
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
