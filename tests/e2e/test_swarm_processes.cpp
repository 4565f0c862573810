// Servers as real processes on 127.0.0.1, the client in this process: generation equals the single-process run,
// tensors arrive zero-copy, bad input over the wire gets errors and the server keeps serving.
#define BOOST_TEST_MODULE swarm_processes
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>
#include <memory>
#include <numeric>

#include "actors/client/client_api.hpp"
#include "actors/net/connector.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/system/system_config.hpp"
#include "support/golden.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

using namespace corolla;
using namespace corolla::test;
namespace bdata = boost::unit_test::data;

namespace {

struct process_swarm {
  TempDir dir;
  std::vector<std::unique_ptr<ServerProcess>> servers;
  std::vector<std::string> addresses;
  corolla_config cfg;
  // Declared before the actor system, so destroyed after it: its actors use this until they stop.
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  caf::actor connector = spawn_connector(sys);
  std::shared_ptr<ClientHead> head;
  std::vector<caf::actor> owned;

  explicit process_swarm(const std::vector<std::string>& spans, const std::string& model = "llama") {
    for (size_t i = 0; i < spans.size(); ++i) {
      servers.push_back(std::make_unique<ServerProcess>(std::vector<std::string>{
          "--model", model_dir(model), "--block_indices", spans[i], "--port", "0", "--threads", "1", "--data_dir",
          dir.str() + "/node" + std::to_string(i), "--cache_tokens", "2048"}));
      addresses.push_back(servers.back()->address());
    }
    head = std::make_shared<ClientHead>(*open_weights(model_dir(model)), *backend);
  }
  ~process_swarm() {
    for (auto& a : owned) self->send_exit(a, caf::exit_reason::user_shutdown);
    self->send_exit(connector, caf::exit_reason::user_shutdown);
  }

  caf::actor gate(size_t i) {
    caf::actor out;
    self->request(connector, std::chrono::seconds(10), resolve_atom::value, addresses[i])
        .receive([&](caf::actor a) { out = a; }, [&](caf::error& e) { BOOST_FAIL(describe(e)); });
    return out;
  }

  inference_session_actor session(route_mode mode) {
    auto client = spawn_swarm_client(
        sys, {.initial_peers = addresses, .mode = mode, .request_timeout = std::chrono::seconds(20)}, head, connector);
    owned.push_back(caf::actor_cast<caf::actor>(client));
    inference_session_actor s;
    self->request(client, caf::infinite, open_session_request{64, 1})
        .receive([&](inference_session_actor a) { s = a; },
                 [&](caf::error& e) { BOOST_FAIL("open: " << describe(e)); });
    owned.push_back(caf::actor_cast<caf::actor>(s));
    return s;
  }

