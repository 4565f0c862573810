// Many worlds, each in a process of its own: a sweep runs random worlds (sim/random_world.hpp) seed after seed,
// `jobs` at a time, and collects what each run saw: the invariants it broke (sim/invariants.hpp), or that it
// crashed or ran past its wall-clock limit. A process per world keeps a crash from taking the sweep down and
// lets the cores share the work; the runs themselves stay single-threaded and deterministic, so any seed
// replays alone (`corolla sim --random --seed S`) to the same events.
//
// A failing world can then be shrunk: fewer faults, sessions, clients and servers, and shorter generations, as
// long as it still breaks the same invariant; what is left is a scenario file to keep as a regression.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "sim/invariants.hpp"
#include "sim/scenario.hpp"

namespace corolla::sim {

// What one run of a world came to.
struct world_outcome {
  uint64_t seed = 0;
  std::vector<invariant_violation> violations;  // the first few, in the order seen
  std::string crash;  // "" when the run finished: else how the process ended ("signal 11", "over 600 s of wall time")
  int64_t sessions = 0, completed = 0;
  double wall_s = 0;
  bool failed() const { return !crash.empty() || !violations.empty(); }
  // The invariant broken first, "crash" for a crash, "" when none.
  std::string first_failure() const;
};

// Runs `sc` with `seed` in a child process limited to `wall_limit_s` of wall time.
world_outcome run_isolated(const scenario& sc, uint64_t seed, double wall_limit_s);

struct sweep_options {
  std::vector<uint64_t> seeds;  // of the random worlds to run
  int jobs = 1;
  double wall_limit_s = 600;
  std::ostream* progress = nullptr;  // a line per failing seed, and every tenth of the sweep
};

// The random worlds of the seeds; the outcomes in the seeds' order.
std::vector<world_outcome> run_sweep(const sweep_options& o);

// A smaller world that still breaks `invariant` (the failing world itself when nothing smaller does), trying at
// most `max_runs` candidates.
scenario shrink(const scenario& failing, uint64_t seed, const std::string& invariant, int max_runs, double wall_limit_s,
                std::ostream* progress);

}  // namespace corolla::sim
