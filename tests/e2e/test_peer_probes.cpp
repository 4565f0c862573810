// A hostile process on a node's peer port (127.0.0.1 only): it speaks BASP as CAF writes it, but sends what a
// node's own actors send each other, claims other nodes' ids, announces gigabyte frames and floods random and
// crafted frames. The node obeys none of it, its memory stays bounded, and it keeps serving.
#define BOOST_TEST_MODULE peer_probes
#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>
#include <fstream>
#include <random>
#include <thread>

#include "actors/client/client_api.hpp"
#include "actors/dht/dht_messages.hpp"
#include "actors/net/connector.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/protocol/messages.hpp"
#include "actors/system/system_config.hpp"
#include "support/basp_frames.hpp"
#include "support/golden.hpp"
#include "support/process.hpp"
#include "support/raw_socket.hpp"
#include "support/temp_dir.hpp"

using namespace corolla;
using namespace corolla::test;
using namespace std::chrono_literals;

namespace {

uint16_t port_of(const std::string& address) {
  std::string host;
  uint16_t port = 0;
  BOOST_REQUIRE(parse_address(address, host, port));
  return port;
}

// The test's own side: an actor system with a connector and the golden model's head, as a client has.
struct client_side {
  corolla_config cfg;
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  caf::actor connector = spawn_connector(sys);
  std::shared_ptr<ClientHead> head = std::make_shared<ClientHead>(*open_weights(model_dir("llama")), *backend);

  ~client_side() { self->send_exit(connector, caf::exit_reason::user_shutdown); }

  // Greedy generation through the server at `address`; empty when it fails.
  std::vector<int32_t> generate(const std::string& address) {
    auto client = spawn_swarm_client(
        sys, {.initial_peers = {address}, .mode = route_mode::relay, .request_timeout = 20s}, head, connector);
    std::vector<int32_t> tokens;
    inference_session_actor session;
    self->request(client, 30s, open_session_request{64, 1})
        .receive([&](inference_session_actor s) { session = s; },
                 [&](caf::error& e) { BOOST_TEST_MESSAGE(describe(e)); });
    if (session) {
      generate_request req;
      req.prompt = Golden("llama").ids("input_ids");
      req.params.max_new_tokens = 8;
      req.params.stop_at_eos = false;
      self->request(session, 30s, req)
          .receive([&](generate_result& r) { tokens = r.tokens; },
                   [&](caf::error& e) { BOOST_TEST_MESSAGE(describe(e)); });
      self->send_exit(session, caf::exit_reason::user_shutdown);
    }
    self->send_exit(client, caf::exit_reason::user_shutdown);
    return tokens;
  }