  template <class Reply, class Handle, class Request>
  caf::expected<Reply> ask(const Handle& dest, Request req) {
    caf::expected<Reply> out = caf::error{};
    self->request(dest, std::chrono::seconds(20), std::move(req))
        .receive([&](Reply& r) { out = std::move(r); }, [&](caf::error& e) { out = std::move(e); });
    return out;
  }
};

std::vector<int32_t> generate(process_swarm& s, route_mode mode, const std::string& model = "llama") {
  auto session = s.session(mode);
  generate_request req;
  req.prompt = Golden(model).ids("input_ids");
  req.params.max_new_tokens = 32;
  req.params.stop_at_eos = false;
  auto r = s.ask<generate_result>(session, req);
  BOOST_REQUIRE_MESSAGE(r, (r ? "" : describe(r.error())));
  return r->tokens;
}

std::vector<int32_t> iota(size_t n, int32_t from = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

}  // namespace

BOOST_AUTO_TEST_CASE(three_servers_relay_match_the_local_run) {
  process_swarm s({"0:2", "2:3", "3:4"});
  BOOST_TEST(generate(s, route_mode::relay) == Golden("llama").ids("greedy_ids"), boost::test_tools::per_element());
  // Logits of the whole prompt through the swarm equal the single-process ones within 1e-5.
  auto session = s.session(route_mode::relay);
  auto ids = Golden("llama").ids("input_ids");
  auto out = s.ask<Tensor>(session, step_input{s.head->embed(ids, 1), iota(ids.size())});
  BOOST_REQUIRE(out);
  auto local_backend = make_cpu_backend(1);
  LocalModel local(open_weights(model_dir("llama")), *local_backend);
  local.reset(1, 64);
  BOOST_TEST(max_abs_diff(s.head->logits(*out), local.forward(ids, iota(ids.size()), false)) < 1e-5f);
}

BOOST_AUTO_TEST_CASE(two_servers_push_match_the_local_run) {
  process_swarm s({"0:2", "2:4"});
  BOOST_TEST(generate(s, route_mode::push) == Golden("llama").ids("greedy_ids"), boost::test_tools::per_element());
}

// Every architecture's blocks served by other processes give its golden greedy tokens, relayed by the client and
// pushed from server to server: biases on every projection, sliding windows (the 44 tokens cross them), q/k norms,
// a mixture of experts, BLOOM's ALiBi and LayerNorms, Falcon's multi-query and grouped parallel blocks, Gemma 2's
// post-norms, soft caps and alternating windows (its client scales the embeddings and caps the logits).
BOOST_DATA_TEST_CASE(every_architecture_splits_over_two_servers,
                     bdata::make({"llama-bias", "mistral-window", "qwen2-window", "qwen3", "mixtral", "phi3", "bloom",
                                  "falcon", "falcon-new", "gemma2"}),
                     model) {
  process_swarm s({"0:2", "2:4"}, model);
  const auto want = Golden(model).ids("greedy_ids");
  BOOST_TEST(generate(s, route_mode::relay, model) == want, boost::test_tools::per_element());
  BOOST_TEST(generate(s, route_mode::push, model) == want, boost::test_tools::per_element());
}

// Continuous batching: eight sessions generating at once through two server processes, whose steps the servers
// run through their blocks together (prompts of different lengths, so prefill and decode steps share batches),
// produce exactly the tokens each produces alone; pushed and relayed.
BOOST_DATA_TEST_CASE(concurrent_sessions_get_the_tokens_each_gets_alone, bdata::make({"push", "relay"}), mode_name) {
  const route_mode mode = std::string(mode_name) == "push" ? route_mode::push : route_mode::relay;
  process_swarm s({"0:2", "2:4"});
  const auto ids = Golden("llama").ids("input_ids");
  std::vector<generate_request> requests;
  for (size_t i = 0; i < 8; ++i) {
    generate_request req;
    req.prompt.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(3 + i));
    req.params.max_new_tokens = 24;
    req.params.stop_at_eos = false;
    requests.push_back(req);
  }
  std::vector<std::vector<int32_t>> alone;
  for (const auto& req : requests) {
    auto r = s.ask<generate_result>(s.session(mode), req);
    BOOST_REQUIRE_MESSAGE(r, (r ? "" : describe(r.error())));
    alone.push_back(r->tokens);
  }
  std::vector<inference_session_actor> sessions;
  for (size_t i = 0; i < requests.size(); ++i) sessions.push_back(s.session(mode));
  std::vector<decltype(s.self->request(sessions[0], caf::infinite, requests[0]))> pending;
  for (size_t i = 0; i < requests.size(); ++i)
    pending.push_back(s.self->request(sessions[i], std::chrono::seconds(60), requests[i]));
  for (size_t i = 0; i < pending.size(); ++i)
    pending[i].receive(
        [&](const generate_result& r) { BOOST_TEST(r.tokens == alone[i], boost::test_tools::per_element()); },
        [&](caf::error& e) { BOOST_ERROR("session " << i << ": " << describe(e)); });
}

