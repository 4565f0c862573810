// The balancer: the actor that decides which blocks a server started with num_blocks hosts, and moves it when
// the swarm needs it elsewhere. One per such server, owned by the server_node supervisor.
//
// Joining: after a random delay (uniform in [0, period / 6], at most 10 s; period = mean_check_period) it reads the
// swarm from the DHT, takes the window of num_blocks blocks served the weakest (choose_first_block) and announces
// it while still joining (nothing loaded). It re-reads after another random delay (uniform in [0, period / 2], at
// most 30 s) and re-chooses over the others' announcements (rechoose_first_block): servers started together
// thus spread out one at a time before any of them loads, instead of all taking the first window of an empty
// swarm. A re-read that keeps the span, or the third change, loads it.
//
// Serving: it checks every so often (a random delay, uniform in [0, 2 × mean_check_period], so that servers
// started together do not check, and move, together) whether moving would raise the swarm's weakest block enough
// (check_rebalance with check_quality: balance_quality, or 1 while the settling window is open and no session
// is). The window opens one period after the swarm last grew (a read showed an address not seen before, or this
// server loaded) and stays open two periods, with checks 3 times as often: servers that arrived one after the
// other, each choice good when made and the whole uneven, re-place themselves while that is cheap, and a settled
// swarm keeps Petals' rule. A move never leaves a block uncovered: check_rebalance allows it only when every
// block of the current span has another online server, and the move goes
//   announce "offline" (old blocks) -> gate to the new span ("joining") -> announce -> load -> install -> announce
// Time and randomness come from the actor system (delayed messages, an RNG seeded with `seed`), so under a
// deterministic scheduler (tests, the simulator) a swarm's whole history replays from its seeds.
//
// A failure to load ends the balancer with the error, and with it (through the supervisor's links) the server.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <functional>
#include <string>

#include "actors/balance/rebalance.hpp"
#include "actors/dht/dht_api.hpp"
#include "actors/protocol/gate_interface.hpp"

namespace corolla {

struct balancer_event {
  enum kind_t { placed, checked, moved, failed } kind = placed;
  int64_t first = 0, last = 0;  // the span served after a placement or move
  rebalance_check check;        // checked and moved: the decision
  bool settling = false;        // checked and moved: made while the settling window was open
  int rechoices = 0;            // placed: how often the span changed while joining, before anything loaded
  std::string error;            // failed
};

struct balancer_options {
  std::string model_prefix;
  int64_t num_blocks = 1;
  double balance_quality = 0.75;  // Petals' default; 0 never moves, above 1 moves whenever a better place exists
  caf::timespan mean_check_period = std::chrono::seconds(120);  // Petals' mean_balance_check_period
  caf::timespan request_timeout = std::chrono::seconds(60);     // DHT reads, announcements, the gate
  uint64_t seed = 1;
  // Called in the balancer's context on every event (logs, the command's "serving blocks" line, tests).
  std::function<void(const balancer_event&)> on_event;
};

// `gate`: the server's span gate (its address and total_blocks are read from its info; spawned with an empty
// span); `dht`: the server's DHT node; `announcer`: its announcer; `loader`: spawn_block_loader.
// What the balancer asks of the server's gate: its info, and the node's control (a move to other blocks, the
// blocks once loaded).
using balanced_gate = span_gate_control::extend<caf::replies_to<info_request>::with<server_info>>;

// The balancer's interface: a check of the swarm's balance now (its own timer sends it at random times).
using balancer_handle = caf::typed_actor<caf::reacts_to<balance_atom>>;

balancer_handle spawn_balancer(caf::actor_system& sys, balancer_options options, balanced_gate gate, dht_node_actor dht,
                               announcer_handle announcer, caf::actor loader);

}  // namespace corolla
