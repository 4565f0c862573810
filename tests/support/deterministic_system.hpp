// An actor system under CAF's deterministic scheduler (the test_coordinator that caf/test/dsl.hpp's
// test_coordinator_fixture sets up, without CAF's own unit-test engine): one thread, messages run only when the
// test says so, and virtual time that moves only when the test advances it.
//
//   DeterministicSystem w;
//   auto a = w.sys.spawn(...);
//   auto r = w.ask<reply_type>(a, request{});      // runs the world (advancing time in steps) until it answers
//   w.advance(std::chrono::minutes(10));            // ten virtual minutes, timers firing as they fall due
#pragma once

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "actors/protocol/errors.hpp"
#include "actors/system/system_config.hpp"

namespace corolla::test {

struct DeterministicConfig : caf::actor_system_config {
  DeterministicConfig() {
    add_corolla_types(*this);
    set("scheduler.policy", caf::atom("testing"));
    set("logger.file-verbosity", caf::atom("quiet"));
  }
};

class DeterministicSystem {
 public:
  DeterministicConfig cfg;
  caf::actor_system sys{cfg};
  caf::scheduler::test_coordinator& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  caf::timespan step = std::chrono::milliseconds(100);  // how far ask() moves time while waiting

  DeterministicSystem() {
    sched.clock().current_time += std::chrono::hours(1);  // time 0 is not special
  }
  ~DeterministicSystem() {
    for (auto& a : owned_) caf::anon_send_exit(a, caf::exit_reason::kill);
    sched.run();
    sys.await_actors_before_shutdown(false);
  }

  // Actors killed when the system goes (any handle, typed or not).
  template <class Handle>
  Handle own(Handle a) {
    owned_.push_back(caf::actor_cast<caf::actor>(a));
    return a;
  }

  caf::actor_clock::time_point now() const { return sched.clock().now(); }
  // Runs every message that can run now.
  size_t run() { return sched.run(); }
  // Moves virtual time by `d` in steps of `step`, running everything that falls due.
  void advance(caf::timespan d) {
    for (caf::timespan done{0}; done < d; done += step) {
      sched.clock().advance_time(std::min(step, d - done));
      sched.run();
    }
  }

  // Sends every request (one probe actor each) and runs the world until all are answered, moving time in
  // steps while they wait (at most `limit` of virtual time).
  template <class Reply, class Request>
  std::vector<caf::expected<Reply>> ask_all(const std::vector<std::pair<caf::actor, Request>>& requests,
                                            caf::timespan limit = std::chrono::minutes(10)) {
    auto results = std::make_shared<std::vector<std::optional<caf::expected<Reply>>>>(requests.size());
    std::vector<caf::actor> probes;
    for (size_t i = 0; i < requests.size(); ++i) {
      auto [dest, req] = requests[i];
      probes.push_back(sys.spawn([=](caf::event_based_actor* self) {
        self->request(dest, limit, req)
            .then([=](Reply& r) { (*results)[i] = std::move(r); },
                  [=](caf::error& e) { (*results)[i] = std::move(e); });
      }));
    }
    auto all_done = [&] {
      for (const auto& r : *results)
        if (!r) return false;
      return true;
    };
    for (caf::timespan waited{0}; waited <= limit; waited += step) {
      sched.run();
      if (all_done()) break;
      sched.clock().advance_time(step);
    }
    std::vector<caf::expected<Reply>> out;
    for (auto& r : *results) out.push_back(r ? std::move(*r) : caf::expected<Reply>(caf::sec::request_timeout));
    return out;
  }

  template <class Reply, class Request, class Handle>
  caf::expected<Reply> ask(const Handle& dest, Request req, caf::timespan limit = std::chrono::minutes(10)) {
    return std::move(ask_all<Reply, Request>({{caf::actor_cast<caf::actor>(dest), std::move(req)}}, limit).front());
  }

 private:
  std::vector<caf::actor> owned_;
};

}  // namespace corolla::test

// Boost.Test prints a caf::expected as "a value" or the error it holds (BOOST_REQUIRE(r) on an expected).
namespace caf {
template <class T>
std::ostream& boost_test_print_type(std::ostream& os, const expected<T>& x) {
  return os << (x ? std::string("a value") : corolla::describe(x.error()));
}
}  // namespace caf
