// Sessions survive their servers' failures: real `corolla serve` processes on 127.0.0.1 joined through a DHT
// bootstrap node, every span served by two servers, the client in this process. A server is killed (SIGKILL),
// frozen (SIGSTOP), or replies with errors while a session generates; the output must equal the fault-free one,
// token for token. A chaos run kills and restarts servers under 20 sessions.
#define BOOST_TEST_MODULE failover_processes
#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "actors/client/client_api.hpp"
#include "actors/dht/announcer.hpp"
#include "actors/dht/dht_api.hpp"
#include "actors/dht/dht_node.hpp"
#include "actors/net/connector.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/system/system_config.hpp"
#include "kernels/backend.hpp"
#include "support/golden.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

using namespace corolla;
using namespace corolla::test;
using namespace std::chrono_literals;

namespace {

constexpr int64_t kNewTokens = 64;

// Each swarm its own DHT key prefix: records of an earlier test's servers never mix in.
std::string next_swarm_id() {
  static int n = 0;
  return "failover-" + std::to_string(getpid()) + "-" + std::to_string(++n);
}

// Ends an actor when the fixture is destroyed, also when its constructor did not complete.
template <class Handle>
struct exit_on_destroy {
  Handle actor;
  ~exit_on_destroy() {
    if (actor) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  }
};

// The greedy continuation of `prompt` by the whole model in this process: what every run must produce.
std::vector<int32_t> fault_free(const std::vector<int32_t>& prompt, int64_t n = kNewTokens,
                                const std::string& model = "llama") {
  auto backend = make_cpu_backend(1);
  LocalModel local(open_weights(model_dir(model)), *backend);
  GenerationParams p;
  p.max_new_tokens = n;
  p.stop_at_eos = false;
  return generate(local, prompt, p);
}

struct server_slot {
  std::string span, port = "0";
  std::vector<std::string> extra;
  std::unique_ptr<ServerProcess> process;
};

struct failover_swarm {
  TempDir dir;
  DhtProcess boot{{"--port", "0", "--data_dir", dir.str() + "/boot"}};
  std::vector<server_slot> slots;
  // The head (and the backend it computes on) outlive the actor system, whose actors use them to the end.
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
  std::shared_ptr<const ClientHead> head;
  corolla_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  std::string swarm_id = next_swarm_id();
  std::string model;  // the golden model the servers serve
  swarm_client_options options;
  exit_on_destroy<swarm_client_actor> client_guard;
  swarm_client_actor client;

  // Servers over `spans` (each "A:B"), with extra flags per server where given.
  explicit failover_swarm(std::vector<std::string> spans, std::map<size_t, std::vector<std::string>> extra = {},
                          route_mode mode = route_mode::push, std::string model_name = "llama")
      : model(std::move(model_name)) {
    for (size_t i = 0; i < spans.size(); ++i) {
      slots.push_back({spans[i], "0", extra[i], nullptr});
      start(i);
    }
    head = std::make_shared<const ClientHead>(*open_weights(model_dir(model)), *backend);
    swarm_client_options o;
    o.initial_peers = {boot.address()};
    o.mode = mode;
    o.request_timeout = 10s;
    o.model_prefix = swarm_id;
    o.dht_id[0] = 7;
    o.data_dir = dir.str() + "/client";
    o.recovery_timeout = 60s;
    options = o;
    client = spawn_swarm_client(sys, o, head);
    wait_until_announced(spans.size());
  }

  // Until the client sees `n` servers online in the DHT (each announces itself once it has loaded its blocks).
  void wait_until_announced(size_t n) {
    std::vector<server_info> seen;
    for (int i = 0; i < 100 && seen.size() < n; ++i) {
      self->request(client, 10s, refresh_atom::value)
          .receive([&](std::vector<server_info>& v) { seen = v; }, [&](caf::error&) {});
      if (seen.size() < n) std::this_thread::sleep_for(100ms);
    }
    BOOST_REQUIRE_MESSAGE(seen.size() >= n, "only " << seen.size() << " of " << n << " servers announced");
  }
  ~failover_swarm() { self->send_exit(client, caf::exit_reason::user_shutdown); }

  // A new client on the same data_dir, once the old one has let go of its database.
  void restart_client() {
    self->send_exit(client, caf::exit_reason::user_shutdown);
    for (int i = 0; i < 100; ++i) {
      try {
        NodeStore probe(options.data_dir);
        break;
      } catch (const std::exception&) {
        std::this_thread::sleep_for(50ms);
      }
    }
    options.dht_id[0] += 1;
    client = client_guard.actor = spawn_swarm_client(sys, options, head);
  }

