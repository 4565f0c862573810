#include "kernels/cpu/buffer_pool.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

namespace corolla {

namespace {
// Below this a buffer is zeroed by the calling thread alone: the hand-off would cost more than it saves.
constexpr size_t kParallelZeroBytes = size_t{1} << 20;
constexpr int64_t kZeroGrainBytes = 64 * 1024;
// A waiting buffer serves a request when it exceeds what the request needs by at most 1 / kSlack of that (a half).
constexpr size_t kSlack = 2;
}  // namespace

void BufferPool::zero(void* p, size_t bytes) {
  if (!zero_with_ || bytes < kParallelZeroBytes) {
    std::memset(p, 0, bytes);
    return;
  }
  char* c = static_cast<char*>(p);
  zero_with_->parallel_for(static_cast<int64_t>(bytes), kZeroGrainBytes,
                           [c](int64_t b, int64_t e) { std::memset(c + b, 0, static_cast<size_t>(e - b)); });
}

BufferPool::~BufferPool() {
  for (auto& [bytes, p] : free_) std::free(p);
}

std::shared_ptr<void> BufferPool::acquire(size_t bytes) {
  const size_t wanted = (bytes + 63) / 64 * 64 + 64;
  void* p = nullptr;
  size_t size = wanted;
  {
    std::lock_guard lock(mutex_);
    // The smallest waiting buffer that holds it, if not much larger: sizes vary with every batch's rows and every
    // context's length, and a buffer of the exact size is rarely waiting.
    if (auto it = free_.lower_bound(wanted); it != free_.end() && it->first - wanted <= wanted / kSlack) {
      p = it->second;
      size = it->first;
      cached_ -= size;
      free_.erase(it);
    }
  }
  if (!p && !(p = std::aligned_alloc(64, size))) throw std::bad_alloc();
  zero(p, wanted);
  // The pool outlives its buffers only if someone holds it: the deleter keeps it alive.
  std::weak_ptr<BufferPool> pool = weak_from_this();
  return std::shared_ptr<void>(p, [pool, size](void* q) {
    if (auto owner = pool.lock())
      owner->release(q, size);
    else
      std::free(q);
  });
}

void BufferPool::release(void* p, size_t bytes) {
  {
    std::lock_guard lock(mutex_);
    if (cached_ + bytes <= max_cached_) {
      free_.emplace(bytes, p);
      cached_ += bytes;
      return;
    }
  }
  std::free(p);
}

}  // namespace corolla
