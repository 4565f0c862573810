// The KV pages of one block: one pool of keys and values from which the sessions' caches take their pages, so that
// sessions of any length share a block's cache budget without fragmenting it, and a KVCache: one cache's pages.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/backend.hpp"

namespace corolla {

// Tokens per page: a session's cache rounds each sequence up to whole pages. 64 keeps a decode step's attention
// over a page one matrix product of a useful size on the CPU, and the rounding small beside a session's length.
inline constexpr int64_t kKvPageTokens = 64;

// Pages needed for `tokens` tokens of one sequence.
inline int64_t kv_pages_for(int64_t tokens, int64_t page_tokens = kKvPageTokens) {
  return tokens <= 0 ? 0 : (tokens - 1) / page_tokens + 1;
}

// The positions one sequence's cache holds at a block whose attention sees the last `window` positions (0: all):
// max_length, or, where fewer do, a ring of the window plus a page less one, rounded up to whole pages, which
// takes a step's new keys a page at a time (at least) without losing what its earliest query sees.
inline int64_t kv_slots_for(int64_t max_length, int64_t window, int64_t page_tokens = kKvPageTokens) {
  if (window <= 0 || window >= max_length) return max_length;
  const int64_t ring = kv_pages_for(window + page_tokens - 1, page_tokens) * page_tokens;
  return ring < max_length ? ring : max_length;
}

// The pages of a block's pool for a budget of `cache_tokens` tokens: rounded up to whole pages, at least one.
inline int64_t kv_pool_pages(int64_t cache_tokens) { return std::max<int64_t>(1, kv_pages_for(cache_tokens)); }

// Empty when `sources` can reorder `batch` sequences (one entry per sequence, each a sequence: beam search's
// hypothesis ids), else what is wrong. The one check of every place that takes them.
inline std::string hypothesis_ids_problem(std::span<const int32_t> sources, int64_t batch) {
  if (static_cast<int64_t>(sources.size()) != batch)
    return std::to_string(sources.size()) + " hypothesis ids for a batch of " + std::to_string(batch);
  for (int32_t s : sources)
    if (s < 0 || s >= batch)
      return "hypothesis id " + std::to_string(s) + " is outside 0.." + std::to_string(batch - 1);
  return {};
}

class KvPool {
 public:
  // `pages` pages of `page_tokens` tokens of `kv_heads` keys and values of `head_dim` on `backend`, held in `dtype`
  // (f32, or f16 where the backend reads it: Backend::supports_kv; std::invalid_argument otherwise); its memory is
  // taken as pages are first written where the backend allows (Backend::alloc_reserve).
  KvPool(Backend& backend, int64_t pages, int64_t page_tokens, int64_t kv_heads, int64_t head_dim,
         DType dtype = DType::f32);
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  int64_t pages() const { return k_.dim(0); }
  int64_t page_tokens() const { return k_.dim(1); }
  int64_t free_pages() const;
  // Bytes of keys and values per page.
  int64_t page_bytes() const { return (k_.nbytes() + v_.nbytes()) / pages(); }
  const Tensor& k() const { return k_; }
  const Tensor& v() const { return v_; }
  // n pages, the lowest free ones (so that a cache's pages are mostly consecutive: kernels read a run of them as
  // one matrix), or nothing when fewer than n are free.
  std::optional<std::vector<int32_t>> take(int64_t n);
  void give_back(std::span<const int32_t> pages);

 private:
  Tensor k_, v_;
  mutable std::mutex mutex_;
  std::vector<int32_t> free_;  // sorted from the highest page to the lowest: the lowest are taken from the back
};

// One block's KV cache for `batch` sequences of up to `max_length` tokens: pages of a pool, given back when the
// cache goes. Move-only.
class KVCache {
 public:
  KVCache() = default;
  // Pages for `batch` sequences of up to `max_length` positions from `pool` (kv_slots_for(max_length, window)
  // each: a ring where the block's attention `window` is shorter), or nothing when it has too few free.
  static std::optional<KVCache> take(std::shared_ptr<KvPool> pool, int64_t batch, int64_t max_length,
                                     int64_t window = 0);
  KVCache(KVCache&& other) noexcept { *this = std::move(other); }
  KVCache& operator=(KVCache&& other) noexcept;
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;
  ~KVCache() { release(); }

  // What kernels read and write: the pool and this cache's page table.
  KvPages pages() const { return {pool_->k(), pool_->v(), table_, batch_, ring_}; }
  int64_t batch() const { return batch_; }
  int64_t max_length() const { return max_length_; }
  int64_t nbytes() const { return pool_ ? static_cast<int64_t>(table_.size()) * pool_->page_bytes() : 0; }
  // Distinct for every cache ever made (a recording of steps over a cache is kept under it).
  uint64_t id() const { return id_; }

  // Beam search (Petals' hypo_ids): sequence b continues what sequence sources[b] held. The table's rows are
  // reassigned, so sequences that continue the same one share its pages until one of them writes
  // (make_writable). Throws std::invalid_argument unless sources has batch() entries in [0, batch()).
  void reorder(std::span<const int32_t> sources);
  // Copy-on-write before a step: each sequence b gets a page of its own, a copy, for every shared page that its
  // positions [b·tokens, (b + 1)·tokens) write into. The copies come from the pages this cache took at its start
  // and no sequence uses now, of which there is always one for each (no sequence holds more than its share).
  void make_writable(Backend& backend, std::span<const int32_t> positions, int64_t tokens);
  // How many times reorder changed the table (0: never; a recording of steps bakes the table in).
  uint64_t version() const { return version_; }

 private:
  void release();
  std::shared_ptr<KvPool> pool_;
  std::vector<int32_t> table_;
  std::vector<int32_t> owned_;  // every page taken (the table may name some twice and some not at all)
  int64_t batch_ = 0, max_length_ = 0;
  bool ring_ = false;
  uint64_t id_ = 0, version_ = 0;
};

}  // namespace corolla
