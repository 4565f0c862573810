// The properties a simulated swarm keeps whatever its world does: crashes, freezes, partitions, loss, joins. The
// world (sim/world.cpp) checks them while it runs and records each violation with the virtual time and the actors
// involved; a sweep of random worlds (sim/sweep.hpp) reports the seeds that broke one, and the same seed replays
// the same run.
//
//   session-progress  a session that has not ended makes progress (an open, a failed open, a token, its end)
//                     within stall_s; at the run's end every session has ended.
//   session-outcome   a completed session got exactly the tokens it asked for; a failed one says why; where the
//                     world has no fault at all and every block was served from a session's arrival to its end,
//                     the session completes.
//   session-output    (scenarios with check_outputs: the cost model computes digests, sim/cost_backend.hpp) a
//                     completed session's tokens are those the whole model, run in one process without faults,
//                     generates from its prompt: failover, replay, batching and routing change nothing. Where
//                     servers lie (a class's wrong_outputs), the clients' spot checks keep it: a session whose
//                     every check found a server to recompute on gets the same tokens, when the liars lie on
//                     every step or every step is checked (otherwise its steps may take a lie unchecked, and
//                     outputs are not compared).
//                     A training session's forward passes equal the whole model's blocks run in one process on the
//                     same input (in worlds without liars: training passes are not spot-checked).
//   cache-released    once every session has ended (settle_s before the check), each live server holds no
//                     session and its whole KV-cache budget.
//   block-coverage    while the live servers have spare capacity (their spans add up to twice the model), every
//                     block is served again within cover_s.
//   dht-readable      a server that has served the same span for dht_s is listed, with that span, by every live
//                     server's DHT node that is asked (its own record, signed with its key: an impostor's copy
//                     under another key does not hide it). Not while it moves: from its balancer's decision its
//                     record says "offline", then "joining" with the span it loads.
//   forged-refused    no node stores a forged record (one its subkey's owner did not sign as it is) that a hostile
//                     peer sends it ([hostile] forge, sim/forgery.hpp).
//   request-answered  a request that crossed the network is answered (an error counts) before its timeout when
//                     its receiver ends while its node lives: only a fault (a crash, freeze, partition, latency
//                     spike or lost message) leaves a requester to its timeout.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace corolla::sim {

struct scenario;

struct invariant_violation {
  std::string invariant;  // one of invariant_names()
  double t_s = 0;         // virtual time of the observation that broke it
  std::string actors;     // who was involved ("session=3 client=1", "srv-4")
  std::string what;       // what was seen
};

// The names above, in that order.
const std::vector<std::string>& invariant_names();

// How long each property may take to hold again, from the scenario's own timeouts and periods.
struct invariant_bounds {
  double stall_s = 0;   // session-progress
  double settle_s = 0;  // cache-released: after the last session ended
  double cover_s = 0;   // block-coverage: from the moment the swarm could cover every block
  double dht_s = 0;     // dht-readable: from a server's last placement, move, start or thaw
};
invariant_bounds bounds_for(const scenario& sc);

// Follows block coverage over time for block-coverage: feed it the world at each sample. It reports a gap once,
// when the swarm could have covered every block for longer than the bound and still does not.
class CoverageWatch {
 public:
  explicit CoverageWatch(double bound_s) : bound_s_(bound_s) {}
  // `coverable`: the live servers have spare capacity; `covered`: every block is served. Returns the violation's
  // description the first time a gap outlasts the bound.
  std::optional<std::string> observe(double t_s, bool coverable, bool covered);

 private:
  double bound_s_;
  std::optional<double> gap_since_;  // coverable and uncovered since
  bool reported_ = false;            // this gap already reported
};

// Whether the span sizes of the live servers leave spare capacity over a model of `blocks`: together they could
// serve it twice (so no single placement can be forced to leave a hole).
bool spare_capacity(const std::vector<int64_t>& live_spans, int64_t blocks);

}  // namespace corolla::sim
