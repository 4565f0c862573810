// The KV cache a block's forward writes into and the slots it writes at. With a session's cache, the tokens' own
// positions. Without one (the stateless forward: training, spot checks), a scratch cache of each sequence's own t
// tokens at slot = index in the sequence, so positions only rotate queries and keys (and ALiBi distances are those
// within the sequence, as BLOOM computes them).
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/block.hpp"

namespace corolla {

// Throws std::invalid_argument unless hidden is [M, hidden_size] and the segments are well formed rows of it that
// do not overlap (Block::forward_batch's contract).
void check_segments(int64_t block, int64_t hidden_size, const Tensor& hidden, std::span<const BlockSegment> segments);

// Rows [s.row, s.row + s.rows()) of t [M, ...]: one segment's share of a batched activation (a view).
inline Tensor segment_rows(const Tensor& t, const BlockSegment& s) { return t.slice_rows(s.row, s.row + s.rows()); }

// Slot = index in the sequence, for each of b sequences of t tokens.
inline std::vector<int32_t> sequence_slots(int64_t b, int64_t t) {
  std::vector<int32_t> slots(static_cast<size_t>(b * t));
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<int32_t>(static_cast<int64_t>(i) % t);
  return slots;
}

class StepCache {
 public:
  // b sequences of t tokens at `positions` through `block`, with the session's `cache` or none. Throws
  // std::invalid_argument when the session's cache holds another number of sequences.
  StepCache(Block& block, KVCache* cache, int64_t b, int64_t t, std::span<const int32_t> positions)
      : cache_(cache), slots_(positions) {
    if (!cache_) {
      scratch_ = block.make_cache(b, t);
      cache_ = &scratch_;
      own_slots_ = sequence_slots(b, t);
      slots_ = own_slots_;
    } else if (cache_->batch() != b) {
      throw std::invalid_argument("block " + std::to_string(block.index()) + ": batch of " + std::to_string(b) +
                                  " does not match the session's cache batch " + std::to_string(cache_->batch()));
    }
  }
  StepCache(const StepCache&) = delete;
  StepCache& operator=(const StepCache&) = delete;

  KVCache& cache() { return *cache_; }
  std::span<const int32_t> slots() const { return slots_; }
  // Whether the slots are the positions (a session's cache): RoPE and the KV append can be one operation.
  bool at_positions(std::span<const int32_t> positions) const { return slots_.data() == positions.data(); }

 private:
  KVCache scratch_;
  std::vector<int32_t> own_slots_;
  KVCache* cache_;
  std::span<const int32_t> slots_;
};

}  // namespace corolla