  // A raw connection that has read the node's server handshake.
  std::pair<RawSocket, server_greeting> greeted(uint16_t port) {
    RawSocket s(port);
    auto header = s.read_exactly(32, 5s);
    BOOST_REQUIRE_EQUAL(header.size(), 32u);
    const uint32_t len = (uint32_t(uint8_t(header[4])) << 24) | (uint32_t(uint8_t(header[5])) << 16) |
                         (uint32_t(uint8_t(header[6])) << 8) | uint32_t(uint8_t(header[7]));
    auto payload = s.read_exactly(len, 5s);
    return {std::move(s), read_server_handshake(sys, header, payload)};
  }
};

std::vector<int32_t> expected_tokens() {
  auto all = Golden("llama").ids("greedy_ids");
  return {all.begin(), all.begin() + 8};
}

std::vector<std::string> server_flags(const TempDir& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> f{
      "--model",    model_dir("llama"),  "--block_indices", "0:4", "--port", "0", "--threads", "1",
      "--data_dir", dir.str() + "/node", "--cache_tokens",  "1024"};
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

}  // namespace

// What a node's own actors send each other (a new span, a new address, an exit) arrives from a stranger as
// well-formed BASP addressed to the published gate. Unguarded, the span message made the server drop its blocks
// and the exit killed the gate; now the node never delivers them, and serves on.
BOOST_AUTO_TEST_CASE(control_messages_from_a_peer_are_not_obeyed) {
  TempDir dir;
  ServerProcess server(server_flags(dir));
  client_side c;
  const uint16_t port = port_of(server.address());
  {
    auto [s, greeting] = c.greeted(port);
    s.write(client_handshake(c.sys, fake_node(7)));
    s.write(direct_message(c.sys, greeting.actor, caf::make_message(span_atom::value, int64_t{0}, int64_t{0})));
    s.write(direct_message(c.sys, greeting.actor, caf::make_message(address_atom::value, std::string("127.0.0.1:9"))));
    s.write(direct_message(c.sys, greeting.actor,
                           caf::make_message(caf::exit_msg{caf::actor_addr{}, caf::exit_reason::kill})));
    std::this_thread::sleep_for(300ms);
  }
  {
    // Routed messages that claim to come from the node itself, and down messages about another node's actors.
    auto [s, greeting] = c.greeted(port);
    s.write(client_handshake(c.sys, fake_node(8)));
    s.write(routed_message(c.sys, greeting.node, greeting.node, greeting.actor,
                           caf::make_message(span_atom::value, int64_t{0}, int64_t{0})));
    BOOST_TEST(s.closed_within(2s));
    auto [t, g2] = c.greeted(port);
    t.write(client_handshake(c.sys, fake_node(9)));
    t.write(down_message(c.sys, fake_node(10), g2.node, 1));
    BOOST_TEST(t.closed_within(2s));
  }
  BOOST_TEST(c.generate(server.address()) == expected_tokens(), boost::test_tools::per_element());
}

// A second connection that claims the id of a node already connected must not become the route to that node.
BOOST_AUTO_TEST_CASE(a_connection_claiming_a_connected_node_is_not_its_route) {
  TempDir dir;
  ServerProcess server(server_flags(dir));
  client_side c;
  const uint16_t port = port_of(server.address());
  // The test's own node connects honestly first (a generation), then a stranger claims its id.
  BOOST_REQUIRE(c.generate(server.address()) == expected_tokens());
  auto [s, greeting] = c.greeted(port);
  s.write(client_handshake(c.sys, c.sys.node(), 0x02));
  s.write(direct_message(c.sys, greeting.actor, caf::make_message(span_atom::value, int64_t{0}, int64_t{0})));
  std::this_thread::sleep_for(300ms);
  BOOST_TEST(c.generate(server.address()) == expected_tokens(), boost::test_tools::per_element());
  BOOST_TEST(s.closed_within(8s));  // at the handshake deadline
}

// Frame headers announce up to 4 GiB; CAF allocated what they said before any handshake (four at once took the
// process to +4 GiB). The gateway closes such connections and the node's memory does not move.
BOOST_AUTO_TEST_CASE(frames_announcing_gigabytes_cost_nothing) {
  TempDir dir;
  ServerProcess server(server_flags(dir));
  client_side c;
  const uint16_t port = port_of(server.address());
  const pid_t pid = server.process().pid();
  const size_t before = rss_bytes(pid);
  std::vector<RawSocket> open;
  for (int i = 0; i < 4; ++i) {
    // Before the handshake.
    RawSocket s(port);
    s.write(frame(c.sys, basp::message_type::direct_message, bytes(1024, 'x'), 0, 0, 1, 0, 0xffffffffu));
    open.push_back(std::move(s));
    // After one, as a message to the gate.
    auto [t, greeting] = c.greeted(port);
    t.write(client_handshake(c.sys, fake_node(20 + i)));
    t.write(frame(c.sys, basp::message_type::direct_message, bytes(4096, 'y'), 0, 0, greeting.actor, 0, 0xfffffff0u));
    open.push_back(std::move(t));
  }
  std::this_thread::sleep_for(1s);
  const size_t after = rss_bytes(pid);
  BOOST_TEST_MESSAGE("RSS before " << before / 1048576 << " MiB, after " << after / 1048576 << " MiB");
  BOOST_TEST(after < before + (100u << 20));
  for (auto& s : open) BOOST_TEST(s.closed_within(2s));
  BOOST_TEST(c.generate(server.address()) == expected_tokens(), boost::test_tools::per_element());
}

namespace {

// One hostile frame: random bytes, a random header with a random payload, a message outside the peer protocol,
// a wire message with partly random bytes (which the node's decoders see), or a header announcing too much.
bytes hostile_frame(client_side& c, std::mt19937_64& rng, uint64_t actor) {
  auto random_bytes = [&](size_t n) {
    bytes b(n);
    for (auto& x : b) x = static_cast<char>(rng());
    return b;
  };
  switch (rng() % 6) {
    case 0: return random_bytes(1 + rng() % 4096);
    case 1: {
      const auto op = static_cast<basp::message_type>(rng() % 8);
      return frame(c.sys, op, random_bytes(rng() % 2048), rng() % 4, rng() % 4, rng() % 2 ? actor : rng(),
                   static_cast<uint8_t>(rng() % 3));
    }
    case 2:
      return direct_message(c.sys, actor, caf::make_message(span_atom::value, int64_t(rng() % 4), int64_t(rng() % 4)));
    case 3: {
      // The filter passes it (its length is right); the node's decoder meets the garbage.
      auto m = direct_message(c.sys, actor,
                              caf::make_message(rng() % 2 ? step_request{} : step_request{7, 1, {}, {}, {}, {}}));
      for (size_t i = 0, n = 1 + rng() % 16; i < n; ++i) m[m.size() - 1 - rng() % 24] = static_cast<char>(rng());
      return m;
    }
    case 4:
      return frame(c.sys, basp::message_type::direct_message, random_bytes(64), 0, 0, actor, 0,
                   static_cast<int64_t>(rng() % 0xffffffffu));
    default: return direct_message(c.sys, actor, caf::make_message(std::string(rng() % 64, 'q')));
  }
}

// Sends 10,000 hostile frames to the node at `port`, over as many connections as it takes (a connection the
// node closes is replaced); then its memory must be back under its starting RSS + 100 MB within 5 s.
void flood(client_side& c, uint16_t port, pid_t pid) {
  std::mt19937_64 rng(2026);
  const size_t before = rss_bytes(pid);
  size_t frames = 0, connections = 0;
  while (frames < 10000) {
    ++connections;
    RawSocket s(port);
    auto header = s.read_exactly(32, 5s);
    BOOST_REQUIRE_MESSAGE(header.size() == 32,
                          "the node stopped greeting new connections after " << frames << " frames");
    const uint32_t len = (uint32_t(uint8_t(header[4])) << 24) | (uint32_t(uint8_t(header[5])) << 16) |
                         (uint32_t(uint8_t(header[6])) << 8) | uint32_t(uint8_t(header[7]));
    auto greeting = read_server_handshake(c.sys, header, s.read_exactly(len, 5s));
    s.write(client_handshake(c.sys, fake_node(static_cast<uint32_t>(1000 + connections))));
    for (int i = 0; i < 40 && frames < 10000; ++i, ++frames)
      if (!s.write(hostile_frame(c, rng, greeting.actor))) break;
  }
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  size_t after = rss_bytes(pid);
  while (after >= before + (100u << 20) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(200ms);
    after = rss_bytes(pid);
  }
  BOOST_TEST_MESSAGE(frames << " frames over " << connections << " connections; RSS " << before / 1048576
                            << " MiB before, " << after / 1048576 << " MiB after");
  BOOST_TEST(after < before + (100u << 20));
}

// Limits that let one test process open hundreds of connections a second from 127.0.0.1.
const std::vector<std::string> kFloodLimits{"--peer_connections_per_second", "100000"};

}  // namespace

BOOST_AUTO_TEST_CASE(a_server_survives_ten_thousand_hostile_frames) {
  TempDir dir;
  ServerProcess server(server_flags(dir, kFloodLimits));
  client_side c;
  BOOST_REQUIRE(c.generate(server.address()) == expected_tokens());
  flood(c, port_of(server.address()), server.process().pid());
  BOOST_TEST(c.generate(server.address()) == expected_tokens(), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_dht_node_survives_ten_thousand_hostile_frames) {
  TempDir dir;
  std::vector<std::string> flags{"--port", "0", "--data_dir", dir.str() + "/dht"};
  flags.insert(flags.end(), kFloodLimits.begin(), kFloodLimits.end());
  DhtProcess node(flags);
  client_side c;
  flood(c, port_of(node.address()), node.process().pid());
  // Still answering the DHT protocol.
  bool answered = false;
  c.self->request(c.connector, 10s, relay_atom::value, node.address(), caf::make_message(dht_ping_request{}))
      .receive([&](dht_ping_reply&) { answered = true; },
               [&](caf::error& e) { answered = e != caf::sec::request_timeout && !is(e, errc::peer_unavailable); });
  BOOST_TEST(answered);
}

// A peer that starts a large frame and then sends a byte now and then would hold the connection (and the frame's
// budget) for ever. It is dropped: by CAF's heartbeat deadline (1 s without a whole message), and failing that by
// the gateway's minimum receive rate (64 KiB/s after a 5 s grace).
BOOST_AUTO_TEST_CASE(a_peer_sending_too_slowly_is_dropped) {
  TempDir dir;
  ServerProcess server(server_flags(dir));
  client_side c;
  auto [s, greeting] = c.greeted(port_of(server.address()));
  s.write(client_handshake(c.sys, fake_node(30)));
  auto m = direct_message(
      c.sys, greeting.actor,
      caf::make_message(forward_request{Tensor::empty(DType::f32, {1, 256, 1024}), {}, {}, 0, 4, {}, 0, {}, {}}));
  s.write(m.data(), 8192);  // the header and the start: judged, passed, then trickled
  const auto t0 = std::chrono::steady_clock::now();
  bool closed = false;
  for (size_t at = 8192; at < m.size() && !closed; ++at) {
    if (!s.write(m.data() + at, 1)) break;
    closed = s.closed_within(300ms);
    if (std::chrono::steady_clock::now() - t0 > 15s) break;
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST_MESSAGE("dropped after " << waited << " s");
  BOOST_TEST(closed);
  BOOST_TEST(waited < 10.0);
  BOOST_TEST(c.generate(server.address()) == expected_tokens(), boost::test_tools::per_element());
}
