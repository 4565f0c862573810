// Which span a new server should host: the window of `num_blocks` whose blocks are served the weakest.
// Per-block strength is the sum of the throughputs of the servers covering it; among windows, the one whose
// sorted strengths are lexicographically smallest wins (it lifts the weakest block first), ties to the lowest
// start. Plain functions over server infos, unit-tested without actors.
#pragma once

#include <cstdint>
#include <vector>

#include "actors/protocol/messages.hpp"

namespace corolla {

// Throughput of each block [0, total_blocks) summed over `servers` (a server announcing 0 counts as 1).
std::vector<double> block_throughputs(const std::vector<server_info>& servers, int64_t total_blocks);

// The first block of the chosen window [first, first + num_blocks).
int64_t choose_first_block(const std::vector<double>& throughputs, int64_t num_blocks);

}  // namespace corolla