  // Starts (or restarts, on the same port and with the same database: the same identity) server i.
  void start(size_t i) {
    auto& s = slots[i];
    std::vector<std::string> args{
        "--model",    model_dir(model),  "--block_indices", s.span,       "--port",
        s.port,       "--initial_peers", boot.address(),    "--data_dir", dir.str() + "/s" + std::to_string(i),
        "--swarm_id", swarm_id,          "--update_period", "0.5",        "--threads",
        "1"};
    if (std::find(s.extra.begin(), s.extra.end(), "--cache_tokens") == s.extra.end())
      args.insert(args.end(), {"--cache_tokens", "8192"});
    args.insert(args.end(), s.extra.begin(), s.extra.end());
    s.process = std::make_unique<ServerProcess>(args);
    s.port = s.process->address().substr(s.process->address().rfind(':') + 1);
  }
  size_t slot_of(const std::string& address) const {
    for (size_t i = 0; i < slots.size(); ++i)
      if (slots[i].process && slots[i].process->address() == address) return i;
    BOOST_FAIL("no server at " << address);
    return 0;
  }

  inference_session_actor open(int64_t max_length = 128) {
    inference_session_actor s;
    self->request(client, 60s, open_session_request{max_length, 1})
        .receive([&](inference_session_actor a) { s = a; },
                 [&](caf::error& e) { BOOST_FAIL("open: " << describe(e)); });
    return s;
  }
  // The servers of the session's chain, in order ("HOST:PORT").
  std::vector<std::string> route(const inference_session_actor& session) {
    std::vector<std::string> out;
    self->request(session, 10s, route_atom::value)
        .receive(
            [&](std::vector<std::string>& hops) {
              for (auto& h : hops) out.push_back(h.substr(0, h.find(' ')));
            },
            [&](caf::error& e) { BOOST_FAIL(describe(e)); });
    return out;
  }
  session_stats stats(const inference_session_actor& session) {
    session_stats out;
    self->request(session, 10s, stats_atom::value)
        .receive([&](session_stats& s) { out = s; }, [&](caf::error& e) { BOOST_FAIL(describe(e)); });
    return out;
  }
};

// Generates kNewTokens greedily in `session`; `on_token(k)` runs on the token watcher's thread when the k-th new
// token arrives, while the session is already sending the next step: faults land mid-generation.
std::vector<int32_t> generate_with(failover_swarm& s, const inference_session_actor& session,
                                   const std::vector<int32_t>& prompt, std::function<void(int)> on_token) {
  auto count = std::make_shared<std::atomic<int>>(0);
  auto watcher = s.sys.spawn(
      [=](caf::event_based_actor*) -> caf::behavior { return {[=](token_atom, int32_t) { on_token(++*count); }}; });
  generate_request req;
  req.prompt = prompt;
  req.params.max_new_tokens = kNewTokens;
  req.params.stop_at_eos = false;
  req.subscriber = watcher;
  std::vector<int32_t> out;
  s.self->request(session, 120s, req)
      .receive([&](const generate_result& r) { out = r.tokens; },
               [&](caf::error& e) { BOOST_FAIL("generate: " << describe(e)); });
  // The watcher may still be working through its mailbox: on_token refers to the caller's frame.
  for (int i = 0; i < 500 && *count < static_cast<int>(out.size()); ++i) std::this_thread::sleep_for(10ms);
  s.self->send_exit(watcher, caf::exit_reason::user_shutdown);
  return out;
}

const std::vector<int32_t>& prompt() {
  static const std::vector<int32_t> p = Golden("llama").ids("input_ids");
  return p;
}  // the golden prompt, the same for every golden model

// Runs one generation, applying `fault` to the server of hop `hop` of the initial route after `at` tokens.
void survive(failover_swarm& s, size_t hop, int at, const std::function<void(ChildProcess&)>& fault) {
  auto session = s.open();
  const auto route = s.route(session);
  BOOST_REQUIRE(route.size() >= 2u);
  const std::string victim = route[hop];
  ChildProcess* p = &s.slots[s.slot_of(victim)].process->process();
  auto out = generate_with(s, session, prompt(), [p, at, fault](int k) {
    if (k == at) fault(*p);
  });
  BOOST_TEST(out == fault_free(prompt(), kNewTokens, s.model), boost::test_tools::per_element());
  const auto after = s.route(session);
  BOOST_TEST((std::find(after.begin(), after.end(), victim) == after.end()), "the failed server is still in the route");
  const auto st = s.stats(session);
  BOOST_TEST(st.recovery_seconds.size() >= 1u);
  for (double r : st.recovery_seconds) BOOST_TEST_MESSAGE("recovered in " << r * 1000 << " ms");
  s.self->send(session, close_atom::value);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_killed_server_is_replaced_and_the_output_is_unchanged_push) {
  failover_swarm s({"0:2", "0:2", "2:4", "2:4"});
  survive(s, 0, 20, [](ChildProcess& p) { p.kill_hard(); });
}

BOOST_AUTO_TEST_CASE(a_killed_server_is_replaced_and_the_output_is_unchanged_relay) {
  failover_swarm s({"0:2", "0:2", "2:4", "2:4"}, {}, route_mode::relay);
  survive(s, 1, 20, [](ChildProcess& p) { p.kill_hard(); });
}

// A mixture of experts: the replacement recomputes the killed server's cache from the history, routing each token
// to the same experts.
BOOST_AUTO_TEST_CASE(a_killed_mixture_of_experts_server_is_replaced_and_the_output_is_unchanged) {
  failover_swarm s({"0:2", "0:2", "2:4", "2:4"}, {}, route_mode::push, "mixtral");
  survive(s, 1, 20, [](ChildProcess& p) { p.kill_hard(); });
}

// Each span served by a GPU server and a CPU server: whichever the route starts with is killed, the other device
// takes over from the history, and the output is the CPU's own, token for token. Needs a CUDA GPU
// (tools/gpu_check.sh runs it there); skipped without one.
BOOST_AUTO_TEST_CASE(a_killed_server_is_replaced_by_one_on_the_other_device_and_the_output_is_unchanged,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) { return cuda_available(); })) {
  failover_swarm s({"0:2", "2:4", "0:2", "2:4"}, {{0, {"--device", "cuda"}}, {1, {"--device", "cuda"}}});
  survive(s, 0, 20, [](ChildProcess& p) { p.kill_hard(); });
  survive(s, 1, 20, [](ChildProcess& p) { p.kill_hard(); });
}

