#include "model/kv_pool.hpp"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <utility>

namespace corolla {

KvPool::KvPool(Backend& backend, int64_t pages, int64_t page_tokens, int64_t kv_heads, int64_t head_dim) {
  if (pages < 1 || pages > INT32_MAX || page_tokens < 1 || kv_heads < 1 || head_dim < 1)
    throw std::invalid_argument("a KV pool of " + std::to_string(pages) + " pages of " + std::to_string(page_tokens) +
                                " tokens");
  k_ = backend.alloc_reserve(DType::f32, {pages, page_tokens, kv_heads, head_dim});
  v_ = backend.alloc_reserve(DType::f32, {pages, page_tokens, kv_heads, head_dim});
  free_.resize(static_cast<size_t>(pages));
  for (size_t i = 0; i < free_.size(); ++i) free_[i] = static_cast<int32_t>(pages - 1 - static_cast<int64_t>(i));
}

int64_t KvPool::free_pages() const {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(free_.size());
}

std::optional<std::vector<int32_t>> KvPool::take(int64_t n) {
  std::lock_guard lock(mutex_);
  if (n < 0 || n > static_cast<int64_t>(free_.size())) return std::nullopt;
  std::vector<int32_t> out(free_.end() - n, free_.end());
  std::reverse(out.begin(), out.end());
  free_.resize(free_.size() - static_cast<size_t>(n));
  return out;
}

void KvPool::give_back(std::span<const int32_t> pages) {
  std::lock_guard lock(mutex_);
  free_.insert(free_.end(), pages.begin(), pages.end());
  std::sort(free_.begin(), free_.end(), std::greater<>());
}

std::optional<KVCache> KVCache::take(std::shared_ptr<KvPool> pool, int64_t batch, int64_t max_length,
                                     int64_t window) {
  if (!pool || batch < 1 || max_length < 1) throw std::invalid_argument("a KV cache of no sequences or no tokens");
  const int64_t slots = kv_slots_for(max_length, window, pool->page_tokens());
  const int64_t per_sequence = kv_pages_for(slots, pool->page_tokens());
  int64_t n = 0;
  if (__builtin_mul_overflow(batch, per_sequence, &n)) return std::nullopt;
  auto pages = pool->take(n);
  if (!pages) return std::nullopt;
  static std::atomic<uint64_t> next_id{1};
  KVCache cache;
  cache.pool_ = std::move(pool);
  cache.table_ = std::move(*pages);
  cache.batch_ = batch;
  cache.max_length_ = max_length;
  cache.ring_ = slots < max_length;
  cache.id_ = next_id.fetch_add(1, std::memory_order_relaxed);
  return cache;
}

KVCache& KVCache::operator=(KVCache&& other) noexcept {
  if (this == &other) return *this;
  release();
  pool_ = std::move(other.pool_);
  table_ = std::move(other.table_);
  batch_ = std::exchange(other.batch_, 0);
  max_length_ = std::exchange(other.max_length_, 0);
  ring_ = std::exchange(other.ring_, false);
  id_ = std::exchange(other.id_, 0);
  other.table_.clear();
  return *this;
}

void KVCache::release() {
  if (pool_ && !table_.empty()) pool_->give_back(table_);
  pool_.reset();
  table_.clear();
}

}  // namespace corolla
