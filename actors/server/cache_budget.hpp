// The KV-cache budget of a server, counted as its blocks' pools count it: each hosted block has a pool of
// kv_pool_pages(cache_tokens) pages (model/kv_pool.hpp), and a session of `batch` sequences of up to `max_length`
// tokens holds, from open to close, batch · kv_pages_for(kv_slots_for(max_length, window)) pages of each block it
// runs through: its whole length, or only a ring of the window where the block's attention slides. Reserving up
// front means a step never fails for lack of memory half-way through a generation, and counting the same pages as
// the pools means a reservation granted here always finds its pages there.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/kv_pool.hpp"

namespace corolla {

class CacheBudget {
 public:
  // `windows`: each hosted block's attention window (0: the whole history).
  CacheBudget(int64_t tokens_per_block, std::vector<int64_t> windows, int64_t max_position)
      : pages_per_block_(kv_pool_pages(tokens_per_block)),
        max_position_(max_position),
        windows_(std::move(windows)),
        used_(windows_.size(), 0) {}

  // The pages of hosted block i a session of `batch` sequences of up to `max_length` tokens holds.
  int64_t pages_for(size_t i, int64_t batch, int64_t max_length) const {
    return batch * kv_pages_for(kv_slots_for(max_length, i < windows_.size() ? windows_[i] : 0));
  }

  // Reserves what such a session holds of hosted blocks [first, last), or nothing if one of them lacks it.
  bool try_reserve(size_t first, size_t last, int64_t batch, int64_t max_length) {
    if (first >= last || last > used_.size()) return false;
    for (size_t i = first; i < last; ++i)
      if (pages_for(i, batch, max_length) > pages_per_block_ - used_[i]) return false;
    for (size_t i = first; i < last; ++i) used_[i] += pages_for(i, batch, max_length);
    return true;
  }
  void release(size_t first, size_t last, int64_t batch, int64_t max_length) {
    for (size_t i = first; i < last && i < used_.size(); ++i)
      used_[i] = std::max<int64_t>(0, used_[i] - pages_for(i, batch, max_length));
  }
  // The longest sequence a new session could still open through every hosted block (what ServerInfo announces):
  // its free pages' tokens, or the whole context where a block's ring of its window fits in them.
  int64_t tokens_left_per_block() const {
    if (used_.empty()) return 0;
    int64_t least = max_position_;
    for (size_t i = 0; i < used_.size(); ++i) {
      const int64_t free = (pages_per_block_ - used_[i]) * kKvPageTokens;
      const bool ring_fits = windows_[i] > 0 && kv_slots_for(max_position_, windows_[i]) <= free;
      least = std::min(least, ring_fits ? max_position_ : free);
    }
    return least;
  }

 private:
  int64_t pages_per_block_;
  int64_t max_position_;
  std::vector<int64_t> windows_;  // per hosted block
  std::vector<int64_t> used_;     // pages reserved, per hosted block
};

}  // namespace corolla
