// The simulated swarm: the real actors of every node (servers: span gate, block actors over the cost backend, DHT
// node, announcer, balancer, under their supervisor; clients: swarm client, its DHT node and inference
// sessions) in one actor system under CAF's deterministic scheduler, joined by the simulated network (a
// connector and links per node). The world adds only what a scenario describes from outside: when servers start,
// crash, leave, freeze or are cut off, and when sessions arrive (each driven by a small workload actor that opens
// a session, generates, and records what happened).
//
//   World w(read_scenario("sim/scenarios/churn.toml"), seed);
//   w.run();                 // to the scenario's end in virtual time
//   w.results(); w.log().text();
//
// The run is a discrete-event loop on one thread: run every message that can run, then move the clock to the
// next timer (a delayed message, a timeout, a world event) and fire it. Same scenario and seed: same events in
// the same order, so the same log and report.
#pragma once

#include <memory>

#include "sim/event_log.hpp"
#include "sim/results.hpp"
#include "sim/scenario.hpp"

namespace corolla::sim {

class World {
 public:
  World(scenario sc, uint64_t seed);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  // Runs to the end of the scenario's duration. Progress lines (virtual time, events) go to `progress` when
  // it is set.
  void run(std::ostream* progress = nullptr);

  const sim_results& results() const;
  const EventLog& log() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace corolla::sim
