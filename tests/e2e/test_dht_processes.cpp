// DHT nodes as real processes on 127.0.0.1 (`corolla dht`: one bootstrap node, three joining through it) and
// client-mode nodes in this process, each given one address: a value stored through one node is read through
// another, every process holds a replica, and stopping a process (by its PID) leaves the value readable. Every
// process started is stopped by its PID.
#define BOOST_TEST_MODULE dht_processes
#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>
#include <chrono>
#include <iostream>
#include <memory>

#include "actors/dht/announcer.hpp"
#include "actors/dht/dht_node.hpp"
#include "actors/net/connector.hpp"
#include "actors/net/peer_gateway.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/system/system_config.hpp"
#include "support/process.hpp"
#include "support/record_signer.hpp"
#include "support/temp_dir.hpp"

using namespace corolla;
using namespace corolla::test;
using namespace std::chrono_literals;

namespace {

template <class T>
std::string why(const caf::expected<T>& r) {
  return r ? std::string("ok") : describe(r.error());
}

struct dht_swarm {
  TempDir dir;  // first: removed after the processes are stopped
  std::vector<std::unique_ptr<DhtProcess>> nodes;
  corolla_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  caf::actor connector = spawn_connector(sys);
  std::vector<dht_node_actor> clients;
  uint8_t next_client = 1;

  // A bootstrap node, then `joining` nodes given its address (the first of them keeps its id in a data dir).
  explicit dht_swarm(size_t joining) {
    nodes.push_back(std::make_unique<DhtProcess>(std::vector<std::string>{"--port", "0"}));
    for (size_t i = 0; i < joining; ++i) {
      std::vector<std::string> flags{"--port", "0", "--initial_peers", nodes[0]->address()};
      if (i == 0) flags.insert(flags.end(), {"--data_dir", dir.str() + "/node1"});
      nodes.push_back(std::make_unique<DhtProcess>(flags));
    }
  }
  ~dht_swarm() {
    for (auto& c : clients) self->send_exit(c, caf::exit_reason::user_shutdown);
    self->send_exit(connector, caf::exit_reason::user_shutdown);
    for (auto& n : nodes)
      if (n) n->process().stop();
  }

  // A client-mode node in this process that knows only `peer`.
  caf::expected<dht_node_actor> client(const std::string& peer) {
    dht_options o;
    o.id = key_id("test client " + std::to_string(next_client++));
    o.client_mode = true;
    o.rpc_timeout = 3s;
    clients.push_back(spawn_dht_node(sys, o, connector));
    auto r = ask<dht_bootstrap_reply>(clients.back(), dht_bootstrap{{peer}});
    if (!r) return r.error();
    return clients.back();
  }

  template <class Reply, class Request, class Handle>
  caf::expected<Reply> ask(const Handle& dest, Request req) {
    caf::expected<Reply> out = caf::error{};
    self->request(caf::actor_cast<caf::actor>(dest), 60s, std::move(req))
        .receive([&](Reply& r) { out = std::move(r); }, [&](caf::error& e) { out = std::move(e); });
    return out;
  }