BOOST_AUTO_TEST_CASE(a_frozen_server_is_detected_by_heartbeats_and_replaced) {
  failover_swarm s({"0:2", "0:2", "2:4", "2:4"});
  const auto t0 = std::chrono::steady_clock::now();
  survive(s, 1, 20, [](ChildProcess& p) { p.signal(SIGSTOP); });
  // Detection within about 2 s (heartbeats every 200 ms, the connection dropped after 1 s of silence), not the
  // 10 s request timeout.
  BOOST_TEST((std::chrono::steady_clock::now() - t0 < 8s));
}

BOOST_AUTO_TEST_CASE(a_server_that_replies_with_errors_is_replaced) {
  // The first 0:2 server announces a far higher rate than the second, so the initial route (least expected
  // latency) uses it; after 30 steps it answers with errors.
  failover_swarm s({"0:2", "0:2", "2:4", "2:4"},
                   {{0, {"--inject_step_errors_after", "30", "--throughput", "1000000"}}, {1, {"--throughput", "1"}}});
  auto session = s.open();
  const auto route = s.route(session);
  BOOST_REQUIRE(route[0] == s.slots[0].process->address());
  auto out = generate_with(s, session, prompt(), [](int) {});
  BOOST_TEST(out == fault_free(prompt()), boost::test_tools::per_element());
  const auto st = s.stats(session);
  BOOST_REQUIRE(st.failures.size() >= 1u);
  BOOST_TEST(st.failures[0].find("injected fault") != std::string::npos, st.failures[0]);
  BOOST_TEST(s.route(session)[0] != s.slots[0].process->address());
  s.self->send(session, close_atom::value);
}

BOOST_AUTO_TEST_CASE(two_failures_in_a_row) {
  failover_swarm s({"0:2", "0:2", "2:4", "2:4"});
  auto session = s.open();
  const auto route = s.route(session);
  ChildProcess& first = s.slots[s.slot_of(route[0])].process->process();
  ChildProcess& second = s.slots[s.slot_of(route[1])].process->process();
  auto out = generate_with(s, session, prompt(), [&](int k) {
    if (k == 10) first.kill_hard();
    if (k == 11) second.kill_hard();
  });
  BOOST_TEST(out == fault_free(prompt()), boost::test_tools::per_element());
  BOOST_TEST(s.stats(session).recovery_seconds.size() >= 2u);
  s.self->send(session, close_atom::value);
}

BOOST_AUTO_TEST_CASE(a_failed_span_may_be_covered_by_several_servers) {
  // The 0:4 server fails; only 0:2 and 2:4 remain: its history is replayed through both, in turn. (It announces
  // a far higher rate than the others, so the first route is that one server.)
  failover_swarm s({"0:4", "0:2", "2:4"},
                   {{0, {"--throughput", "1000000"}}, {1, {"--throughput", "1"}}, {2, {"--throughput", "1"}}});
  auto session = s.open();
  BOOST_REQUIRE(s.route(session).size() == 1u);
  ChildProcess& whole = s.slots[0].process->process();
  auto out = generate_with(s, session, prompt(), [&](int k) {
    if (k == 15) whole.kill_hard();
  });
  BOOST_TEST(out == fault_free(prompt()), boost::test_tools::per_element());
  BOOST_TEST(s.route(session).size() == 2u);
  s.self->send(session, close_atom::value);
}

