// The simulator's virtual clock (sim/sim_clock.hpp): the order timers fire in, replaced and cancelled timeouts,
// request timeouts taken off once their response is on its way, timers leaving with their actor, and requests
// across the network that nobody answered, reported with the receiver they reached.
#define BOOST_TEST_MODULE sim_clock
#include <boost/test/unit_test.hpp>

#include <caf/all.hpp>
#include <string>
#include <vector>

#include "sim/network.hpp"
#include "sim/sim_clock.hpp"
#include "sim/sim_link.hpp"

using namespace corolla::sim;
using namespace std::chrono_literals;

namespace {

using tick_atom = caf::atom_constant<caf::atom("tick")>;
using ask_atom = caf::atom_constant<caf::atom("ask")>;
using leave_atom = caf::atom_constant<caf::atom("leave")>;

// Holds every `ask` through a promise; answers them all on `tick`, or ends without answering on `leave`.
caf::behavior holding_responder(caf::event_based_actor* self) {
  auto held = std::make_shared<std::vector<caf::response_promise>>();
  return {
      [=](ask_atom) {
        held->push_back(self->make_response_promise());
        return held->back();
      },
      [=](tick_atom) {
        for (auto& rp : *held) rp.deliver(std::string("answer"));
        held->clear();
      },
      [=](leave_atom) { self->quit(); },
  };
}

struct clock_config : caf::actor_system_config {
  clock_config() {
    set("scheduler.policy", caf::atom("testing"));
    set("logger.file-verbosity", caf::atom("quiet"));
    module_factories.push_back(
        [](caf::actor_system& sys) -> caf::actor_system::module* { return new sim_coordinator(sys); });
  }
};

struct fixture {
  clock_config cfg;
  caf::actor_system sys{cfg};
  sim_coordinator& sched = dynamic_cast<sim_coordinator&>(sys.scheduler());
  sim_clock& clock = sched.clock();
  const sim_clock::time_point t0 = clock.now();
  std::vector<std::string> seen;  // what the actors saw, with the virtual second it happened at

  double seconds() const { return std::chrono::duration<double>(clock.now() - t0).count(); }
  void note(const std::string& what) { seen.push_back(what + "@" + std::to_string(static_cast<int>(seconds()))); }

