#include "model/kv_pool.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

namespace corolla {

KvPool::KvPool(Backend& backend, int64_t pages, int64_t page_tokens, int64_t kv_heads, int64_t head_dim, DType dtype) {
  if (pages < 1 || pages > INT32_MAX || page_tokens < 1 || kv_heads < 1 || head_dim < 1)
    throw std::invalid_argument("a KV pool of " + std::to_string(pages) + " pages of " + std::to_string(page_tokens) +
                                " tokens");
  if (!backend.supports_kv(dtype))
    throw std::invalid_argument("the " + backend.name() + " backend keeps no KV cache in " +
                                std::string(dtype_name(dtype)));
  k_ = backend.alloc_reserve(dtype, {pages, page_tokens, kv_heads, head_dim});
  v_ = backend.alloc_reserve(dtype, {pages, page_tokens, kv_heads, head_dim});
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

std::optional<KVCache> KVCache::take(std::shared_ptr<KvPool> pool, int64_t batch, int64_t max_length, int64_t window) {
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
  cache.owned_ = *pages;
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
  owned_ = std::move(other.owned_);
  version_ = std::exchange(other.version_, 0);
  batch_ = std::exchange(other.batch_, 0);
  max_length_ = std::exchange(other.max_length_, 0);
  ring_ = std::exchange(other.ring_, false);
  id_ = std::exchange(other.id_, 0);
  other.table_.clear();
  other.owned_.clear();
  return *this;
}

void KVCache::release() {
  if (pool_ && !owned_.empty()) pool_->give_back(owned_);
  pool_.reset();
  table_.clear();
  owned_.clear();
}

void KVCache::reorder(std::span<const int32_t> sources) {
  if (auto problem = hypothesis_ids_problem(sources, batch_); !problem.empty()) throw std::invalid_argument(problem);
  bool identity = true;
  for (size_t b = 0; b < sources.size(); ++b) identity = identity && sources[b] == static_cast<int32_t>(b);
  if (identity) return;
  const size_t pps = table_.size() / static_cast<size_t>(batch_);
  std::vector<int32_t> next(table_.size());
  for (size_t b = 0; b < sources.size(); ++b)
    std::copy_n(table_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(sources[b]) * pps), pps,
                next.begin() + static_cast<std::ptrdiff_t>(b * pps));
  table_ = std::move(next);
  ++version_;
}

void KVCache::make_writable(Backend& backend, std::span<const int32_t> positions, int64_t tokens) {
  if (version_ == 0 || batch_ == 0) return;  // never reordered: every page is one sequence's own
  if (tokens < 1 || static_cast<int64_t>(positions.size()) != batch_ * tokens)
    throw std::invalid_argument("copy-on-write: " + std::to_string(positions.size()) + " positions for " +
                                std::to_string(batch_) + " sequences of " + std::to_string(tokens) + " tokens");
  const int64_t page = pool_->page_tokens(), pps = static_cast<int64_t>(table_.size()) / batch_;
  std::map<int32_t, int> uses;
  for (int32_t p : table_) ++uses[p];
  std::vector<int32_t> spare;
  for (int32_t p : owned_)
    if (!uses.count(p)) spare.push_back(p);
  const Tensor k = pool_->k(), v = pool_->v();
  const int64_t row = k.dim(2) * k.dim(3);
  if (k.dim(0) * page > INT32_MAX) throw std::invalid_argument("copy-on-write: a pool of more than 2^31 rows");
  const Tensor k_rows = k.reshaped({k.dim(0) * page, row}), v_rows = v.reshaped({v.dim(0) * page, row});
  for (int64_t b = 0; b < batch_; ++b) {
    std::set<int64_t> written;  // the sequence's table entries its positions fall in
    for (int64_t i = 0; i < tokens; ++i) {
      const int32_t s = positions[static_cast<size_t>(b * tokens + i)];
      if (s < 0) throw std::invalid_argument("copy-on-write: position " + std::to_string(s));
      written.insert((s / page) % pps);
    }
    for (int64_t entry : written) {
      int32_t& slot = table_[static_cast<size_t>(b * pps + entry)];
      if (uses[slot] < 2) continue;
      if (spare.empty()) throw std::logic_error("copy-on-write: a cache ran out of its own pages");
      const int32_t copy = spare.back();
      spare.pop_back();
      std::vector<int32_t> from(static_cast<size_t>(page));
      for (int64_t r = 0; r < page; ++r) from[static_cast<size_t>(r)] = static_cast<int32_t>(slot * page + r);
      Tensor k_to = k_rows.slice_rows(copy * page, (copy + 1) * page);
      Tensor v_to = v_rows.slice_rows(copy * page, (copy + 1) * page);
      backend.gather_rows(k_rows, from, k_to);
      backend.gather_rows(v_rows, from, v_to);
      --uses[slot];
      uses[copy] = 1;
      slot = copy;
    }
  }
}

}  // namespace corolla
