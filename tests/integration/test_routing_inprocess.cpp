// The swarm client routes through the chain of least expected latency: servers in one process announcing
// different rates and cache room; which servers got the session shows the route taken. Also: a gate moving to
// other blocks, as a balancer moves it.
#define BOOST_TEST_MODULE routing_inprocess
#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>

#include "actors/client/client_api.hpp"
#include "actors/net/connector.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/system/system_config.hpp"
#include "actors/server/server_node.hpp"
#include "support/golden.hpp"

using namespace corolla;
using namespace corolla::test;

namespace {

struct server_spec {
  int64_t first, last;
  double inference_rps;
  int64_t cache_tokens = 1024;
};

struct routing_swarm {
  corolla_config cfg;
  // Declared before the actor system, so destroyed after it: its actors use this until they stop.
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  caf::actor connector = spawn_connector(sys);
  std::vector<caf::actor> gates, owned;
  std::vector<std::string> addresses;
  std::shared_ptr<ClientHead> head;

  explicit routing_swarm(const std::vector<server_spec>& specs) {
    auto source = open_weights(model_dir("llama"));
    for (size_t i = 0; i < specs.size(); ++i) {
      server_setup setup;
      setup.model = model_dir("llama");
      setup.first_block = specs[i].first;
      setup.last_block = specs[i].last;
      setup.cache_tokens = specs[i].cache_tokens;
      setup.throughput.inference_rps = specs[i].inference_rps;
      setup.seed = 10 + i;
      gates.push_back(caf::actor_cast<caf::actor>(start_server_node(sys, setup, connector, source).gate));
      addresses.push_back("inproc:route-" + std::to_string(i));
      self->send(connector, register_atom::value, addresses.back(), gates.back());
      self->send(gates.back(), address_atom::value, addresses.back());
    }
    head = std::make_shared<ClientHead>(*source, *backend);
  }
  ~routing_swarm() {
    for (auto& a : owned) self->send_exit(a, caf::exit_reason::user_shutdown);
    for (auto& g : gates) self->send_exit(g, caf::exit_reason::user_shutdown);
    self->send_exit(connector, caf::exit_reason::user_shutdown);
  }