  caf::actor_clock::time_point now() { return sys.clock().now(); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(values_stored_through_one_node_are_read_through_another) {
  const auto t0 = std::chrono::steady_clock::now();
  dht_swarm s(3);
  auto a = s.client(s.nodes[0]->address());
  BOOST_REQUIRE_MESSAGE(a, why(a));
  server_info info;
  info.model = "llama";
  info.address = "127.0.0.1:31337";
  info.first_block = 4;
  info.last_block = 6;
  info.total_blocks = 8;  // a span of a model: readers ignore spans outside 0 <= first < last <= total
  test::RecordSigner signer;
  for (auto& put : announce_puts(signer.key("server"), "llama", info, s.now() + 10min)) {
    auto stored = s.ask<dht_put_reply>(*a, put);
    BOOST_REQUIRE_MESSAGE(stored, why(stored));
    BOOST_TEST(stored->replicas == 4u);  // every server node: fewer than the 5 replicas asked
  }
  auto plain = s.ask<dht_put_reply>(*a, signer.put("greeting", "a", "hello", s.now() + 10min));
  BOOST_REQUIRE_MESSAGE(plain, why(plain));

  // Read through a client that knows only the third node.
  auto b = s.client(s.nodes[2]->address());
  BOOST_REQUIRE_MESSAGE(b, why(b));
  auto got = s.ask<dht_get_reply>(*b, dht_get{block_key("llama", 5)});
  BOOST_REQUIRE_MESSAGE(got, why(got));
  auto servers = parse_servers(block_key("llama", 5), got->entries, s.now());
  BOOST_REQUIRE(servers.size() == 1u);
  BOOST_TEST(servers[0].info.address == "127.0.0.1:31337");
  BOOST_TEST(servers[0].info.first_block == 4);

  // Each process holds a replica (asked directly with a find_value RPC, as another node would).
  for (auto& n : s.nodes) {
    caf::actor peer;
    s.self->request(s.connector, 10s, resolve_atom::value, n->address())
        .receive([&](caf::actor p) { peer = p; }, [&](caf::error& e) { BOOST_FAIL(describe(e)); });
    auto r = s.ask<dht_find_value_reply>(
        peer, dht_find_value_request{dht_contact{id_bytes(key_id("probe")), ""}, id_bytes(key_id("greeting")), {}});
    BOOST_REQUIRE_MESSAGE(r, why(r));
    BOOST_REQUIRE(r->items.size() == 1u);
    BOOST_TEST(r->items[0].subkey == signer.subkey("a"));
    BOOST_TEST(test::RecordSigner::payloads("greeting", {{r->items[0].subkey, {r->items[0].value, s.now() + 1min}}},
                                            s.now())["a"]
                   .value == "hello");
    BOOST_TEST(r->contacts.size() == 3u);  // the other server nodes; clients are in nobody's table
    // The same RPC relayed through the connector: one request, answered by the peer itself.
    const dht_find_value_request probe{dht_contact{id_bytes(key_id("probe")), ""}, id_bytes(key_id("greeting")), {}};
    dht_find_value_reply relayed;
    s.self->request(s.connector, 10s, relay_atom::value, n->address(), caf::make_message(probe))
        .receive([&](dht_find_value_reply& x) { relayed = std::move(x); },
                 [&](caf::error& e) { BOOST_FAIL("relay: " << describe(e)); });
    BOOST_TEST((relayed.responder == r->responder));
    BOOST_REQUIRE(relayed.items.size() == 1u);
    BOOST_TEST(relayed.items[0].value == r->items[0].value);
  }
  // Relays the connector cannot deliver get the resolve's error, naming the address.
  for (const std::string address : {"127.0.0.1:1", "no-port-here"}) {
    std::string failure;
    s.self->request(s.connector, 20s, relay_atom::value, address, caf::make_message(dht_ping_request{}))
        .receive([&](dht_ping_reply&) { failure = "(answered)"; }, [&](caf::error& e) { failure = describe(e); });
    BOOST_TEST(failure.find(address) != std::string::npos, failure);
  }

  // The bootstrap node goes away (stopped by its PID); the value stays readable through the others.
  BOOST_TEST(s.nodes[0]->process().stop() == 0);
  s.nodes[0].reset();
  auto c = s.client(s.nodes[3]->address());
  BOOST_REQUIRE_MESSAGE(c, why(c));
  for (auto& reader : {*a, *b, *c}) {
    auto r = s.ask<dht_get_reply>(reader, dht_get{"greeting"});
    BOOST_REQUIRE_MESSAGE(r, why(r));
    BOOST_TEST(test::RecordSigner::payloads("greeting", r->entries, s.now())["a"].value == "hello");
  }
  // And stores still work.
  auto after = s.ask<dht_put_reply>(*c, signer.put("greeting", "b", "again", s.now() + 10min));
  BOOST_REQUIRE_MESSAGE(after, why(after));
  BOOST_TEST(after->replicas == 3u);
  auto both = s.ask<dht_get_reply>(*b, dht_get{"greeting"});
  BOOST_REQUIRE(both);
  BOOST_TEST(both->entries.size() == 2u);
  std::cout << "dht e2e: 4 processes, 3 clients, one process stopped: "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s\n";
}

BOOST_AUTO_TEST_CASE(a_node_restarted_with_its_data_dir_keeps_its_id) {
  TempDir dir;
  std::string first_line;
  auto id_of = [&](const std::string& address) {
    corolla_config cfg;
    caf::actor_system sys{cfg};
    caf::scoped_actor self{sys};
    auto connector = spawn_connector(sys);
    std::string id;
    self->request(connector, 10s, resolve_atom::value, address)
        .receive(
            [&](caf::actor peer) {
              self->request(peer, 10s, dht_ping_request{dht_contact{id_bytes(key_id("probe")), ""}, {}})
                  .receive([&](dht_ping_reply& r) { id = r.responder.id; },
                           [&](caf::error& e) { BOOST_FAIL(describe(e)); });
            },
            [&](caf::error& e) { BOOST_FAIL(describe(e)); });
    self->send_exit(connector, caf::exit_reason::user_shutdown);
    return id;
  };
  std::string id1, id2;
  {
    DhtProcess n({"--port", "0", "--data_dir", dir.str()});
    id1 = id_of(n.address());
    BOOST_TEST(n.process().stop() == 0);
  }
  {
    DhtProcess n({"--port", "0", "--data_dir", dir.str()});
    id2 = id_of(n.address());
  }
  BOOST_TEST(id1.size() == 20u);
  BOOST_TEST(id1 == id2);
}

BOOST_AUTO_TEST_CASE(bootstrap_fails_clearly_when_no_peer_answers) {
  corolla_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto connector = spawn_connector(sys);
  dht_options o;
  o.id = key_id("lonely");
  o.client_mode = true;
  auto node = spawn_dht_node(sys, o, connector);
  caf::error err;
  self->request(node, 60s, dht_bootstrap{{"127.0.0.1:1", "127.0.0.1:2"}})
      .receive([&](const dht_bootstrap_reply&) {}, [&](caf::error& e) { err = e; });
  // Each peer with why it did not answer (here: nothing listens on its port).
  BOOST_TEST(describe(err).rfind("peer_unavailable: none of the initial peers answered: 127.0.0.1:1 (peer_unavailable: "
                                 "cannot connect to 127.0.0.1:1: ",
                                 0) == 0u,
             describe(err));
  BOOST_TEST(describe(err).find("), 127.0.0.1:2 (peer_unavailable: cannot connect to 127.0.0.1:2: ") !=
             std::string::npos);
  self->send_exit(node, caf::exit_reason::user_shutdown);
  self->send_exit(connector, caf::exit_reason::user_shutdown);
}

// A flood of valid records from one peer (keys cost nothing) fills at most its address's share of a key on the
// node it reaches (DhtStorage::Options::max_subkeys_per_origin, 64): the rest is refused, and the node's subkeys
// stay open to records from elsewhere. Quotas count by the address a peer connected from, which the gateway knows
// for every node that reached it.
BOOST_AUTO_TEST_CASE(a_flood_from_one_address_takes_only_its_share_of_a_key) {
  dht_swarm s(0);
  auto a = s.client(s.nodes[0]->address());
  BOOST_REQUIRE_MESSAGE(a, why(a));
  test::RecordSigner signer;
  size_t accepted = 0;
  for (int i = 0; i < 80; ++i) {
    auto stored = s.ask<dht_put_reply>(*a, signer.put("llama.0", "flooder-" + std::to_string(i), "x", s.now() + 10min));
    if (stored && stored->replicas > 0) ++accepted;
  }
  BOOST_TEST(accepted == 64u);
  caf::actor node;
  s.self->request(s.connector, 10s, resolve_atom::value, s.nodes[0]->address())
      .receive([&](caf::actor p) { node = p; }, [&](caf::error& e) { BOOST_FAIL(describe(e)); });
  auto r = s.ask<dht_find_value_reply>(
      node, dht_find_value_request{dht_contact{id_bytes(key_id("probe")), ""}, id_bytes(key_id("llama.0")), {}});
  BOOST_REQUIRE_MESSAGE(r, why(r));
  BOOST_TEST(r->items.size() == 64u);
  // This process's gateway knows the node process by the address it reached it at.
  const auto address = peer_address_of(s.sys, node.node());
  BOOST_REQUIRE(address.has_value());
  BOOST_TEST(*address == "127.0.0.1");
}
