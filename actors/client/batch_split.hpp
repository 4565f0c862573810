// How a training batch is divided into sub-batches, each of which gets a route of its own (so a large batch is
// spread over several servers of the same blocks, as Petals does).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace corolla {

// Sub-batches for `batch` sequences of `tokens` tokens with at most `max_tokens` tokens per request (at least one
// sequence each): their sizes, in order, as equal as possible. An even split, until the balancer provides one in
// proportion to the servers' throughput.
inline std::vector<int64_t> split_batch_evenly(int64_t batch, int64_t tokens, int64_t max_tokens) {
  const int64_t per_part = std::max<int64_t>(1, max_tokens / std::max<int64_t>(1, tokens));
  const int64_t parts = std::max<int64_t>(1, (batch + per_part - 1) / per_part);
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < parts; ++i) sizes.push_back(batch / parts + (i < batch % parts ? 1 : 0));
  return sizes;
}

}  // namespace corolla
