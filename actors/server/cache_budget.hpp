// The KV-cache budget of a server, counted as its blocks' pools count it: each hosted block has a pool of
// kv_pool_pages(cache_tokens) pages (model/kv_pool.hpp), and a session of `batch` sequences of up to `max_length`
// tokens over blocks [first, last) holds batch · kv_pages_for(max_length) pages of each of them from open to
// close. Reserving up front means a step never fails for lack of memory half-way through a generation, and counting
// the same pages as the pools means a reservation granted here always finds its pages there.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/kv_pool.hpp"

namespace corolla {

class CacheBudget {
 public:
  CacheBudget(int64_t tokens_per_block, int64_t blocks)
      : pages_per_block_(kv_pool_pages(tokens_per_block)), used_(static_cast<size_t>(std::max<int64_t>(blocks, 0))) {}

  // The pages of each block a session of `batch` sequences of up to `max_length` tokens holds.
  static int64_t pages_for(int64_t batch, int64_t max_length) { return batch * kv_pages_for(max_length); }

  // Reserves `pages` of each of blocks [first, last) (indices among the hosted ones), or nothing if one lacks them.
  bool try_reserve(size_t first, size_t last, int64_t pages) {
    if (pages <= 0 || first >= last || last > used_.size()) return false;
    for (size_t i = first; i < last; ++i)
      if (pages > pages_per_block_ - used_[i]) return false;
    for (size_t i = first; i < last; ++i) used_[i] += pages;
    return true;
  }
  void release(size_t first, size_t last, int64_t pages) {
    for (size_t i = first; i < last && i < used_.size(); ++i) used_[i] = std::max<int64_t>(0, used_[i] - pages);
  }
  // The tokens a new sequence could still hold in every hosted block (what ServerInfo announces).
  int64_t tokens_left_per_block() const {
    int64_t least = used_.empty() ? 0 : pages_per_block_;
    for (int64_t u : used_) least = std::min(least, pages_per_block_ - u);
    return least * kKvPageTokens;
  }

 private:
  int64_t pages_per_block_;
  std::vector<int64_t> used_;  // pages reserved, per hosted block
};

}  // namespace corolla
