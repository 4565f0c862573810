// Many DHT nodes in one process under CAF's deterministic scheduler and virtual time: every stored key is
// readable from every node; keys survive 20% of the nodes dying (some killed, some silent); lookups take
// O(log n) hops; values expire; bad input gets errors and leaves the node serving; client-mode nodes are served
// but serve nobody. In-process, the connector resolves the names the nodes are registered under.
#define BOOST_TEST_MODULE dht_inprocess
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "actors/dht/dht_internal.hpp"
#include "actors/dht/dht_node.hpp"
#include "actors/net/connector.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "support/deterministic_system.hpp"
#include "support/record_signer.hpp"

using namespace corolla;
using namespace corolla::test;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

// What an expected holds, for messages (Boost.Test builds them even when the check passes).
template <class T>
std::string why(const caf::expected<T>& r) {
  return r ? std::string("ok") : describe(r.error());
}

template <class T>
bool failed_with(const caf::expected<T>& r, errc code) {
  return !r && is(r.error(), code);
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// An actor that takes every request and never answers: a frozen node.
struct silent_state {
  std::vector<caf::response_promise> held;
};
caf::behavior silent_node(caf::stateful_actor<silent_state>* self) {
  self->set_default_handler([=](caf::scheduled_actor*, caf::message_view&) -> caf::result<caf::message> {
    self->state.held.push_back(self->make_response_promise());
    return self->state.held.back();
  });
  return {[](close_atom) {}};
}

struct Swarm : DeterministicSystem {
  caf::actor connector = own(spawn_connector(sys));
  std::vector<dht_node_actor> nodes;
  std::vector<std::string> names;
  std::vector<NodeId> ids;
  std::set<size_t> down;  // killed or silent
  std::mt19937_64 rng{2024};
  dht_options base;

  Swarm() {
    base.rpc_timeout = 5s;
    base.lookup_timeout = 60s;
    base.refresh_period = 10min;
    base.republish_period = 10min;
    base.purge_period = 60s;
  }

  NodeId random_id() {
    NodeId id;
    for (auto& b : id) b = static_cast<uint8_t>(rng());
    return id;
  }

  size_t add_node(bool client = false, std::optional<NodeId> id = std::nullopt) {
    dht_options o = base;
    o.id = id ? *id : random_id();
    o.client_mode = client;
    const std::string name = (client ? "dht-client-" : "dht-") + std::to_string(nodes.size());
    if (!client) o.address = name;
    auto node = own(spawn_dht_node(sys, o, connector));
    if (!client) caf::anon_send(connector, register_atom::value, name, caf::actor_cast<caf::actor>(node));
    nodes.push_back(node);
    names.push_back(name);
    ids.push_back(o.id);
    run();
    return nodes.size() - 1;
  }

  // n server nodes, each bootstrapping from a random earlier one as it joins.
  void grow(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const size_t joined = nodes.size();
      const size_t me = add_node();
      if (joined == 0) continue;
      auto r = ask<dht_bootstrap_reply>(nodes[me], dht_bootstrap{{names[rng() % joined]}});
      BOOST_REQUIRE_MESSAGE(r, "bootstrap of " << names[me] << ": " << why(r));
    }
  }

  size_t random_live() {
    for (;;) {
      const size_t i = rng() % nodes.size();
      if (!down.count(i)) return i;
    }
  }

  // Records are signed (one key per subkey name, as if each name were a server): put() signs, get() returns the
  // entries that check, by name, with their payloads.
  test::RecordSigner signer;
  caf::expected<dht_put_reply> put(size_t from, const std::string& key, const std::string& subkey,
                                   const std::string& value, caf::timespan ttl = 1h) {
    return ask<dht_put_reply>(nodes[from], signer.put(key, subkey, value, now() + ttl));
  }
  caf::expected<dht_get_reply> get(size_t from, const std::string& key) {
    auto r = ask<dht_get_reply>(nodes[from], dht_get{key});
    if (r) r->entries = test::RecordSigner::payloads(key, r->entries, now());
    return r;
  }
  // Many gets at once (node index, key).
  std::vector<caf::expected<dht_get_reply>> get_all(const std::vector<std::pair<size_t, std::string>>& which) {
    std::vector<std::pair<caf::actor, dht_get>> reqs;
    for (const auto& [i, key] : which) reqs.push_back({caf::actor_cast<caf::actor>(nodes[i]), dht_get{key}});
    auto out = ask_all<dht_get_reply>(reqs);
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i]) out[i]->entries = test::RecordSigner::payloads(which[i].second, out[i]->entries, now());
    return out;
  }
};

