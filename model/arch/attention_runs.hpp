// A batch's attention in as few calls as its caches allow. Each call costs the backend a dispatch to its threads
// (on a GPU, a kernel launch) whatever its size, and a decode step's attention per session is tiny. Adjacent
// segments that each attend over their session's own cache (not a ring) with as many tokens per sequence therefore
// join one run: one call over their caches' page tables side by side (32 chats: 8 % more tokens/s on the CPU,
// docs/PERFORMANCE.md). Every other segment is a run of its own, with its StepCache.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "kernels/kv_pages.hpp"
#include "model/arch/step_cache.hpp"
#include "model/block.hpp"

namespace corolla {

// Rows [row, row + batch·tokens) of the batch: `batch` sequences of `tokens` tokens each, their keys and values
// written at `slots` of `pages` and their queries attending from `positions`.
struct AttentionRun {
  int64_t row = 0, batch = 1, tokens = 1;
  std::span<const int32_t> positions, slots;
  KvPages pages;
  // Whether the slots are the positions (sessions' caches): RoPE and the KV append can be one operation.
  bool at_positions = false;
  int64_t rows() const { return batch * tokens; }
  // This run's rows of t [M, ...] (a view).
  Tensor rows_of(const Tensor& t) const { return t.slice_rows(row, row + rows()); }
};

class AttentionRuns {
 public:
  // The runs of forward_batch's `segments` through `block` (checked by check_segments). Throws as StepCache does
  // for a segment whose cache holds another number of sequences.
  AttentionRuns(Block& block, std::span<const BlockSegment> segments);
  AttentionRuns(const AttentionRuns&) = delete;
  AttentionRuns& operator=(const AttentionRuns&) = delete;

  auto begin() const { return runs_.begin(); }
  auto end() const { return runs_.end(); }
  size_t size() const { return runs_.size(); }

 private:
  std::deque<StepCache> steps_;              // a lone segment's cache (a scratch one where it has none)
  std::deque<std::vector<int32_t>> joined_;  // a joined run's page table and positions
  std::vector<AttentionRun> runs_;
};

}  // namespace corolla