BOOST_AUTO_TEST_CASE(the_ban_is_remembered_by_the_next_client_process) {
  failover_swarm s({"0:2", "0:2", "2:4", "2:4"});
  auto session = s.open();
  const std::string victim = s.route(session)[0];
  auto out = generate_with(s, session, prompt(), [&](int k) {
    if (k == 5) s.slots[s.slot_of(victim)].process->process().kill_hard();
  });
  BOOST_TEST(out == fault_free(prompt()), boost::test_tools::per_element());
  s.self->send(session, close_atom::value);
  // The victim comes back (same port, same identity) and is announced again; a new client reading the same
  // data_dir still holds it off: the ban outlived the client that made it.
  s.start(s.slot_of(victim));
  s.restart_client();
  s.wait_until_announced(4);
  for (int i = 0; i < 3; ++i) {
    auto again = s.open();
    BOOST_TEST(s.route(again)[0] != victim);
    s.self->send(again, close_atom::value);
  }
}

// 20 sessions generate concurrently, in rounds of 8 tokens with a pause between rounds (a user reading), while
// servers are killed and restarted at random, kChaosKills times; then every server comes back. What the checks
// need does not hang on timing (a loaded machine restarts a server in a second, not a quarter): the first kill is
// of a server session 0 is using, once every session has generated its first round, and the sessions go on past
// kMinRounds until the chaos is over. Churn without end on a loaded machine would test nothing more: a server
// that lives shorter than a recovery takes can never be recovered to.
BOOST_AUTO_TEST_CASE(chaos_every_session_completes_with_its_fault_free_output) {
  failover_swarm s({"0:2", "0:2", "2:4", "2:4", "0:4"});
  constexpr int kSessions = 20, kMinRounds = 12, kMaxRounds = 40, kPerRound = 8, kMinKills = 4, kChaosKills = 12;
  std::vector<std::vector<int32_t>> prompts, want, got(kSessions);
  std::vector<std::string> errors(kSessions);
  for (int i = 0; i < kSessions; ++i) {
    std::vector<int32_t> p = prompt();
    p[0] = (p[0] + 7 * i) % static_cast<int32_t>(s.head->config().vocab_size);
    prompts.push_back(p);
    want.push_back(fault_free(p, kMaxRounds * kPerRound));
  }
  std::vector<inference_session_actor> sessions;
  for (int i = 0; i < kSessions; ++i) sessions.push_back(s.open(kMaxRounds * kPerRound + 16));
  const std::string first_victim = s.route(sessions[0])[0];

  std::atomic<int> running{kSessions}, first_rounds{0}, kills{0};
  std::atomic<bool> chaos_over{false};
  int restarts = 0;
  std::thread chaos([&] {
    while (first_rounds < kSessions && running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    s.slots[s.slot_of(first_victim)].process->process().kill_hard();
    ++kills;
    std::mt19937 rng(2024);
    while (running > 0 && kills < kChaosKills) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 300));
      const size_t i = rng() % s.slots.size();
      auto& slot = s.slots[i];
      if (slot.process->process().pid() > 0) {
        slot.process->process().kill_hard();
        ++kills;
      } else {
        s.start(i);
        ++restarts;
      }
    }
    for (size_t i = 0; i < s.slots.size(); ++i)
      if (s.slots[i].process->process().pid() <= 0) {
        s.start(i);
        ++restarts;
      }
    chaos_over = true;
  });
  std::vector<std::thread> clients;
  for (int i = 0; i < kSessions; ++i)
    clients.emplace_back([&, i] {
      caf::scoped_actor me{s.sys};
      std::mt19937 pause(static_cast<unsigned>(i));
      auto& g = got[static_cast<size_t>(i)];
      auto& error = errors[static_cast<size_t>(i)];
      for (int r = 0; r < kMaxRounds && (r < kMinRounds || !chaos_over) && error.empty(); ++r) {
        std::this_thread::sleep_for(std::chrono::milliseconds(40 + pause() % 80));
        generate_request req;
        req.prompt = r == 0 ? prompts[static_cast<size_t>(i)] : std::vector<int32_t>{g.back()};
        req.params.max_new_tokens = kPerRound;
        req.params.stop_at_eos = false;
        me->request(sessions[static_cast<size_t>(i)], 120s, req)
            .receive([&](const generate_result& res) { g.insert(g.end(), res.tokens.begin(), res.tokens.end()); },
                     [&](caf::error& e) { error = "round " + std::to_string(r) + ": " + describe(e); });
        if (r == 0) ++first_rounds;
      }
      --running;
    });
  for (auto& t : clients) t.join();
  chaos.join();
  BOOST_TEST_MESSAGE("chaos: " << kills << " kills, " << restarts << " restarts");
  BOOST_TEST(kills >= kMinKills);
  size_t recoveries = 0;
  for (int i = 0; i < kSessions; ++i) {
    const auto& g = got[static_cast<size_t>(i)];
    const auto& w = want[static_cast<size_t>(i)];
    if (!errors[static_cast<size_t>(i)].empty()) {
      std::string failures;
      for (const auto& f : s.stats(sessions[static_cast<size_t>(i)]).failures) failures += "\n  " + f;
      BOOST_ERROR("session " << i << ": " << errors[static_cast<size_t>(i)] << "; its server failures:" << failures);
    }
    BOOST_TEST(g.size() >= static_cast<size_t>(kMinRounds * kPerRound));
    BOOST_TEST(
        std::vector<int32_t>(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(std::min(g.size(), w.size()))) == g,
        boost::test_tools::per_element());
    recoveries += s.stats(sessions[static_cast<size_t>(i)]).recovery_seconds.size();
  }
  BOOST_TEST_MESSAGE("recoveries: " << recoveries);
  BOOST_TEST(recoveries >= 1u);
}

