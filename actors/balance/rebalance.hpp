// Whether a serving server should move to other blocks: Petals' rebalancing rule, as a plain function over the
// swarm's announcements (unit-tested without actors; the balancer actor applies it).
//
// The swarm's strength is its weakest block (per-block throughput = sum over the servers covering it). The check
// takes this server out, finds where it would do most good (choose_first_block), puts it there, then lets every
// other server do the same in a random order until nobody moves: the minimum after that is what the swarm could
// reach. If the minimum now is below `balance_quality` times that, moving is worth the interruption.
//
// A server in its settling window (minutes after the swarm last grew, balancer.hpp) that holds no session checks
// with quality 1 instead: it moves whenever that raises what the swarm can reach at all. Such a move costs a
// reload but interrupts nobody, and it is what lets servers placed one by one (each choice good when made, the
// whole uneven) settle into a better cover; afterwards the swarm keeps Petals' rule and its meaning.
//
// On top of Petals' rule, a move must never leave a block uncovered: the server loads its new blocks only after
// it has announced itself offline, so each block it serves now must also be served by another online server.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "actors/protocol/messages.hpp"

namespace corolla {

struct rebalance_check {
  bool move = false;
  int64_t new_first = 0;     // the first block of the span this server should take (when move)
  double current_min = 0;    // the swarm's weakest block throughput now
  double reachable_min = 0;  // after this move and every other server's best response
  double quality = 1;        // current_min / reachable_min
  std::string reason;        // why (not) move, for logs and tests
};

// `swarm`: the servers announced (joining or online; offline ones left out by the caller), including this one
// (`self_address`). Servers announcing throughput 0 count as 1 (as in block_throughputs). `rng` orders the
// simulated moves of the other servers. Throws std::invalid_argument when self_address is not in `swarm`.
// The quality a check applies: `balance_quality`, or 1 when it is above 0 (0 never moves) and the server is
// settling with no session open.
double check_quality(double balance_quality, bool settling, int64_t sessions);

rebalance_check check_rebalance(const std::vector<server_info>& swarm, const std::string& self_address,
                                int64_t total_blocks, double balance_quality, std::mt19937_64& rng);

}  // namespace corolla
