// A small fork-join pool for kernels. Idle workers block (futex wait after a short spin), never busy-wait for
// long: several servers and a client share two cores in local swarms, and a spinning pool steals their time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace corolla {

class ThreadPool {
 public:
  // `threads` counts the calling thread: a pool of 2 starts one worker.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(begin, end) over [0, n) in up to size() contiguous chunks whose bounds are multiples of `grain`.
  // The caller runs the first chunk. Calls from different threads are serialised.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // The process-wide pool with `threads` threads (0: one per hardware thread), created on first use.
  static std::shared_ptr<ThreadPool> shared(int threads);

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  std::vector<std::pair<int64_t, int64_t>> chunks_;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace corolla