namespace {

// A stranger on the swarm's DHT: a node of its own (sending only) and a key of its own, which writes whatever
// records it can sign.
struct stranger {
  failover_swarm& s;
  caf::actor connector = spawn_connector(s.sys);
  dht_node_actor node;
  SigningKey key = SigningKey::generate();

  explicit stranger(failover_swarm& swarm) : s(swarm) {
    dht_options o;
    o.client_mode = true;
    o.id[0] = 0x5a;
    node = spawn_dht_node(s.sys, o, connector);
    s.self->request(node, 30s, dht_bootstrap{{s.boot.address()}})
        .receive([](const dht_bootstrap_reply&) {}, [](caf::error& e) { BOOST_FAIL("bootstrap: " << describe(e)); });
  }
  ~stranger() {
    s.self->send_exit(node, caf::exit_reason::user_shutdown);
    s.self->send_exit(connector, caf::exit_reason::user_shutdown);
  }

  // Announces `info` as a server would, signed with the stranger's key and expiring `ttl` from now, under its own
  // subkey or under `subkey` when given (a forgery); returns how many nodes stored the records.
  size_t announce(const server_info& info, caf::timespan ttl, const std::string& subkey = {}) {
    size_t replicas = 0;
    for (auto& put : announce_puts(key, s.swarm_id, info, s.sys.clock().now() + ttl)) {
      if (!subkey.empty()) put.subkey = subkey;
      s.self->request(node, 30s, std::move(put))
          .receive([&](const dht_put_reply& r) { replicas += r.replicas; }, [](caf::error&) {});
    }
    return replicas;
  }
};

server_info first_server_seen(failover_swarm& s) {
  std::vector<server_info> seen;
  s.self->request(s.client, 10s, refresh_atom::value)
      .receive([&](std::vector<server_info>& v) { seen = v; }, [](caf::error& e) { BOOST_FAIL(describe(e)); });
  BOOST_REQUIRE(!seen.empty());
  return seen.front();
}

// `real`'s record as a stranger announces it: the same address, rates 100 times higher, so routes prefer it.
server_info far_faster_fake(server_info fake) {
  fake.public_name = "fake";
  fake.throughput *= 100;
  fake.inference_rps *= 100;
  fake.forward_rps *= 100;
  fake.network_rps *= 100;
  return fake;
}

// The client's view of the server at `address`.
server_info server_seen_at(failover_swarm& s, const std::string& address) {
  std::vector<server_info> seen;
  s.self->request(s.client, 10s, refresh_atom::value)
      .receive([&](std::vector<server_info>& v) { seen = v; }, [](caf::error& e) { BOOST_FAIL(describe(e)); });
  for (auto& info : seen)
    if (info.address == address) return info;
  BOOST_FAIL("no server seen at " << address);
  return {};
}

}  // namespace