struct HopStats {
  int max = 0;
  double sum = 0;
  size_t n = 0;
  void add(int h) {
    max = std::max(max, h);
    sum += h;
    ++n;
  }
  double mean() const { return n ? sum / static_cast<double>(n) : 0; }
};

}  // namespace

BOOST_AUTO_TEST_CASE(every_key_is_readable_from_every_node) {
  const auto t0 = Clock::now();
  Swarm s;
  s.grow(100);
  const double build_s = seconds_since(t0);
  // 20 keys, each with 3 subkeys stored through different nodes.
  std::map<std::string, std::map<std::string, std::string>> want;
  for (int k = 0; k < 20; ++k) {
    const std::string key = "model.block" + std::to_string(k);
    for (int sub = 0; sub < 3; ++sub) {
      const size_t from = s.random_live();
      const std::string subkey = "server-" + std::to_string(from), value = key + " by " + s.names[from];
      auto r = s.put(from, key, subkey, value);
      BOOST_REQUIRE_MESSAGE(r, why(r));
      BOOST_TEST(r->replicas == 5u);
      want[key][subkey] = value;
    }
  }
  std::vector<std::pair<size_t, std::string>> reads;
  for (size_t i = 0; i < s.nodes.size(); ++i)
    for (const auto& [key, subs] : want) reads.push_back({i, key});
  auto got = s.get_all(reads);
  HopStats hops;
  size_t complete = 0;
  for (size_t r = 0; r < reads.size(); ++r) {
    BOOST_REQUIRE_MESSAGE(got[r], why(got[r]));
    bool all = true;
    for (const auto& [subkey, value] : want[reads[r].second]) {
      auto it = got[r]->entries.find(subkey);
      all = all && it != got[r]->entries.end() && it->second.value == value;
    }
    complete += all;
    hops.add(got[r]->hops);
  }
  BOOST_TEST(complete == reads.size());
  const double bound = 2 * std::log2(100.0);
  BOOST_TEST(hops.max <= bound);
  std::cout << "dht: 100 nodes built in " << build_s << " s; " << reads.size() << " gets, " << complete
            << " complete; hops mean " << hops.mean() << " max " << hops.max << " (bound " << bound << "); "
            << seconds_since(t0) << " s in all\n";
}