BOOST_AUTO_TEST_CASE(tensors_arrive_zero_copy) {
  process_swarm s({"0:4"});
  auto gate = s.gate(0);
  auto opened = s.ask<session_opened>(gate, open_session{16, 1, 0, 0, {}, {}, {}, {}});
  BOOST_REQUIRE(opened);
  Tensor hidden = s.head->embed(std::vector<int32_t>{5, 6, 7}, 1);
  auto r = s.ask<step_reply>(gate, step_request{opened->session_id, 1, hidden, {0, 1, 2}, {}, {}});
  BOOST_REQUIRE(r);
  // The reply's tensor is a view into the bytes CAF received: its owner is that buffer.
  auto buffer = std::static_pointer_cast<const std::vector<char>>(r->hidden.owner());
  const char* p = static_cast<const char*>(r->hidden.data());
  BOOST_TEST((p >= buffer->data() && p + r->hidden.nbytes() <= buffer->data() + buffer->size()));
}

BOOST_AUTO_TEST_CASE(bad_input_over_the_wire_gets_errors_and_other_sessions_go_on) {
  process_swarm s({"0:4"});
  auto gate = s.gate(0);
  auto opened = s.ask<session_opened>(gate, open_session{16, 1, 0, 0, {}, {}, {}, {}});
  BOOST_REQUIRE(opened);
  const uint64_t sid = opened->session_id;
  auto ids = Golden("llama").ids("input_ids");
  std::vector<int32_t> first(ids.begin(), ids.begin() + 6), rest(ids.begin() + 6, ids.end());
  BOOST_REQUIRE(s.ask<step_reply>(gate, step_request{sid, 1, s.head->embed(first, 1), iota(6), {}, {}}));

  auto bad = s.ask<step_reply>(gate, step_request{sid, 2, Tensor::empty(DType::f32, {1, 1, 63}), {6}, {}, {}});
  BOOST_TEST(is(bad.error(), errc::bad_request), describe(bad.error()));
  bad = s.ask<step_reply>(gate, step_request{sid ^ 1, 2, s.head->embed(rest, 1), iota(6, 6), {}, {}});
  BOOST_TEST(is(bad.error(), errc::unknown_session), describe(bad.error()));
  bad = s.ask<step_reply>(gate, step_request{sid, 2, s.head->embed(rest, 1), iota(6, 11), {}, {}});
  BOOST_TEST(is(bad.error(), errc::max_length_exceeded), describe(bad.error()));
  // Shapes whose element count overflows 64 bits (2^32 x 2^32 x hidden counts as 0 elements, so no data "fits"):
  // the server died with SIGSEGV on each; now they are refused like any malformed tensor.
  const int64_t big = int64_t{1} << 32;
  Tensor overflowing = Tensor::view(nullptr, DType::f32, {big, big, 64}, nullptr);
  bad = s.ask<step_reply>(gate, step_request{sid, 2, overflowing, {6}, {}, {}});
  BOOST_TEST(is(bad.error(), errc::bad_request), describe(bad.error()));
  Tensor four_dims = Tensor::view(nullptr, DType::f32, {big, big, big, big}, nullptr);
  bad = s.ask<step_reply>(gate, step_request{sid, 2, four_dims, {6}, {}, {}});
  BOOST_TEST(is(bad.error(), errc::bad_request), describe(bad.error()));
  // (positions: as many as batch x tokens, which overflows to 0 too)
  auto fwd = s.ask<forward_reply>(gate, forward_request{overflowing, {}, {}, 0, 4, {}, 0, {}, {}});
  BOOST_TEST(is(fwd.error(), errc::bad_request), describe(fwd.error()));
  auto bwd = s.ask<backward_reply>(gate, backward_request{overflowing, overflowing, {}, {}, 0, 4, {}, 0, {}});
  BOOST_TEST(is(bwd.error(), errc::bad_request), describe(bwd.error()));

  // A message outside the peer protocol never reaches the gate: the peer gateway drops it unanswered.
  caf::error wrong;
  s.self->request(gate, std::chrono::seconds(1), std::string("not a request"))
      .receive([&](ack&) {}, [&](caf::error& e) { wrong = std::move(e); });
  BOOST_TEST((wrong == caf::sec::request_timeout), describe(wrong));

  // Garbage bytes on the server's port: the connection is dropped, the server lives on.
  std::string host;
  uint16_t port = 0;
  BOOST_REQUIRE(parse_address(s.addresses[0], host, port));
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  BOOST_REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  std::string garbage(4096, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 131 + 7);
  (void)!write(fd, garbage.data(), garbage.size());
  usleep(200000);
  close(fd);

  // The session continues where it was: its logits equal the single-process run.
  auto r = s.ask<step_reply>(gate, step_request{sid, 3, s.head->embed(rest, 1), iota(6, 6), {}, {}});
  BOOST_REQUIRE_MESSAGE(r, (r ? "" : describe(r.error())));
  auto local_backend = make_cpu_backend(1);
  LocalModel local(open_weights(model_dir("llama")), *local_backend);
  local.reset(1, 16);
  Tensor want = local.forward(ids, iota(ids.size()), false);
  Tensor got = s.head->logits(r->hidden);
  BOOST_TEST(max_abs_diff(got.data_as<const float>(), want.data_as<const float>() + 6 * 256, 6 * 256) < 1e-5f);
  BOOST_TEST(s.servers[0]->process().pid() > 0);
}

