// A span's history: the hidden states a span of servers has taken, step by step, so that a replacement server
// can rebuild the span's KV cache by running them again (replay).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.hpp"

namespace corolla {

// One step's input to a span: hidden f32 [batch, tokens, hidden] on the host, positions [batch * tokens].
struct history_entry {
  Tensor hidden;
  std::vector<int32_t> positions;
};

// Joins consecutive steps into as few replay steps as possible: a step joins the previous one when, for every
// sequence, its first position follows that one's last. The result, run in order, writes the same cache entries
// as the steps one by one (causal attention makes a joined step equal to its parts run in turn).
std::vector<history_entry> merge_for_replay(const std::vector<history_entry>& steps);

// Beam search (a step's hypo_ids): sequence b of every entry becomes what sequence sources[b] was, so that the
// history, replayed, rebuilds the caches the servers reordered. sources has one entry per sequence, each a
// sequence of the entries (the gates checked as much before running the step).
void reorder_sequences(std::vector<history_entry>& steps, const std::vector<int32_t>& sources);

}  // namespace corolla