BOOST_AUTO_TEST_CASE(keys_survive_twenty_percent_of_nodes_dying) {
  const auto t0 = Clock::now();
  Swarm s;
  s.grow(100);
  std::map<std::string, std::string> want;
  for (int k = 0; k < 100; ++k) {
    const std::string key = "key-" + std::to_string(k);
    auto r = s.put(s.random_live(), key, "only", "value " + std::to_string(k));
    BOOST_REQUIRE_MESSAGE(r, why(r));
    want[key] = "value " + std::to_string(k);
  }
  // 20 nodes go: 10 are killed, 10 freeze (they take requests and never answer: RPCs to them time out).
  std::set<NodeId> gone;
  while (s.down.size() < 20) {
    const size_t i = s.random_live();
    if (s.down.size() % 2 == 0) {
      caf::anon_send_exit(s.nodes[i], caf::exit_reason::kill);
    } else {
      caf::anon_send_exit(s.nodes[i], caf::exit_reason::kill);
      caf::anon_send(s.connector, register_atom::value, s.names[i], s.own(s.sys.spawn(silent_node)));
    }
    s.down.insert(i);
    gone.insert(s.ids[i]);
  }
  s.run();
  auto dead_in_tables = [&] {
    size_t dead = 0, all = 0;
    for (size_t i = 0; i < s.nodes.size(); ++i) {
      if (s.down.count(i)) continue;
      auto info = s.ask<dht_info>(s.nodes[i], dht_info_request{});
      BOOST_REQUIRE(info);
      for (const auto& c : info->table) dead += gone.count(c.id), ++all;
    }
    return std::make_pair(dead, all);
  };
  const auto before = dead_in_tables();
  // One refresh period passes.
  s.advance(s.base.refresh_period);
  const auto refreshed = dead_in_tables();
  // Every key read from 10 live nodes.
  std::vector<std::pair<size_t, std::string>> reads;
  for (const auto& [key, value] : want)
    for (int j = 0; j < 10; ++j) reads.push_back({s.random_live(), key});
  auto got = s.get_all(reads);
  size_t readable = 0;
  HopStats hops;
  for (size_t r = 0; r < reads.size(); ++r) {
    if (!got[r]) continue;
    auto it = got[r]->entries.find("only");
    readable += it != got[r]->entries.end() && it->second.value == want[reads[r].second];
    hops.add(got[r]->hops);
  }
  const double fraction = static_cast<double>(readable) / static_cast<double>(reads.size());
  BOOST_TEST(fraction >= 0.99);
  // Contacts that fail leave the tables (after max_failures failed RPCs in a row, or at once when they fail the
  // ping made for a waiting newcomer): the reads' lookups met the dead ones.
  const auto after = dead_in_tables();
  BOOST_TEST(after.first * 2 < before.first);
  std::cout << "dht: 20 of 100 nodes down (10 killed, 10 silent); after one refresh period " << readable << "/"
            << reads.size() << " reads (" << 100 * fraction << "%) found their value; hops mean " << hops.mean()
            << " max " << hops.max << "; dead contacts in routing tables " << before.first << "/" << before.second
            << ", after the refresh period " << refreshed.first << "/" << refreshed.second << ", after the reads "
            << after.first << "/" << after.second << "; " << seconds_since(t0) << " s\n";
}

BOOST_AUTO_TEST_CASE(lookup_hops_grow_logarithmically) {
  const auto t0 = Clock::now();
  Swarm s;
  std::cout << "dht: find_nodes hops by network size (50 lookups each):";
  for (size_t n : {25u, 50u, 100u, 200u, 400u}) {
    s.grow(n - s.nodes.size());
    std::vector<std::pair<caf::actor, dht_find_nodes>> reqs;
    for (int j = 0; j < 50; ++j)
      reqs.push_back({caf::actor_cast<caf::actor>(s.nodes[s.random_live()]), dht_find_nodes{{}, s.random_id()}});
    auto got = s.ask_all<dht_find_nodes_reply>(reqs);
    HopStats hops;
    for (auto& r : got) {
      BOOST_REQUIRE(r);
      BOOST_TEST(r->closest.size() == 20u);
      hops.add(r->hops);
    }
    const double bound = 2 * std::log2(static_cast<double>(n));
    BOOST_TEST(hops.max <= bound, "n = " << n << ": " << hops.max << " hops");
    std::cout << " n=" << n << " mean " << hops.mean() << " max " << hops.max << ";";
  }
  std::cout << " " << seconds_since(t0) << " s\n";
}

BOOST_AUTO_TEST_CASE(values_and_subkeys_expire) {
  Swarm s;
  s.grow(30);
  BOOST_REQUIRE(s.put(3, "llama.0", "server-a", "A", 30s));
  BOOST_REQUIRE(s.put(7, "llama.0", "server-b", "B", 90s));
  auto r = s.get(12, "llama.0");
  BOOST_REQUIRE(r);
  BOOST_TEST(r->entries.size() == 2u);
  BOOST_TEST(r->entries["server-a"].value == "A");
  BOOST_TEST((r->entries["server-a"].expiration <= s.now() + 30s));
  s.advance(31s);
  r = s.get(20, "llama.0");
  BOOST_REQUIRE(r);
  BOOST_TEST(r->entries.size() == 1u);
  BOOST_TEST(r->entries.count("server-b") == 1u);
  s.advance(60s);
  r = s.get(25, "llama.0");
  BOOST_REQUIRE(r);
  BOOST_TEST(r->entries.empty());
  // Purged from every node's storage by the next purge.
  s.advance(s.base.purge_period);
  size_t stored = 0;
  for (auto& n : s.nodes) stored += s.ask<dht_info>(n, dht_info_request{})->entries;
  BOOST_TEST(stored == 0u);
  // An expiration in the past is refused.
  auto late = s.ask<dht_put_reply>(s.nodes[0], s.signer.put("k", "s", "v", s.now()));
  BOOST_TEST(failed_with(late, errc::bad_request));
}

