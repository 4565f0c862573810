// Recycles the CPU backend's activation buffers. A block allocates the same few buffers (queries, keys, values,
// MLP activations) for every forward; for a prefill they are megabytes each, and fresh memory from the OS costs a
// page fault and a zeroing per page on first touch (measured: about 5 % of a 512-token prefill). Released buffers
// wait here, by size; an allocation takes the smallest that holds it unless that one is more than half as large
// again (batches of any number of rows and contexts of any length ask for sizes that vary by a little). Zeroing a
// recycled buffer is still a pass over its memory; with a thread pool given, large buffers are zeroed by all its
// threads (more bandwidth than one core).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"

namespace corolla {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // At most `max_cached_bytes` wait in the pool; beyond that released buffers are freed.
  explicit BufferPool(size_t max_cached_bytes, std::shared_ptr<ThreadPool> zero_with = nullptr)
      : max_cached_(max_cached_bytes), zero_with_(std::move(zero_with)) {}
  ~BufferPool();

  // A zero-filled, 64-byte aligned buffer of `bytes`, returned to the pool when the last owner lets go.
  std::shared_ptr<void> acquire(size_t bytes);

 private:
  void release(void* p, size_t bytes);
  void zero(void* p, size_t bytes);

  std::mutex mutex_;
  std::multimap<size_t, void*> free_;
  size_t cached_ = 0;
  size_t max_cached_;
  std::shared_ptr<ThreadPool> zero_with_;
};

}  // namespace corolla