// A stranger declares a server offline. Under the server's subkey (the forgery that took a server out of every
// client's view while records were unsigned) no node stores it; for ten years no node stores it either; under the
// stranger's own key, claiming the server's address, it is stored but does not hide the server from readers.
BOOST_AUTO_TEST_CASE(a_forged_offline_record_does_not_take_a_server_out) {
  failover_swarm s({"0:4"});
  stranger x(s);
  server_info forged = first_server_seen(s);
  const std::string servers_subkey = forged.owner;
  BOOST_REQUIRE(public_key_from_hex(servers_subkey).has_value());
  forged.state = "offline";
  BOOST_TEST(x.announce(forged, 50min, servers_subkey) == 0u);
  BOOST_TEST(x.announce(forged, std::chrono::hours(24 * 3650)) == 0u);
  BOOST_TEST(x.announce(forged, 50min) >= 1u);
  // The server announces itself again (every 0.5 s): its own record is the one seen, within a few periods (asked
  // again for up to 10 s rather than after a fixed wait, which a loaded machine can outrun).
  std::string owner = first_server_seen(s).owner;
  for (const auto until = std::chrono::steady_clock::now() + 10s;
       owner != servers_subkey && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(250ms);
    owner = first_server_seen(s).owner;
  }
  BOOST_TEST(owner == servers_subkey);
  auto session = s.open();
  BOOST_TEST(generate_with(s, session, prompt(), [](int) {}) == fault_free(prompt()), boost::test_tools::per_element());
}

// Records announcing a fast "server" of all blocks at the addresses of nodes that are not one: a server of
// another swarm that serves blocks 0:2 only, and the DHT bootstrap node. A client that chose the bootstrap node
// failed at once with bad_request ("unexpected message"), its own mistake as it saw it. Now a peer that does not
// speak the server protocol answers unexpected_message, a failed server to the client: banned, next route.
BOOST_AUTO_TEST_CASE(fake_servers_at_other_nodes_addresses_cost_a_failover) {
  failover_swarm s({"0:4"}, {{0, {"--throughput", "10"}}});  // slow, so that the fakes look far better
  ServerProcess other({"--model", model_dir("llama"), "--block_indices", "0:2", "--port", "0", "--initial_peers",
                       s.boot.address(), "--data_dir", s.dir.str() + "/other", "--swarm_id", s.swarm_id + "-other",
                       "--threads", "1", "--cache_tokens", "8192"});
  stranger x(s);
  const server_info real = first_server_seen(s);
  for (const auto& address : {other.address(), s.boot.address()}) {
    server_info fake = real;
    fake.address = address;
    fake.public_name = "fake";
    fake.throughput *= 100;
    fake.inference_rps *= 100;
    fake.forward_rps *= 100;
    fake.network_rps *= 100;
    x.key = SigningKey::generate();  // a key per fake server (one key holds one entry per DHT key)
    BOOST_TEST(x.announce(fake, 5min) > 0u);
  }
  s.wait_until_announced(3);
  for (int i = 0; i < 3; ++i) {
    auto session = s.open();
    const auto hops = s.route(session);
    BOOST_TEST((hops == std::vector<std::string>{real.address}), "routed through " << hops.front());
    BOOST_TEST(generate_with(s, session, prompt(), [](int) {}) == fault_free(prompt()),
               boost::test_tools::per_element());
    s.self->send(session, close_atom::value);
  }
}

// A stranger signs, with its own key, a record of a far faster server at the address of one of the swarm's real
// servers. The client routes to it, and the server at that address answers the open with its own key: the
// identity proof fails, the stranger's key (not the address) takes the failure, the session goes on through the
// swarm with the output of a fault-free run, and the real server at that address keeps its standing: the faster of
// the two real servers, it serves the later sessions.
BOOST_AUTO_TEST_CASE(a_record_naming_someone_elses_address_fails_the_identity_proof) {
  failover_swarm s({"0:4", "0:4"}, {{0, {"--throughput", "10"}}, {1, {"--throughput", "5"}}});
  stranger x(s);
  const server_info real = server_seen_at(s, s.slots[0].process->address());
  const server_info fake = far_faster_fake(real);
  BOOST_TEST(x.announce(fake, 5min) > 0u);
  s.wait_until_announced(3);  // both real servers and the stranger's record, which shares an address
  auto session = s.open();
  const auto st = s.stats(session);
  BOOST_REQUIRE(!st.failures.empty());
  BOOST_TEST(st.failures[0].find("does not hold the key its DHT record names") != std::string::npos, st.failures[0]);
  BOOST_TEST(generate_with(s, session, prompt(), [](int) {}) == fault_free(prompt()), boost::test_tools::per_element());
  s.self->send(session, close_atom::value);
  // Later sessions go nowhere near the stranger's record, and fail nothing; the real server at that address
  // serves some of them.
  bool real_served = false;
  for (int i = 0; i < 4; ++i) {
    auto again = s.open();
    BOOST_TEST(s.stats(again).failures.empty());
    real_served = real_served || s.route(again)[0] == real.address;
    BOOST_TEST(generate_with(s, again, prompt(), [](int) {}) == fault_free(prompt()), boost::test_tools::per_element());
    s.self->send(again, close_atom::value);
  }
  BOOST_TEST(real_served);
}