// A put of a key its node read a moment ago stores on the nodes that read converged on, without a lookup of its
// own; a put after the reuse window (10 s) looks the key up again. Seen through a node that joins nearest to the
// key right after the read: the first put does not reach it, the later one does, and every node reads both.
BOOST_AUTO_TEST_CASE(a_put_right_after_a_read_stores_where_the_read_converged) {
  Swarm s;
  s.grow(60);
  const std::string key = "llama.0-31";
  auto read = s.get(0, key);
  BOOST_REQUIRE_MESSAGE(read, why(read));
  BOOST_TEST(read->entries.empty());
  NodeId nearest = key_id(key);
  nearest[kIdBytes - 1] ^= 1;  // distance 1 from the key: nearer than any other node
  const size_t late = s.add_node(false, nearest);
  auto joined = s.ask<dht_bootstrap_reply>(s.nodes[late], dht_bootstrap{{s.names[1]}});
  BOOST_REQUIRE_MESSAGE(joined, why(joined));
  auto entries_on = [&](size_t i) { return s.ask<dht_info>(s.nodes[i], dht_info_request{})->entries; };

  auto first = s.put(0, key, "server-a", "A");
  BOOST_REQUIRE_MESSAGE(first, why(first));
  BOOST_TEST(first->replicas == 5u);
  BOOST_TEST(entries_on(late) == 0u);

  s.advance(11s);
  auto second = s.put(0, key, "server-b", "B");
  BOOST_REQUIRE_MESSAGE(second, why(second));
  BOOST_TEST(second->replicas == 5u);
  BOOST_TEST(entries_on(late) == 1u);

  std::vector<std::pair<size_t, std::string>> reads;
  for (size_t i = 0; i < s.nodes.size(); ++i) reads.push_back({i, key});
  size_t both = 0;
  for (auto& r : s.get_all(reads)) both += r && r->entries.count("server-a") && r->entries.count("server-b");
  BOOST_TEST(both == s.nodes.size());
}

