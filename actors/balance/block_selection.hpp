// Which span a new server should host: the window of `num_blocks` whose blocks are served the weakest.
// Per-block strength is the sum of the throughputs of the servers covering it; among windows, the one whose
// sorted strengths are lexicographically smallest wins (it lifts the weakest block first), ties to the lowest
// start. A server that already holds a window (reserved while joining) re-chooses the same way over the others'
// strengths, keeping its window when another is only as good. Plain functions over server infos, unit-tested
// without actors.
#pragma once

#include <cstdint>
#include <vector>

#include "actors/protocol/messages.hpp"

namespace corolla {

// Throughput of each block [0, total_blocks) summed over `servers` (a server announcing 0 counts as 1).
std::vector<double> block_throughputs(const std::vector<server_info>& servers, int64_t total_blocks);

// The first block of the chosen window [first, first + num_blocks).
int64_t choose_first_block(const std::vector<double>& throughputs, int64_t num_blocks);

// The best first block for a server of `rate` that holds [current_first, current_first + num_blocks), given the
// throughputs of the *other* servers: choose_first_block, with its own window weighed a little weaker (Petals'
// 1 + eps), so that an equally good other window does not make it move.
int64_t rechoose_first_block(std::vector<double> others, int64_t num_blocks, int64_t current_first, double rate);

}  // namespace corolla
