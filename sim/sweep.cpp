#include "sim/sweep.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <stdexcept>

#include "sim/random_world.hpp"
#include "sim/world.hpp"

namespace corolla::sim {
namespace {

using json = nlohmann::json;

constexpr size_t kViolationsKept = 8;  // per world: the first ones say what went wrong

json to_json(const world_outcome& o) {
  json v = json::array();
  for (const auto& x : o.violations)
    v.push_back({{"invariant", x.invariant}, {"t_s", x.t_s}, {"actors", x.actors}, {"what", x.what}});
  return {{"violations", v},
          {"crash", o.crash},
          {"sessions", o.sessions},
          {"completed", o.completed},
          {"wall_s", o.wall_s}};
}

world_outcome from_json(const std::string& text, uint64_t seed) {
  world_outcome o;
  o.seed = seed;
  const json j = json::parse(text);
  for (const auto& x : j.at("violations"))
    o.violations.push_back({x.at("invariant"), x.at("t_s"), x.at("actors"), x.at("what")});
  o.crash = j.at("crash");
  o.sessions = j.at("sessions");
  o.completed = j.at("completed");
  o.wall_s = j.at("wall_s");
  return o;
}

// In the child: the run, reported as JSON on `fd`; the process then ends without taking the world apart (the
// parent only needs the outcome).
[[noreturn]] void run_in_child(const scenario& sc, uint64_t seed, int fd) {
  world_outcome o;
  o.seed = seed;
  try {
    const auto t0 = std::chrono::steady_clock::now();
    auto& world = *new World(sc, seed);
    world.run();
    const auto& r = world.results();
    for (size_t i = 0; i < r.violations.size() && i < kViolationsKept; ++i) o.violations.push_back(r.violations[i]);
    o.sessions = static_cast<int64_t>(r.sessions.size());
    for (const auto& s : r.sessions) o.completed += s.ok;
    o.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } catch (const std::exception& e) {
    o.crash = std::string("exception: ") + e.what();
  }
  const std::string text = to_json(o).dump();
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(1);
    done += static_cast<size_t>(n);
  }
  _exit(0);
}

struct child {
  pid_t pid = -1;
  int fd = -1;
  uint64_t seed = 0;
  size_t index = 0;  // into the outcomes
  std::string out;
  std::chrono::steady_clock::time_point started;
};

child start_child(const scenario& sc, uint64_t seed, size_t index, double wall_limit_s) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(static_cast<unsigned>(std::ceil(wall_limit_s)));  // SIGALRM ends a run that never finishes
    run_in_child(sc, seed, fds[1]);
  }
  ::close(fds[1]);
  return {pid, fds[0], seed, index, {}, std::chrono::steady_clock::now()};
}

// Reaps a child whose pipe has closed and reads its outcome.
world_outcome finish_child(child& c, double wall_limit_s) {
  ::close(c.fd);
  int status = 0;
  while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  world_outcome o;
  o.seed = c.seed;
  o.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - c.started).count();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    try {
      o = from_json(c.out, c.seed);
    } catch (const std::exception& e) {
      o.crash = std::string("unreadable outcome: ") + e.what();
    }
  } else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
    o.crash = "over " + std::to_string(static_cast<int64_t>(wall_limit_s)) + " s of wall time";
  } else if (WIFSIGNALED(status)) {
    o.crash = std::string("signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  } else {
    o.crash = "exit status " + std::to_string(WEXITSTATUS(status));
  }
  return o;
}