BOOST_AUTO_TEST_CASE(bad_input_gets_errors_and_the_node_keeps_serving) {
  Swarm s;
  s.grow(10);
  BOOST_REQUIRE(s.put(1, "kept", "s", "value"));
  auto node = s.nodes[4];
  const dht_contact sender{id_bytes(s.random_id()), "dht-somewhere"};
  auto expect_bad = [&](caf::expected<auto> r, const std::string& words) {
    BOOST_TEST(failed_with(r, errc::bad_request), why(r));
    BOOST_TEST(why(r).find(words) != std::string::npos, why(r));
  };
  // A value over 64 KiB, through the API and as an RPC.
  // (A signed record of a payload that brings it to exactly 64 KiB, or one byte over: `extra` = 0 or 1.)
  auto record_of_size = [&](size_t bytes) {
    dht_put p = s.signer.put("big", "s", std::string(bytes - 200, 'x'), s.now() + 1h);
    p = s.signer.put("big", "s", std::string(bytes - 200 + (bytes - p.value.size()), 'x'), s.now() + 1h);
    return p;
  };
  dht_put over = record_of_size(kMaxDhtValueBytes);
  over.value += std::string(8, 'x');  // capnp pads to words: the record's own bytes plus a word
  expect_bad(s.ask<dht_put_reply>(node, over), "65544 bytes");
  expect_bad(
      s.ask<dht_store_reply>(
          node,
          dht_store_request{
              sender, id_bytes(key_id("big")), {{"s", std::string(kMaxDhtValueBytes + 1, 'x'), 3600'000'000'000}}, {}}),
      "the limit is 65536");
  // Exactly 64 KiB is fine.
  const dht_put exact = record_of_size(kMaxDhtValueBytes);
  BOOST_TEST(exact.value.size() == kMaxDhtValueBytes);
  BOOST_TEST(s.ask<dht_put_reply>(node, exact));
  // Ids of 19 bytes: target, key, sender.
  expect_bad(s.ask<dht_find_node_reply>(node, dht_find_node_request{sender, std::string(19, 'x'), {}}),
             "the target id has 19 bytes");
  expect_bad(s.ask<dht_find_value_reply>(node, dht_find_value_request{sender, std::string(19, 'x'), {}}),
             "the key id has 19 bytes");
  expect_bad(s.ask<dht_ping_reply>(node, dht_ping_request{dht_contact{std::string(19, 'x'), "x"}, {}}),
             "the sender's id has 19 bytes");
  // Too many items in one store.
  expect_bad(s.ask<dht_store_reply>(
                 node,
                 dht_store_request{
                     sender, id_bytes(key_id("many")), std::vector<dht_item>(300, {"s", "v", 1'000'000'000}), {}}),
             "300 items");
  // A record that would outlive the hour is refused, not shortened.
  const int64_t ten_years_ns = int64_t{10} * 365 * 24 * 3600 * 1000000000;
  auto late = s.ask<dht_store_reply>(
      node, dht_store_request{sender, id_bytes(key_id("late")), {{"s", "offline", ten_years_ns}}, {}});
  BOOST_REQUIRE(late);
  BOOST_TEST(late->stored == std::vector<bool>{false}, boost::test_tools::per_element());
  // A malformed message, as it arrives from the wire.
  dht_store_request garbage;
  decode(std::make_shared<std::vector<char>>(std::vector<char>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}),
         garbage);
  BOOST_TEST(!garbage.wire_error.empty());
  expect_bad(s.ask<dht_store_reply>(node, garbage), "malformed message");
  // A message of another kind altogether.
  auto hello = s.ask<dht_ping_reply>(node, std::string("hello"));
  BOOST_TEST(failed_with(hello, errc::unexpected_message), why(hello));
  // The node is unaffected: it answers pings and serves reads.
  auto pong = s.ask<dht_ping_reply>(node, dht_ping_request{sender, {}});
  BOOST_REQUIRE(pong);
  BOOST_TEST(pong->responder.id == id_bytes(s.ids[4]));
  auto r = s.get(4, "kept");
  BOOST_REQUIRE(r);
  BOOST_TEST(r->entries["s"].value == "value");
}

BOOST_AUTO_TEST_CASE(client_nodes_are_served_but_serve_nobody) {
  Swarm s;
  s.grow(20);
  const size_t client = s.add_node(true);
  auto boot = s.ask<dht_bootstrap_reply>(s.nodes[client], dht_bootstrap{{s.names[5]}});
  BOOST_REQUIRE_MESSAGE(boot, why(boot));
  BOOST_TEST(boot->contacts >= 10u);
  auto stored = s.put(client, "from-client", "c", "hello");
  BOOST_REQUIRE_MESSAGE(stored, why(stored));
  BOOST_TEST(stored->replicas == 5u);  // on server nodes only
  auto r = s.get(client, "from-client");
  BOOST_REQUIRE(r);
  BOOST_TEST(r->entries["c"].value == "hello");
  BOOST_TEST(s.get(11, "from-client")->entries["c"].value == "hello");
  // It refuses RPCs.
  auto refused = s.ask<dht_ping_reply>(s.nodes[client], dht_ping_request{{id_bytes(s.ids[0]), s.names[0]}, {}});
  BOOST_TEST(failed_with(refused, errc::bad_request));
  BOOST_TEST(why(refused).find("client mode") != std::string::npos);
  // Nobody added it to a routing table.
  for (size_t i = 0; i < client; ++i) {
    auto info = s.ask<dht_info>(s.nodes[i], dht_info_request{});
    for (const auto& c : info->table) BOOST_TEST((c.id != s.ids[client]));
  }
  auto info = s.ask<dht_info>(s.nodes[client], dht_info_request{});
  BOOST_TEST(info->client_mode);
  BOOST_TEST(info->contacts >= 10u);
}

BOOST_AUTO_TEST_CASE(bootstrap_names_the_peers_that_did_not_answer) {
  Swarm s;
  s.grow(3);
  const size_t lone = s.add_node();
  auto r = s.ask<dht_bootstrap_reply>(s.nodes[lone], dht_bootstrap{{"dht-missing-1", "dht-missing-2"}});
  BOOST_REQUIRE(!r);
  BOOST_TEST(why(r) ==
             "peer_unavailable: none of the initial peers answered: "
             "dht-missing-1 (bad_request: 'dht-missing-1' is not a HOST:PORT address), "
             "dht-missing-2 (bad_request: 'dht-missing-2' is not a HOST:PORT address)");
  // One answering peer is enough.
  auto ok = s.ask<dht_bootstrap_reply>(s.nodes[lone], dht_bootstrap{{"dht-missing-1", s.names[0]}});
  BOOST_REQUIRE_MESSAGE(ok, why(ok));
  BOOST_TEST(ok->answered == std::vector<std::string>{s.names[0]});
  BOOST_TEST(ok->contacts == 3u);
  // A lone node stores locally.
  Swarm alone;
  const size_t only = alone.add_node();
  auto put = alone.put(only, "k", "s", "v");
  BOOST_REQUIRE(put);
  BOOST_TEST(put->replicas == 1u);
  BOOST_TEST(alone.get(only, "k")->entries["s"].value == "v");
}

// Records are signed by the owner their subkey names. Unsigned values, records under another owner's subkey,
// tampered payloads and expired or far-future records are refused, by the API and by the store RPC; a record is
// kept no longer than its signature says, whatever time-to-live the sender asks for.
BOOST_AUTO_TEST_CASE(only_records_signed_by_their_subkeys_owner_are_stored) {
  Swarm s;
  s.grow(6);
  auto node = s.nodes[2];
  const dht_contact sender{id_bytes(s.random_id()), "dht-somewhere"};
  auto store = [&](const std::string& key, const std::string& subkey, const std::string& value, int64_t ttl_ns) {
    auto r =
        s.ask<dht_store_reply>(node, dht_store_request{sender, id_bytes(key_id(key)), {{subkey, value, ttl_ns}}, {}});
    BOOST_REQUIRE(r);
    return r->stored.size() == 1 && r->stored[0];
  };
  const int64_t hour = 3600'000'000'000;
  // Unsigned, through the API and as an RPC.
  BOOST_TEST(failed_with(s.ask<dht_put_reply>(node, dht_put{"k", "s", "v", s.now() + 1h}), errc::bad_request));
  BOOST_TEST(!store("k", "s", "v", hour));
  BOOST_TEST(!store("k", s.signer.subkey("alice"), "v", hour));
  // Mallory signs a record under Alice's subkey: the signature is by another key than the subkey names.
  const dht_put by_mallory = s.signer.put("k", "mallory", "alice is offline", s.now() + 10min);
  BOOST_TEST(!store("k", s.signer.subkey("alice"), by_mallory.value, hour));
  BOOST_TEST(
      failed_with(s.ask<dht_put_reply>(node, dht_put{"k", s.signer.subkey("alice"), by_mallory.value, s.now() + 1h}),
                  errc::bad_request));
  // Alice's own record, replayed under another key, or with one byte changed.
  const dht_put by_alice = s.signer.put("k", "alice", "alice is online", s.now() + 10min);
  BOOST_TEST(!store("other-key", by_alice.subkey, by_alice.value, hour));
  std::string tampered = by_alice.value;
  tampered[tampered.find("online")] = 'O';
  BOOST_TEST(!store("k", by_alice.subkey, tampered, hour));
  // Expired, and expiring further ahead than the DHT keeps anything.
  BOOST_TEST(!store("k", by_alice.subkey, s.signer.put("k", "alice", "old", s.now() - 1s).value, hour));
  BOOST_TEST(!store("k", by_alice.subkey, s.signer.put("k", "alice", "far", s.now() + 3h).value, hour));
  // The real one is stored; asked to live an hour, it lives as long as it is signed for (10 minutes).
  BOOST_TEST(store("k", by_alice.subkey, by_alice.value, hour));
  auto r = s.get(2, "k");
  BOOST_REQUIRE(r);
  BOOST_TEST(r->entries["alice"].value == "alice is online");
  BOOST_TEST((r->entries["alice"].expiration <= s.now() + 10min));
  s.advance(11min);
  BOOST_TEST(s.get(2, "k")->entries.count("alice") == 0u);
}