// Per-client quotas. Two servers of all blocks allow each client process one session. A greedy client (this
// process) opens sessions until none is left to it: the first two go through, on different servers (the second
// is refused too_busy by the first one's server and routed to the other), the third fails naming the quota. Meanwhile
// another client process still gets served, with the output of a fault-free run.
BOOST_AUTO_TEST_CASE(a_greedy_client_gets_its_quota_and_another_client_is_still_served) {
  const std::vector<std::string> one_each{"--max_sessions_per_peer", "1"};
  failover_swarm s({"0:4", "0:4"}, {{0, one_each}, {1, one_each}});
  swarm_client_options o = s.options;
  o.recovery_timeout = 3s;  // the third session gives up soon
  o.data_dir.clear();
  o.dht_id[0] = 42;
  exit_on_destroy<swarm_client_actor> greedy{spawn_swarm_client(s.sys, o, s.head)};
  struct opened {
    inference_session_actor session;
    caf::error error;
  };
  auto open = [&] {
    opened out;
    s.self->request(greedy.actor, 60s, open_session_request{128, 1})
        .receive([&](inference_session_actor a) { out.session = a; }, [&](caf::error& e) { out.error = std::move(e); });
    return out;
  };
  auto first = open();
  BOOST_REQUIRE_MESSAGE(first.session, describe(first.error));
  auto second = open();
  BOOST_REQUIRE_MESSAGE(second.session, describe(second.error));
  BOOST_TEST(s.route(first.session) != s.route(second.session));
  auto third = open();
  BOOST_REQUIRE(!third.session);
  BOOST_TEST(
      describe(third.error).find("too_busy: this client holds 1 sessions here, its quota is 1") != std::string::npos,
      describe(third.error));

  std::string prompt_ids, want;
  for (int32_t id : prompt()) prompt_ids += (prompt_ids.empty() ? "" : ",") + std::to_string(id);
  for (int32_t id : fault_free(prompt(), 16)) want += (want.empty() ? "" : " ") + std::to_string(id);
  ChildProcess other(corolla_cli(),
                     {"generate", "--model", model_dir("llama"), "--prompt-ids", prompt_ids, "--max-new-tokens", "16",
                      "--ignore-eos", "--threads", "1", "--initial_peers", s.boot.address(), "--swarm_id", s.swarm_id});
  std::string line;
  try {
    line = other.read_line(120s);
  } catch (const std::runtime_error& e) {
    BOOST_FAIL("the other client printed nothing: " << e.what());
  }
  BOOST_TEST(line == want);
  try {
    for (;;) other.read_line(60s);  // until it exits
  } catch (const std::runtime_error&) {
  }
  BOOST_TEST(other.stop() == 0);
  // The greedy client's sessions still work.
  BOOST_TEST(generate_with(s, first.session, prompt(), [](int) {}) == fault_free(prompt()),
             boost::test_tools::per_element());
  s.self->send(first.session, close_atom::value);
  s.self->send(second.session, close_atom::value);
}

