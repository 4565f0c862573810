// Random worlds for the simulator as a bug-finder: a whole scenario drawn from one seed. The model's shape, the
// regions and their latencies, classes of servers (spans, speeds, caches, batching), the clients' workload (prompt
// and generation lengths, relay or push, timeouts, spot checks) and faults (crashes, graceful leaves, freezes,
// partitions, latency spikes, joins, restarts with the same identity, message loss), each within ranges the simulator
// runs in a few seconds of wall time. Faults fall in a window after the sessions start; the run ends with a quiet tail
// long enough for every invariant's bound (sim/invariants.hpp), so a violation is the swarm's doing, not the world's
// end cutting it short.
//
//   scenario sc = random_scenario(42);   // the same seed, the same world
//   World(sc, sc.seed).run();
#pragma once

#include <cstdint>

#include "sim/scenario.hpp"

namespace corolla::sim {

scenario random_scenario(uint64_t seed);

}  // namespace corolla::sim