  // Runs the actors and fires timers until nothing is left (or `until` seconds have passed).
  void run(double until = 1e9) {
    for (;;) {
      sched.run();
      if (clock.next_due() == sim_clock::time_point::max()) return;
      if (std::chrono::duration<double>(clock.next_due() - t0).count() > until) return;
      clock.fire_next();
    }
  }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(timers_fire_by_due_time_and_ties_in_the_order_they_were_set, fixture) {
  auto recorder = sys.spawn(
      [this](caf::event_based_actor*) -> caf::behavior { return {[this](const std::string& s) { note(s); }}; });
  caf::delayed_anon_send(recorder, 3s, std::string("c"));
  caf::delayed_anon_send(recorder, 1s, std::string("a1"));
  caf::delayed_anon_send(recorder, 2s, std::string("b"));
  caf::delayed_anon_send(recorder, 1s, std::string("a2"));
  BOOST_TEST(clock.pending() == 4u);
  run();
  BOOST_TEST(seen == (std::vector<std::string>{"a1@1", "a2@1", "b@2", "c@3"}), boost::test_tools::per_element());
  BOOST_TEST(clock.pending() == 0u);
  caf::anon_send_exit(recorder, caf::exit_reason::kill);
  sched.run();
}

BOOST_FIXTURE_TEST_CASE(a_receive_timeout_set_again_replaces_the_old_one, fixture) {
  // Every message restarts the actor's 5 s idle timeout: ticks at 0 and 3 s leave one timeout, at 8 s.
  auto idle = sys.spawn([this](caf::event_based_actor*) -> caf::behavior {
    return {[this](tick_atom) { note("tick"); }, caf::after(5s) >> [this] { note("idle"); }};
  });
  caf::anon_send(idle, tick_atom::value);
  caf::delayed_anon_send(idle, 3s, tick_atom::value);
  run(20);
  BOOST_TEST(seen == (std::vector<std::string>{"tick@0", "tick@3", "idle@8", "idle@13", "idle@18"}),
             boost::test_tools::per_element());
  caf::anon_send_exit(idle, caf::exit_reason::kill);
  sched.run();
}

BOOST_FIXTURE_TEST_CASE(request_timeouts_fire_when_due_unless_their_answer_arrives_first, fixture) {
  // The responder answers `ask` only when told to, through a promise it keeps.
  auto responder = sys.spawn(holding_responder);
  std::vector<caf::message_id> ids;
  auto requester = sys.spawn([&, responder](caf::event_based_actor* self) -> caf::behavior {
    return {[&, self, responder](tick_atom) {
      auto h = self->request(responder, 4s, ask_atom::value);
      ids.push_back(h.id());  // the id its response (and its timeout) will carry
      h.then([this](const std::string& s) { note(s); }, [this](caf::error& e) { note(caf::to_string(e)); });
    }};
  });
  // A request no one answers times out after its 4 s.
  caf::anon_send(requester, tick_atom::value);
  run();
  BOOST_REQUIRE_EQUAL(seen.size(), 1u);
  BOOST_TEST(seen[0].find("request_timeout") != std::string::npos, seen[0]);
  BOOST_TEST(seen[0].substr(seen[0].size() - 2) == "@4", seen[0]);
  // Answered within the time: the timeout, said to arrive after the answer, leaves the clock.
  seen.clear();
  caf::anon_send(responder, tick_atom::value);  // the first promise is answered now: too late, dropped
  caf::anon_send(requester, tick_atom::value);
  sched.run();
  BOOST_TEST(clock.pending() == 1u);
  clock.drop_answered(caf::actor_cast<caf::strong_actor_ptr>(requester), ids.back(), clock.now() + 5s);
  BOOST_TEST(clock.pending() == 1u);  // due before that arrival: it stays
  clock.drop_answered(caf::actor_cast<caf::strong_actor_ptr>(requester), ids.back(), clock.now() + 1s);
  BOOST_TEST(clock.pending() == 0u);
  caf::anon_send(responder, tick_atom::value);
  run();
  BOOST_TEST(seen == (std::vector<std::string>{"answer@4"}), boost::test_tools::per_element());
  for (auto& a : {requester, responder}) caf::anon_send_exit(a, caf::exit_reason::kill);
  sched.run();
}

BOOST_FIXTURE_TEST_CASE(an_actor_that_ends_takes_its_timeouts_with_it, fixture) {
  auto silent = sys.spawn([](caf::event_based_actor* self) -> caf::behavior {
    return {[=](ask_atom) { return self->make_response_promise(); }};
  });
  auto waiting = sys.spawn([this, silent](caf::event_based_actor* self) -> caf::behavior {
    for (int i = 0; i < 3; ++i)
      self->request(silent, 10s, ask_atom::value).then([](const std::string&) {}, [this](caf::error&) { note("t"); });
    return {caf::after(7s) >> [this] { note("idle"); }};
  });
  auto other = sys.spawn(
      [this](caf::event_based_actor*) -> caf::behavior { return {caf::after(9s) >> [this] { note("other"); }}; });
  sched.run();
  BOOST_TEST(clock.pending() == 5u);  // three request timeouts, two receive timeouts
  caf::anon_send_exit(waiting, caf::exit_reason::kill);
  sched.run();
  BOOST_TEST(clock.pending() == 1u);
  run(9.5);
  BOOST_TEST(seen == (std::vector<std::string>{"other@9"}), boost::test_tools::per_element());
  for (auto& a : {silent, other}) caf::anon_send_exit(a, caf::exit_reason::kill);
  sched.run();
}

BOOST_FIXTURE_TEST_CASE(a_request_across_the_network_left_unanswered_is_reported_with_its_receiver, fixture) {
  network_model model;
  model.regions = {{"r"}};
  Network net(model, 1);
  const node_index a = net.add_node("a", "r", 0), b = net.add_node("b", "r", 0);
  std::vector<request_crossing> unanswered;
  clock.on_unanswered = [&](const request_crossing& c) { unanswered.push_back(c); };
  // On node b: holds every request; answers them on `tick`, or leaves without answering.
  auto responder = sys.spawn(holding_responder);
  auto to_b = spawn_link(sys, net, a, b, responder);
  auto requester = sys.spawn([this, to_b](caf::event_based_actor* self) -> caf::behavior {
    return {[this, self, to_b](tick_atom) {
      self->request(to_b, 4s, ask_atom::value)
          .then([this](const std::string& s) { note(s); }, [this](caf::error& e) { note(caf::to_string(e)); });
    }};
  });
  // Answered: nothing to report.
  caf::anon_send(requester, tick_atom::value);
  run(0.5);
  caf::anon_send(responder, tick_atom::value);
  run();
  BOOST_REQUIRE_EQUAL(seen.size(), 1u);
  BOOST_TEST(seen[0].find("answer") == 0u, seen[0]);
  BOOST_TEST(unanswered.empty());
  // The receiver ends holding the request: its requester waits out the 4 s, and the crossing is reported.
  caf::anon_send(requester, tick_atom::value);
  run(seconds() + 0.5);
  caf::anon_send(responder, leave_atom::value);
  run();
  BOOST_REQUIRE_EQUAL(seen.size(), 2u);
  BOOST_TEST(seen[1].find("request_timeout") != std::string::npos, seen[1]);
  BOOST_REQUIRE_EQUAL(unanswered.size(), 1u);
  BOOST_TEST(has_ended(unanswered[0].receiver));
  BOOST_TEST(unanswered[0].from == a);
  BOOST_TEST(unanswered[0].to == b);
  clock.on_unanswered = nullptr;
  for (const auto& x : {requester, to_b}) caf::anon_send_exit(x, caf::exit_reason::kill);
  sched.run();
}