// Spot checks. Four servers, two per span; the fast one of blocks 0:2 returns a wrong output on 2% of its steps.
// A client that checks every step (spot_check_every 1) recomputes each step of a server on the other server of
// its span: the first lie is caught in the step it is told, the liar is banned, and every generation equals the
// fault-free one, although the server after the liar had taken the wrong output in.
BOOST_AUTO_TEST_CASE(a_server_that_lies_is_caught_by_spot_checks_and_the_output_is_unchanged) {
  const std::vector<std::string> slow{"--throughput", "10"};
  failover_swarm s({"0:2", "0:2", "2:4", "2:4"}, {{0, {"--inject_wrong_outputs", "0.02"}}, {1, slow}});
  const std::string liar = s.slots[0].process->address();
  swarm_client_options o = s.options;
  o.spot_checks.every = 1;
  o.data_dir = s.dir.str() + "/checking-client";
  o.dht_id[0] = 43;
  exit_on_destroy<swarm_client_actor> checking{spawn_swarm_client(s.sys, o, s.head)};
  int64_t steps_until_caught = 0, checks = 0;
  bool caught = false;
  for (int i = 0; i < 10 && !caught; ++i) {
    inference_session_actor session;
    s.self->request(checking.actor, 60s, open_session_request{128, 1})
        .receive([&](inference_session_actor a) { session = a; },
                 [&](caf::error& e) { BOOST_FAIL("open: " << describe(e)); });
    BOOST_TEST(generate_with(s, session, prompt(), [](int) {}) == fault_free(prompt()),
               boost::test_tools::per_element());
    const auto st = s.stats(session);
    checks += st.spot_checks;
    caught = st.wrong_outputs > 0;
    steps_until_caught += st.steps;
    if (caught) {
      BOOST_TEST(st.wrong_outputs == 1);
      bool named = false;
      for (const auto& f : st.failures)
        named = named || (f.rfind(liar, 0) == 0 && f.find("wrong_output") != std::string::npos);
      BOOST_TEST(named, "no failure names the liar " << liar);
      BOOST_TEST(s.route(session)[0] != liar);
    }
    s.self->send(session, close_atom::value);
  }
  BOOST_REQUIRE_MESSAGE(caught, "the liar was not caught in " << steps_until_caught << " steps");
  BOOST_TEST_MESSAGE("caught after " << steps_until_caught << " steps, " << checks << " checks passed");
  // The client's standing of the liar (what /health shows as the API's view): banned, for a wrong output.
  const std::string liar_key = server_seen_at(s, liar).owner;
  bool banned = false;
  s.self->request(checking.actor, 10s, reputation_atom::value)
      .receive(
          [&](std::vector<peer_standing>& v) {
            for (const auto& p : v)
              if (p.peer == liar_key) banned = p.banned && p.last_failure.find("wrong_output") != std::string::npos;
          },
          [&](caf::error& e) { BOOST_FAIL(describe(e)); });
  BOOST_TEST(banned);
  // Banned: the next session goes around it.
  inference_session_actor again;
  s.self->request(checking.actor, 60s, open_session_request{128, 1})
      .receive([&](inference_session_actor a) { again = a; },
               [&](caf::error& e) { BOOST_FAIL("open: " << describe(e)); });
  BOOST_TEST(s.route(again)[0] != liar);
  s.self->send(again, close_atom::value);
}

// Training routes prove identities too: their forwards carry a challenge the server signs. A stranger's record
// of a far faster server at a real server's address draws a training forward; the server there answers with its
// own key, the stranger's key takes the failure, and the forward goes on through the swarm with the result the
// blocks compute in this process.
BOOST_AUTO_TEST_CASE(a_training_forward_through_a_record_naming_someone_elses_address_is_refused) {
  failover_swarm s({"0:4", "0:4"}, {{0, {"--throughput", "10"}}, {1, {"--throughput", "10"}}});
  stranger x(s);
  const server_info fake = far_faster_fake(server_seen_at(s, s.slots[0].process->address()));
  BOOST_TEST(x.announce(fake, 5min) > 0u);
  s.wait_until_announced(3);

  const Tensor hidden = Golden("llama", "grads").tensor("block_input");  // [2, 12, hidden]
  std::vector<int32_t> positions;
  for (int64_t b = 0; b < hidden.dim(0); ++b)
    for (int32_t t = 0; t < static_cast<int32_t>(hidden.dim(1)); ++t) positions.push_back(t);
  auto forward = [&](const block_runner_actor& blocks) {
    Tensor out;
    s.self->request(blocks, 60s, blocks_forward{hidden, positions, Tensor()})
        .receive([&](blocks_forward_result& r) { out = r.hidden; },
                 [&](caf::error& e) { BOOST_FAIL("forward: " << describe(e)); });
    return out;
  };
  training_session_actor swarm_blocks;
  s.self->request(s.client, 60s, open_training_request{})
      .receive([&](training_session_actor a) { swarm_blocks = a; }, [&](caf::error& e) { BOOST_FAIL(describe(e)); });
  auto local_backend = std::shared_ptr<Backend>(make_cpu_backend(1));
  auto local_blocks = spawn_local_block_runner(s.sys, open_weights(model_dir("llama")), local_backend);
  const Tensor got = forward(swarm_blocks), want = forward(local_blocks);
  BOOST_REQUIRE(got.shape() == want.shape());
  float worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i)
    worst = std::max(worst, std::abs(got.data_as<const float>()[i] - want.data_as<const float>()[i]));
  BOOST_TEST(worst < 1e-4f);
  bool stranger_failed = false;
  s.self->request(s.client, 10s, reputation_atom::value)
      .receive(
          [&](std::vector<peer_standing>& v) {
            for (const auto& p : v)
              if (p.peer == to_hex(x.key.public_key()))
                stranger_failed = p.failures > 0 && p.last_failure.find("does not hold the key") != std::string::npos;
          },
          [&](caf::error& e) { BOOST_FAIL(describe(e)); });
  BOOST_TEST(stranger_failed);
  s.self->send_exit(swarm_blocks, caf::exit_reason::user_shutdown);
  s.self->send_exit(local_blocks, caf::exit_reason::user_shutdown);
}
