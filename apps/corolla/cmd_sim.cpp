// corolla sim: the deterministic swarm simulator (the real actors, virtual time and network; sim/world.hpp).
//
//   corolla sim SCENARIO.toml [--seed S] [--out DIR]   one scenario
//   corolla sim --random --seed S [--out DIR]          one random world (sim/random_world.hpp)
//   corolla sim --sweep N [--from S] [--jobs J]        N random worlds, a process each (sim/sweep.hpp)
//   corolla sim --seeds S,S,... [--jobs J]             those random worlds
//   ... --shrink                                       a failing world made smaller, written as a scenario file
//
// A run writes into DIR:
//   events.log     one line per event, in virtual time
//   report.json    sessions, failovers, coverage, throughput, traffic, invariants broken (same seed, same bytes)
//   report.html    the same, with SVG plots, self-contained
//   run.json       what the run cost here: wall time, events per second, peak memory (differs between runs)
//   scenario.toml  the world that ran (a random one, or the file's as read)
// and prints a summary. Exit code: 3 when an invariant was broken (sim/invariants.hpp) or a sweep's world crashed;
// else, for a scenario file, 2 when some session did not complete; 0 otherwise.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>
#include <optional>

#include "apps/corolla/commands.hpp"
#include "sim/random_world.hpp"
#include "sim/report.hpp"
#include "sim/scenario.hpp"
#include "sim/scenario_toml.hpp"
#include "sim/sweep.hpp"
#include "sim/world.hpp"

namespace corolla::cli {
namespace {

constexpr int kInvariantBroken = 3;
constexpr int kShrinkRuns = 60;

struct SimFlags {
  std::string scenario;
  std::optional<uint64_t> seed;
  std::string out = "sim-out";
  bool quiet = false;
  bool random = false;
  uint64_t sweep = 0;
  uint64_t from = 1;
  std::vector<uint64_t> seeds;
  int jobs = 0;
  bool shrink = false;
  double wall_limit_s = 600;
};

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!(out << text)) throw std::runtime_error("cannot write " + path.string());
}

// Shrinks a failing world and writes what is left as DIR/NAME.toml; returns the file.
std::filesystem::path shrink_into(const SimFlags& f, const sim::scenario& sc, uint64_t seed,
                                  const std::string& invariant) {
  std::cerr << "shrinking " << sc.name << " (seed " << seed << ") while it breaks " << invariant << "\n";
  const sim::scenario small = sim::shrink(sc, seed, invariant, kShrinkRuns, f.wall_limit_s, &std::cerr);
  std::filesystem::create_directories(f.out);
  const auto file = std::filesystem::path(f.out) / (small.name + ".toml");
  write_file(file, "# " + invariant + ": replay with corolla sim " + file.string() + " --seed " + std::to_string(seed) +
                       "\n" + sim::scenario_toml(small));
  std::cout << "shrunk world: " << file.string() << " (corolla sim " << file.string() << " --seed " << seed << ")\n";
  return file;
}

int run_one(const SimFlags& f) {
  const uint64_t seed = f.random ? f.seed.value_or(1) : 0;
  sim::scenario sc = f.random ? sim::random_scenario(seed) : sim::read_scenario(f.scenario);
  const uint64_t run_seed = f.random ? seed : f.seed.value_or(sc.seed);
  std::filesystem::create_directories(f.out);
  // Left to the operating system at exit, not taken apart actor by actor: that took 25 s of a 10,000-server run,
  // and nothing after the reports needs it.
  auto& world = *new sim::World(sc, run_seed);
  world.run(f.quiet ? nullptr : &std::cerr);
  const auto& r = world.results();
  const std::filesystem::path dir(f.out);
  write_file(dir / "events.log", world.log().text());
  write_file(dir / "report.json", sim::report_json(r));
  write_file(dir / "report.html", sim::report_html(r));
  write_file(dir / "run.json", sim::run_cost_json(r));
  write_file(dir / "scenario.toml", sim::scenario_toml(sc));
  size_t ok = 0, failovers = 0;
  std::vector<double> steps;
  for (const auto& s : r.sessions) {
    ok += s.ok;
    failovers += s.recovery_s.size();
    if (s.ok) steps.push_back(s.steps_per_s());
  }
  std::cout << "scenario " << r.scenario << " (seed " << run_seed << "): " << ok << "/" << r.sessions.size()
            << " sessions completed, " << failovers << " failovers, median " << sim::percentile(steps, 50)
            << " inference steps/s per session\n"
            << "simulated " << r.duration_s << " s in " << r.cost.wall_s << " s wall: " << r.cost.events << " events ("
            << static_cast<uint64_t>(r.cost.events_per_s) << "/s), peak memory " << r.cost.peak_rss_mb << " MB\n";
  for (const auto& v : r.violations)
    std::cout << "invariant broken: " << v.invariant << " at " << v.t_s << " s, " << v.actors << ": " << v.what << "\n";
  std::cout << "wrote " << (dir / "report.html").string() << ", report.json, events.log, run.json, scenario.toml\n";
  if (!r.violations.empty()) {
    if (f.shrink) shrink_into(f, sc, run_seed, r.violations.front().invariant);
    return kInvariantBroken;
  }
  return f.random || ok == r.sessions.size() ? 0 : 2;
}

