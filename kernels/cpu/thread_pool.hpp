// A small fork-join pool for kernels. Several servers and a client share two cores in local swarms, so:
// - idle workers block on a futex after a short spin bounded in time (COROLLA_SPIN_US, default 50 µs: long enough
//   to bridge the gaps between the kernels of one decode step, short enough that an idle pool costs nothing);
// - work is split into chunks that the caller and the workers claim dynamically: when a worker is slow to wake or
//   is descheduled, the caller takes its chunks instead of waiting for it.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
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

  // Runs fn(begin, end) over [0, n) in contiguous chunks whose bounds are multiples of `grain` (the last one ends
  // at n), at most kChunksPerThread * size() of them, each run once by the caller or a worker. Returns when all are
  // done; an exception thrown by fn is rethrown here (the first one, after every chunk has finished). Calls from
  // different threads are serialised; fn must not call parallel_for on the same pool.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // The process-wide pool with `threads` threads (0: one per hardware thread), created on first use.
  static std::shared_ptr<ThreadPool> shared(int threads);

  static constexpr int kChunksPerThread = 4;

 private:
  // Job state in one word, so that claiming a chunk is one compare-and-swap that also checks the job is current:
  // bits 32..63 job id, 16..31 number of chunks, 0..15 next unclaimed chunk.
  static uint64_t pack(uint32_t job, uint32_t parts, uint32_t next) {
    return (static_cast<uint64_t>(job) << 32) | (static_cast<uint64_t>(parts) << 16) | next;
  }
  void worker_loop();
  // Claims and runs chunks of job `job` until none is left.
  void run_chunks(uint32_t job);
  void run_chunk(uint32_t index, uint32_t parts);

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;
  const int64_t spin_ns_;

  // The current job; written by the caller before it publishes state_, read by whoever claimed a chunk of it.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1, units_ = 0;
  uint32_t job_ = 0;

  std::atomic<uint64_t> state_{0};
  std::atomic<uint32_t> wake_{0};  // job id the workers wait on (futex word)
  std::atomic<uint32_t> done_{0};  // finished chunks of the current job (futex word)
  std::atomic<int> sleeping_workers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};

  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace corolla