// Runs the worlds `make(i)` for i in [0, n), `jobs` processes at a time; `done` sees each outcome as it comes.
std::vector<world_outcome> run_children(size_t n, int jobs, double wall_limit_s,
                                        const std::function<std::pair<scenario, uint64_t>(size_t)>& make,
                                        const std::function<void(const world_outcome&)>& done) {
  std::vector<world_outcome> out(n);
  std::vector<child> running;
  size_t next = 0;
  while (next < n || !running.empty()) {
    while (next < n && static_cast<int>(running.size()) < std::max(jobs, 1)) {
      auto [sc, seed] = make(next);
      running.push_back(start_child(sc, seed, next, wall_limit_s));
      ++next;
    }
    std::vector<pollfd> fds;
    for (const auto& c : running) fds.push_back({c.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    }
    for (size_t i = fds.size(); i-- > 0;) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      child& c = running[i];
      char buf[4096];
      const ssize_t got = ::read(c.fd, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got > 0) {
        c.out.append(buf, static_cast<size_t>(got));
        continue;
      }
      out[c.index] = finish_child(c, wall_limit_s);
      done(out[c.index]);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return out;
}

std::string describe(const world_outcome& o) {
  if (!o.crash.empty()) return "crash: " + o.crash;
  const auto& v = o.violations.front();
  char t[32];
  std::snprintf(t, sizeof t, "%.3f", v.t_s);
  return v.invariant + " at " + t + " s, " + v.actors + ": " + v.what;
}

}  // namespace

std::string world_outcome::first_failure() const {
  if (!crash.empty()) return "crash";
  return violations.empty() ? "" : violations.front().invariant;
}

world_outcome run_isolated(const scenario& sc, uint64_t seed, double wall_limit_s) {
  return run_children(
             1, 1, wall_limit_s, [&](size_t) { return std::make_pair(sc, seed); }, [](const world_outcome&) {})
      .front();
}

std::vector<world_outcome> run_sweep(const sweep_options& o) {
  size_t finished = 0;
  const size_t tenth = std::max<size_t>(1, o.seeds.size() / 10);
  return run_children(
      o.seeds.size(), o.jobs, o.wall_limit_s,
      [&](size_t i) {
        const uint64_t seed = o.seeds[i];
        return std::make_pair(random_scenario(seed), seed);
      },
      [&](const world_outcome& w) {
        ++finished;
        if (!o.progress) return;
        if (w.failed())
          *o.progress << "seed " << w.seed << ": " << describe(w) << "\n  replay: corolla sim --random --seed "
                      << w.seed << "\n";
        if (finished % tenth == 0) *o.progress << "sweep: " << finished << " of " << o.seeds.size() << " worlds run\n";
        o.progress->flush();
      });
}

scenario shrink(const scenario& failing, uint64_t seed, const std::string& invariant, int max_runs, double wall_limit_s,
                std::ostream* progress) {
  scenario best = failing;
  int runs = 0;
  auto still_fails = [&](const scenario& candidate) {
    ++runs;
    const auto o = run_isolated(candidate, seed, wall_limit_s);
    const bool same = o.first_failure() == invariant ||
                      std::any_of(o.violations.begin(), o.violations.end(),
                                  [&](const invariant_violation& v) { return v.invariant == invariant; });
    return same;
  };
  // Each way to make the world smaller, applied to a copy; false when it does not apply.
  std::vector<std::function<bool(scenario&)>> steps;
  for (size_t i = failing.churn.events.size(); i-- > 0;)
    steps.push_back([i](scenario& s) {
      if (i >= s.churn.events.size()) return false;
      s.churn.events.erase(s.churn.events.begin() + static_cast<std::ptrdiff_t>(i));
      return true;
    });
  steps.push_back([](scenario& s) {
    if (s.workload.sessions <= 1) return false;
    s.workload.sessions = (s.workload.sessions + 1) / 2;
    return true;
  });
  steps.push_back([](scenario& s) {
    auto& w = s.workload;
    if (w.training_sessions == 0 || (w.training_sessions == 1 && w.sessions == 0)) return false;
    w.training_sessions /= 2;
    return true;
  });
  steps.push_back([](scenario& s) {
    if (s.workload.clients <= 1) return false;
    --s.workload.clients;
    return true;
  });
  for (size_t c = 0; c < failing.servers.size(); ++c)
    steps.push_back([c](scenario& s) {
      if (s.servers[c].count == 0 || s.server_count() <= 1) return false;
      --s.servers[c].count;
      return true;
    });
  steps.push_back([](scenario& s) {
    if (s.network.loss == 0) return false;
    s.network.loss = 0;
    return true;
  });
  steps.push_back([](scenario& s) {
    auto& w = s.workload;
    if (w.new_tokens_max == 0 && w.prompt_tokens_max == 0 && w.new_tokens <= 1) return false;
    w.new_tokens_max = w.prompt_tokens_max = 0;
    w.new_tokens = std::max<int64_t>(1, w.new_tokens / 2);
    return true;
  });
  for (bool smaller = true; smaller && runs < max_runs;) {
    smaller = false;
    for (const auto& step : steps) {
      if (runs >= max_runs) break;
      scenario candidate = best;
      if (!step(candidate) || !still_fails(candidate)) continue;
      best = candidate;
      smaller = true;
      if (progress)
        *progress << "shrink: " << best.server_count() << " servers, " << best.workload.clients << " clients, "
                  << best.workload.sessions << " sessions, " << best.churn.events.size() << " faults still break "
                  << invariant << "\n";
    }
  }
  best.name = failing.name + "-shrunk";
  return best;
}

}  // namespace corolla::sim