int run_sweep(const SimFlags& f) {
  sim::sweep_options o;
  o.seeds = f.seeds;
  for (uint64_t i = 0; i < f.sweep; ++i) o.seeds.push_back(f.from + i);
  o.jobs = f.jobs > 0 ? f.jobs : static_cast<int>(std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN)));
  o.wall_limit_s = f.wall_limit_s;
  o.progress = &std::cerr;
  std::cerr << "sweep: " << o.seeds.size() << " random worlds, " << o.jobs << " at a time\n";
  const auto t0 = std::chrono::steady_clock::now();
  const auto outcomes = sim::run_sweep(o);
  std::map<std::string, int64_t> broken;
  int64_t sessions = 0, completed = 0, failing = 0;
  double slowest = 0;
  for (const auto& w : outcomes) {
    sessions += w.sessions;
    completed += w.completed;
    slowest = std::max(slowest, w.wall_s);
    if (!w.failed()) continue;
    ++failing;
    if (!w.crash.empty()) ++broken["crash"];
    std::vector<std::string> seen;
    for (const auto& v : w.violations)
      if (std::find(seen.begin(), seen.end(), v.invariant) == seen.end()) seen.push_back(v.invariant);
    for (const auto& name : seen) ++broken[name];
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "sweep: " << outcomes.size() << " worlds, " << outcomes.size() - static_cast<size_t>(failing)
            << " kept every invariant, " << failing << " did not";
  for (const auto& [name, n] : broken) std::cout << "; " << name << ": " << n;
  std::cout << "\nsweep: " << completed << " of " << sessions << " sessions completed; " << wall
            << " s wall, slowest world " << slowest << " s\n";
  for (const auto& w : outcomes)
    if (w.failed()) std::cout << "failing seed " << w.seed << ": " << w.first_failure() << "\n";
  if (f.shrink)
    for (const auto& w : outcomes)
      if (w.failed() && w.crash.empty()) {
        shrink_into(f, sim::random_scenario(w.seed), w.seed, w.first_failure());
        break;  // the first failing world; the others replay by seed
      }
  return failing > 0 ? kInvariantBroken : 0;
}

}  // namespace

Runner add_sim(CLI::App& app) {
  auto f = std::make_shared<SimFlags>();
  auto* cmd = app.add_subcommand("sim",
                                 "Run swarm scenarios in the deterministic simulator (virtual time), "
                                 "or sweep random worlds against its invariants");
  cmd->add_option("scenario", f->scenario, "Scenario file (sim/scenarios/*.toml)")->type_name("FILE");
  cmd->add_flag("--random", f->random, "Run the random world drawn from --seed instead of a file");
  cmd->add_option("--seed", f->seed, "Seed (default: the scenario's); the same seed replays the same run");
  cmd->add_option("--sweep", f->sweep, "Run this many random worlds, a process each, and report the failing seeds")
      ->type_name("N");
  cmd->add_option("--from", f->from, "The sweep's first seed (default 1)")->type_name("SEED");
  cmd->add_option("--seeds", f->seeds, "Sweep these seeds (with --sweep N, besides those)")
      ->delimiter(',')
      ->type_name("S,S,...");
  cmd->add_option("--jobs", f->jobs, "Worlds run at once in a sweep (default: the cores)")->check(CLI::Range(1, 1024));
  cmd->add_flag("--shrink", f->shrink,
                "Make a failing world smaller while it breaks the same invariant; write it as DIR/NAME.toml");
  cmd->add_option("--wall_limit_s", f->wall_limit_s, "A sweep's world that runs longer than this has failed (600)")
      ->check(CLI::Range(1.0, 86400.0));
  cmd->add_option("--out", f->out, "Directory for the log and reports (default sim-out)")->type_name("DIR");
  cmd->add_flag("--quiet", f->quiet, "No progress lines on stderr");
  return [f] {
    const bool sweep = f->sweep > 0 || !f->seeds.empty();
    const int modes = !f->scenario.empty() + f->random + sweep;
    if (modes != 1)
      throw std::invalid_argument("sim: give a scenario file, --random or --sweep N / --seeds (one of them)");
    if (sweep) return run_sweep(*f);
    return run_one(*f);
  };
}

}  // namespace corolla::cli