BOOST_AUTO_TEST_CASE(the_example_client_streams_the_golden_tokens) {
  TempDir dir;
  ServerProcess a(
      {"--model", model_dir("llama"), "--block_indices", "0:2", "--port", "0", "--data_dir", dir.str() + "/a"});
  ServerProcess b(
      {"--model", model_dir("llama"), "--block_indices", "2:4", "--port", "0", "--data_dir", dir.str() + "/b"});
  auto ids = Golden("llama").ids("input_ids");
  std::string prompt;
  for (auto id : ids) prompt += (prompt.empty() ? "" : ",") + std::to_string(id);
  ChildProcess example(std::string(COROLLA_BIN_DIR) + "/stream_tokens",
                       {model_dir("llama"), a.address() + "," + b.address(), prompt, "32"});
  std::string line = example.read_line();
  std::vector<int32_t> got;
  std::stringstream ss(line);
  for (int32_t id; ss >> id;) got.push_back(id);
  BOOST_TEST(got == Golden("llama").ids("greedy_ids"), boost::test_tools::per_element());
}

// The swarm found through the DHT only: a bootstrap node, three servers that join through it, and a client that
// knows nothing but the bootstrap node's address. A server that stops gracefully announces itself offline.
BOOST_AUTO_TEST_CASE(a_client_given_only_the_bootstrap_address_finds_the_servers) {
  TempDir dir;
  DhtProcess boot({"--port", "0", "--data_dir", dir.str() + "/boot"});
  std::vector<std::unique_ptr<ServerProcess>> servers;
  int n = 0;
  for (const char* span : {"0:2", "2:3", "3:4"})
    servers.push_back(std::make_unique<ServerProcess>(std::vector<std::string>{
        "--model", model_dir("llama"), "--block_indices", span, "--port", "0", "--initial_peers", boot.address(),
        "--data_dir", dir.str() + "/s" + std::to_string(n++), "--swarm_id", "e2e-swarm", "--update_period", "1"}));
  corolla_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto backend = make_cpu_backend(1);
  auto source = open_weights(model_dir("llama"));
  auto head = std::make_shared<const ClientHead>(*source, *backend);
  swarm_client_options options;
  options.initial_peers = {boot.address()};
  options.model_prefix = "e2e-swarm";
  options.dht_id[0] = 42;
  auto client = spawn_swarm_client(sys, options, head);

  std::vector<server_info> seen;
  self->request(client, std::chrono::seconds(30), refresh_atom::value)
      .receive([&](std::vector<server_info>& v) { seen = v; }, [&](caf::error& e) { BOOST_FAIL(describe(e)); });
  BOOST_TEST(seen.size() == 3u);
  // Each server pings the servers of the block after its span and announces the round trips (routing input).
  // Asked again until every server but the last announces them (a fixed wait missed a server's round now and
  // then on a loaded machine), for at most 20 s.
  auto all_pinged = [&] {
    for (const auto& s : seen)
      if (s.last_block != 4 && s.pings.size() != 1) return false;
    return seen.size() == 3u;
  };
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       !all_pinged() && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    self->request(client, std::chrono::seconds(30), refresh_atom::value)
        .receive([&](std::vector<server_info>& v) { seen = v; }, [&](caf::error& e) { BOOST_FAIL(describe(e)); });
  }
  for (const auto& s : seen) {
    if (s.last_block == 4) continue;
    BOOST_TEST_REQUIRE(s.pings.size() == 1u, s.address << " announces " << s.pings.size() << " pings");
    BOOST_TEST((s.pings[0].second > 0 && s.pings[0].second < 1000));
  }

  inference_session_actor session;
  self->request(client, caf::infinite, open_session_request{64, 1})
      .receive([&](inference_session_actor s) { session = s; },
               [&](caf::error& e) { BOOST_FAIL("open: " << describe(e)); });
  generate_request req;
  req.prompt = Golden("llama").ids("input_ids");
  req.params.max_new_tokens = 32;
  req.params.stop_at_eos = false;
  std::vector<int32_t> out;
  self->request(session, caf::infinite, req)
      .receive([&](const generate_result& r) { out = r.tokens; }, [&](caf::error& e) { BOOST_FAIL(describe(e)); });
  BOOST_TEST(out == Golden("llama").ids("greedy_ids"), boost::test_tools::per_element());
  self->send(session, close_atom::value);

  // Graceful stop: the server announces "offline" before it goes, and the client no longer lists it.
  const std::string gone = servers[1]->address();
  servers[1]->process().stop();
  self->request(client, std::chrono::seconds(30), refresh_atom::value)
      .receive([&](std::vector<server_info>& v) { seen = v; }, [&](caf::error& e) { BOOST_FAIL(describe(e)); });
  BOOST_TEST(seen.size() == 2u);
  for (const auto& s : seen) BOOST_TEST(s.address != gone);
  self->send_exit(client, caf::exit_reason::user_shutdown);
}