  // Opens a session of max_length tokens; returns which servers hold one.
  std::vector<int64_t> open_and_count(int64_t max_length) {
    swarm_client_options o;
    o.initial_peers = addresses;
    o.request_timeout = std::chrono::seconds(10);
    auto client = spawn_swarm_client(sys, o, head, connector);
    owned.push_back(caf::actor_cast<caf::actor>(client));
    self->request(client, std::chrono::seconds(30), open_session_request{max_length, 1})
        .receive([&](inference_session_actor s) { owned.push_back(caf::actor_cast<caf::actor>(s)); },
                 [&](caf::error& e) { BOOST_FAIL("open failed: " << describe(e)); });
    std::vector<int64_t> sessions;
    for (auto& g : gates)
      self->request(g, std::chrono::seconds(5), info_request{})
          .receive([&](const server_info& i) { sessions.push_back(i.sessions); },
                   [&](caf::error& e) { BOOST_FAIL(describe(e)); });
    return sessions;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(the_client_takes_the_faster_chain) {
  // One server for all 4 blocks at 5 tokens/s per block (0.8 s a step), or two at 10000 (well under 0.1 s
  // with the hand-over).
  routing_swarm slow_single({{0, 4, 5}, {0, 2, 10000}, {2, 4, 10000}});
  BOOST_TEST(slow_single.open_and_count(64) == (std::vector<int64_t>{0, 1, 1}), boost::test_tools::per_element());
  // The same spans, the single server now the fast one: one hop beats two.
  routing_swarm fast_single({{0, 4, 10000}, {0, 2, 1000}, {2, 4, 1000}});
  BOOST_TEST(fast_single.open_and_count(64) == (std::vector<int64_t>{1, 0, 0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(the_client_avoids_servers_without_cache_room) {
  // The fast server has 64 cache tokens per block (one KV page): not enough for a session of 100.
  routing_swarm w({{0, 4, 10000, 64}, {0, 4, 50}});
  BOOST_TEST(w.open_and_count(100) == (std::vector<int64_t>{0, 1}), boost::test_tools::per_element());
  // A session of 64 fits: the fast one it is.
  routing_swarm v({{0, 4, 10000, 64}, {0, 4, 50}});
  BOOST_TEST(v.open_and_count(64) == (std::vector<int64_t>{1, 0}), boost::test_tools::per_element());
}

// What a balancer does to its server when it moves: the gate changes span (sessions end, it is joining), the
// loader loads the new blocks, the gate installs them (online).
BOOST_AUTO_TEST_CASE(a_gate_moves_to_another_span) {
  routing_swarm w({{0, 2, 100}});
  auto gate = w.gates[0];
  auto& self = w.self;
  auto info = [&] {
    server_info out;
    self->request(gate, std::chrono::seconds(5), info_request{})
        .receive([&](server_info& i) { out = std::move(i); }, [](caf::error&) {});
    return out;
  };
  uint64_t sid = 0;
  self->request(gate, std::chrono::seconds(5), open_session{16, 1, 0, 0, {}, {}, {}, {}})
      .receive([&](const session_opened& o) { sid = o.session_id; }, [](caf::error& e) { BOOST_FAIL(describe(e)); });
  BOOST_TEST(info().sessions == 1);
  // Without a sender of this node (as a peer can send it), the move is not made.
  caf::anon_send(gate, span_atom::value, int64_t{2}, int64_t{4});
  caf::anon_send(gate, address_atom::value, std::string("127.0.0.1:9"));
  BOOST_TEST(info().first_block == 0);
  BOOST_TEST(info().sessions == 1);
  BOOST_TEST(info().address != "127.0.0.1:9");
  caf::error err;
  self->request(gate, std::chrono::seconds(5), span_atom::value, int64_t{3}, int64_t{5})
      .receive([](const ack&) { BOOST_FAIL("a span past the model's 4 blocks was taken"); },
               [&](caf::error& e) { err = e; });
  BOOST_TEST(is(err, errc::bad_request), describe(err));
  self->request(gate, std::chrono::seconds(5), span_atom::value, int64_t{2}, int64_t{4})
      .receive([](const ack&) {}, [](caf::error& e) { BOOST_FAIL(describe(e)); });
  auto moved = info();
  BOOST_TEST(moved.state == "joining");
  BOOST_TEST(moved.first_block == 2);
  BOOST_TEST(moved.last_block == 4);
  BOOST_TEST(moved.sessions == 0);
  err = {};
  self->request(gate, std::chrono::seconds(5), close_session{sid, {}})
      .receive([](const ack&) {}, [&](caf::error& e) { err = e; });
  BOOST_TEST(is(err, errc::unknown_session));
  // Load blocks 2..3 and install them.
  server_setup setup;
  setup.model = model_dir("llama");
  auto loader =
      spawn_block_loader(w.sys, setup, open_weights(setup.model), std::shared_ptr<Backend>(make_cpu_backend(1)));
  w.owned.push_back(loader);
  std::vector<caf::actor> blocks;
  self->request(loader, std::chrono::seconds(30), load_atom::value, int64_t{2}, int64_t{4})
      .receive([&](std::vector<caf::actor>& b) { blocks = std::move(b); },
               [](caf::error& e) { BOOST_FAIL(describe(e)); });
  BOOST_TEST(blocks.size() == 2u);
  self->request(gate, std::chrono::seconds(5), blocks_atom::value, blocks)
      .receive([](const ack&) {}, [](caf::error& e) { BOOST_FAIL(describe(e)); });
  BOOST_TEST(info().state == "online");
  bool opened = false;
  self->request(gate, std::chrono::seconds(5), open_session{16, 1, 2, 4, {}, {}, {}, {}})
      .receive([&](const session_opened&) { opened = true; }, [](caf::error& e) { BOOST_FAIL(describe(e)); });
  BOOST_TEST(opened);
  // A loader asked for blocks the model does not have says so.
  err = {};
  self->request(loader, std::chrono::seconds(30), load_atom::value, int64_t{3}, int64_t{9})
      .receive([](std::vector<caf::actor>&) {}, [&](caf::error& e) { err = e; });
  BOOST_TEST(describe(err).find("not a span of the model's 4 blocks") != std::string::npos, describe(err));
}