// A server started with --num_blocks reads the swarm from the DHT and takes the weakest-covered blocks. (Equal
// throughputs given, so that the ties below do not depend on measurements; a short balance check period, so
// that the joining re-reads, which scale with it, take a fraction of a second.)
BOOST_AUTO_TEST_CASE(num_blocks_picks_the_uncovered_span) {
  TempDir dir;
  DhtProcess boot({"--port", "0", "--data_dir", dir.str() + "/boot"});
  ServerProcess a({"--model", model_dir("llama"), "--block_indices", "0:2", "--port", "0", "--initial_peers",
                   boot.address(), "--data_dir", dir.str() + "/a", "--throughput", "10"});
  ServerProcess b({"--model", model_dir("llama"), "--num_blocks", "2", "--port", "0", "--initial_peers", boot.address(),
                   "--data_dir", dir.str() + "/b", "--throughput", "10", "--mean_balance_check_period", "1"});
  ServerProcess c({"--model", model_dir("llama"), "--num_blocks", "3", "--port", "0", "--initial_peers", boot.address(),
                   "--data_dir", dir.str() + "/c", "--throughput", "10", "--mean_balance_check_period", "1"});
  BOOST_TEST(b.line().rfind("serving blocks 2:4 ", 0) == 0u, b.line());
  // Blocks 0..3 are each covered once now: the first window of 3 wins the tie.
  BOOST_TEST(c.line().rfind("serving blocks 0:3 ", 0) == 0u, c.line());
}
