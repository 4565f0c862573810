// Servers and a client as actors in one process (the same code as across processes, minus the wire):
// generation through a chain of servers equals the local run, in relay and push modes; bad requests get errors
// and leave the server serving.
#define BOOST_TEST_MODULE swarm_inprocess
#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>
#include <numeric>

#include "actors/client/client_api.hpp"
#include "actors/net/connector.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/system/system_config.hpp"
#include "actors/server/server_node.hpp"
#include "support/golden.hpp"
#include "support/tampering_gate.hpp"

using namespace corolla;
using namespace corolla::test;

namespace {

struct swarm_fixture {
  corolla_config cfg;
  // Declared before the actor system, so destroyed after it: its actors use this until they stop.
  std::unique_ptr<Backend> client_backend = make_cpu_backend();
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  caf::actor connector = spawn_connector(sys);
  std::vector<server_node> servers;
  std::shared_ptr<ClientHead> head;
  std::vector<std::string> addresses;
  std::vector<swarm_client_actor> clients;

  explicit swarm_fixture(std::vector<std::pair<int64_t, int64_t>> spans, const std::string& model = "llama",
                         int64_t cache_tokens = 1024) {
    auto source = open_weights(model_dir(model));
    for (size_t i = 0; i < spans.size(); ++i) {
      server_setup setup;
      setup.model = model_dir(model);
      setup.first_block = spans[i].first;
      setup.last_block = spans[i].second;
      setup.cache_tokens = cache_tokens;
      setup.seed = 100 + i;
      servers.push_back(start_server_node(sys, setup, connector, source));
      addresses.push_back("inproc:server-" + std::to_string(i));
      self->send(connector, register_atom::value, addresses.back(), caf::actor_cast<caf::actor>(servers.back().gate));
      self->send(servers.back().gate, address_atom::value, addresses.back());
    }
    head = std::make_shared<ClientHead>(*source, *client_backend);
  }

  ~swarm_fixture() {
    for (auto& s : servers) self->send_exit(s.gate, caf::exit_reason::user_shutdown);
    self->send_exit(connector, caf::exit_reason::user_shutdown);
    for (auto& c : clients) self->send_exit(c, caf::exit_reason::user_shutdown);
  }

  swarm_client_actor client(route_mode mode) {
    clients.push_back(spawn_swarm_client(
        sys, {.initial_peers = addresses, .mode = mode, .request_timeout = std::chrono::seconds(10)}, head, connector));
    return clients.back();
  }

  inference_session_actor open(swarm_client_actor client, int64_t max_length = 64) {
    inference_session_actor session;
    self->request(client, caf::infinite, open_session_request{max_length, 1})
        .receive([&](inference_session_actor s) { session = s; },
                 [&](caf::error& e) { BOOST_FAIL("open failed: " << describe(e)); });
    return session;
  }

  template <class Reply, class Handle, class Request>
  caf::expected<Reply> ask(const Handle& dest, Request req) {
    caf::expected<Reply> out = caf::error{};
    self->request(dest, std::chrono::seconds(10), std::move(req))
        .receive([&](Reply& r) { out = std::move(r); }, [&](caf::error& e) { out = std::move(e); });
    return out;
  }
};

// An actor system with a connector, for tests that start a server by hand.
struct bare_system {
  corolla_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  caf::actor connector = spawn_connector(sys);
  span_gate_node gate;  // stopped with the fixture once a test sets it
  ~bare_system() {
    if (gate) self->send_exit(gate, caf::exit_reason::user_shutdown);
    self->send_exit(connector, caf::exit_reason::user_shutdown);
  }
  server_info info() {
    server_info out;
    self->request(gate, std::chrono::seconds(5), info_request{})
        .receive([&](server_info& i) { out = std::move(i); }, [](caf::error&) {});
    return out;
  }
};

std::vector<int32_t> generate_through(swarm_fixture& f, route_mode mode, int64_t n) {
  auto session = f.open(f.client(mode));
  Golden g("llama");
  generate_request req;
  req.prompt = g.ids("input_ids");
  req.params.max_new_tokens = n;
  req.params.stop_at_eos = false;
  std::vector<int32_t> out;
  f.self->request(session, caf::infinite, req)
      .receive([&](const generate_result& r) { out = r.tokens; },
               [&](caf::error& e) { BOOST_FAIL("generate failed: " << describe(e)); });
  f.self->send(session, close_atom::value);
  return out;
}

// A generation in `session` (which it closes): its tokens.
std::vector<int32_t> generate_in(swarm_fixture& f, const inference_session_actor& session,
                                 const std::vector<int32_t>& prompt, const GenerationParams& params) {
  generate_request req;
  req.prompt = prompt;
  req.params = params;
  auto got = f.ask<generate_result>(session, req);
  f.self->send(session, close_atom::value);
  BOOST_REQUIRE_MESSAGE(got, (got ? "" : describe(got.error())));
  return got->tokens;
}

// A server's gate behind a proxy that passes every message on, but answers steps after the first with hidden states
// one token short (a hostile or broken server; the first step passes the check of a server new to the client).
caf::behavior short_step_replies(caf::event_based_actor* self, caf::actor real) {
  auto steps = std::make_shared<int>(0);
  pass_on_the_rest(self, real);
  return {tamper<step_request, step_reply>(self, real, [steps](step_reply& r) {
    const Shape s = r.hidden.shape();
    if (++*steps > 1) r.hidden = Tensor::empty(DType::f32, {s[0], s[1] > 1 ? s[1] - 1 : 2, s[2]});
  })};
}

}  // namespace

BOOST_AUTO_TEST_CASE(relay_generation_matches_golden) {
  swarm_fixture f({{0, 1}, {1, 3}, {3, 4}});
  BOOST_TEST(generate_through(f, route_mode::relay, 32) == Golden("llama").ids("greedy_ids"),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(push_generation_matches_golden) {
  swarm_fixture f({{0, 2}, {2, 4}});
  BOOST_TEST(generate_through(f, route_mode::push, 32) == Golden("llama").ids("greedy_ids"),
             boost::test_tools::per_element());
}

// A server whose step outputs have another shape than the step's input is replaced like a failed one (the route
// over all blocks on it comes first, being one hop), and the generation equals the golden one. (The head refused
// the short output, and the session failed.)
BOOST_AUTO_TEST_CASE(a_server_that_returns_malformed_hidden_states_is_replaced) {
  for (route_mode mode : {route_mode::relay, route_mode::push}) {
    swarm_fixture f({{0, 4}, {0, 2}, {2, 4}});
    auto proxy = f.sys.spawn(short_step_replies, caf::actor_cast<caf::actor>(f.servers[0].gate));
    f.self->send(f.connector, register_atom::value, f.addresses[0], proxy);
    BOOST_TEST(generate_through(f, mode, 32) == Golden("llama").ids("greedy_ids"), boost::test_tools::per_element());
    f.self->send_exit(proxy, caf::exit_reason::user_shutdown);
  }
}

BOOST_AUTO_TEST_CASE(overlapping_spans_are_used_partially) {
  swarm_fixture f({{0, 3}, {1, 4}});
  auto want = Golden("llama").ids("greedy_ids");
  want.resize(8);
  BOOST_TEST(generate_through(f, route_mode::push, 8) == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bad_requests_get_errors_and_the_server_keeps_serving) {
  swarm_fixture f({{0, 4}});
  auto gate = f.servers[0].gate;
  auto opened = f.ask<session_opened>(gate, open_session{16, 1, 0, 0, {}, {}, {}, {}});
  BOOST_REQUIRE(opened);
  const uint64_t sid = opened->session_id;
  auto step = [&](uint64_t session, uint64_t step_id, Tensor hidden, std::vector<int32_t> pos) {
    return f.ask<step_reply>(gate, step_request{session, step_id, hidden, pos, {}, {}});
  };
  Tensor good = Tensor::empty(DType::f32, {1, 1, 64});
  // Wrong hidden size.
  auto r = step(sid, 1, Tensor::empty(DType::f32, {1, 1, 65}), {0});
  BOOST_TEST(is(r.error(), errc::bad_request));
  BOOST_TEST(describe(r.error()).find("f32[batch, tokens, 64]") != std::string::npos, describe(r.error()));
  // Unknown session.
  r = step(sid + 1, 1, good, {0});
  BOOST_TEST(is(r.error(), errc::unknown_session));
  // Beyond max_length.
  r = step(sid, 2, good, {16});
  BOOST_TEST(is(r.error(), errc::max_length_exceeded));
  // A gap in positions.
  r = step(sid, 3, good, {5});
  BOOST_TEST(is(r.error(), errc::bad_request));
  // A message of the wrong type: not this protocol, which a client takes for a failed server.
  auto w = f.ask<ack>(caf::actor_cast<caf::actor>(gate), std::string("hello"));  // as a peer could
  BOOST_TEST(is(w.error(), errc::unexpected_message));
  // Too much cache asked.
  auto big = f.ask<session_opened>(gate, open_session{1000, 1, 0, 0, {}, {}, {}, {}});  // beyond the context
  BOOST_TEST(is(big.error(), errc::bad_request));
  big = f.ask<session_opened>(gate, open_session{500, 3, 0, 0, {}, {}, {}, {}});
  BOOST_TEST(is(big.error(), errc::out_of_cache), describe(big.error()));
  // The session still works, and a repeated step id is answered again, not applied twice.
  auto ok = step(sid, 10, good, {0});
  BOOST_REQUIRE(ok);
  auto again = step(sid, 10, good, {0});
  BOOST_REQUIRE(again);
  BOOST_TEST(max_abs_diff(ok->hidden, again->hidden) == 0.0f);
  auto next = step(sid, 11, good, {1});
  BOOST_TEST(bool(next));
  // The same step id with another input is another step, applied (a push route's server gets its step again from
  // the replacement of a server before it): its output is what that input gives in a session of its own.
  auto filled = [](float v) {
    Tensor t = Tensor::empty(DType::f32, {1, 1, 64});
    for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = v + 0.01f * static_cast<float>(i % 5);
    return t;
  };
  auto a = step(sid, 12, filled(0.5f), {2});
  auto b = step(sid, 12, filled(-0.25f), {2});
  BOOST_REQUIRE(a && b);
  auto alone = f.ask<session_opened>(gate, open_session{16, 1, 0, 0, {}, {}, {}, {}});
  BOOST_REQUIRE(alone);
  for (int32_t p = 0; p < 2; ++p) BOOST_REQUIRE(step(alone->session_id, 1 + p, good, {p}));  // as `sid` holds them
  auto want = step(alone->session_id, 3, filled(-0.25f), {2});
  BOOST_REQUIRE(want);
  BOOST_TEST(max_abs_diff(a->hidden, b->hidden) > 0.1f);
  BOOST_TEST(max_abs_diff(b->hidden, want->hidden) < 1e-6f);
  BOOST_TEST(bool(f.ask<ack>(gate, close_session{alone->session_id, {}})));
  // Close, then the session is gone.
  BOOST_TEST(bool(f.ask<ack>(gate, close_session{sid, {}})));
  BOOST_TEST(is(step(sid, 12, good, {2}).error(), errc::unknown_session));
}

BOOST_AUTO_TEST_CASE(a_step_repeated_while_it_runs_is_answered_when_it_ends) {
  // A push client that loses a server further along resends the step to the first server, which may still be
  // running it: the repeat waits for that step and gets its output; a different step is refused meanwhile.
  swarm_fixture f({{0, 4}});
  auto gate = f.servers[0].gate;
  auto opened = f.ask<session_opened>(gate, open_session{64, 1, 0, 0, {}, {}, {}, {}});
  BOOST_REQUIRE(opened);
  const uint64_t sid = opened->session_id;
  Tensor hidden = Tensor::empty(DType::f32, {1, 48, 64});
  for (int64_t i = 0; i < hidden.numel(); ++i) hidden.data_as<float>()[i] = static_cast<float>(i % 7) * 0.1f;
  std::vector<int32_t> pos(48);
  std::iota(pos.begin(), pos.end(), 0);
  Tensor one = Tensor::empty(DType::f32, {1, 1, 64});
  const auto timeout = std::chrono::seconds(30);
  // Another session's long prefill first: the blocks take it before step 5, so step 5 runs for as long as that
  // (tens of milliseconds, not the few hundred microseconds of its own 48 tokens) whatever the machine's load.
  auto busy = f.ask<session_opened>(gate, open_session{256, 1, 0, 0, {}, {}, {}, {}});
  BOOST_REQUIRE(busy);
  std::vector<int32_t> long_pos(256);
  std::iota(long_pos.begin(), long_pos.end(), 0);
  auto prefill = f.self->request(
      gate, timeout, step_request{busy->session_id, 1, Tensor::empty(DType::f32, {1, 256, 64}), long_pos, {}, {}});
  // Sent back to back: the second and third reach the gate while the first is running.
  auto first = f.self->request(gate, timeout, step_request{sid, 5, hidden, pos, {}, {}});
  auto repeat = f.self->request(gate, timeout, step_request{sid, 5, hidden, pos, {}, {}});
  auto other = f.self->request(gate, timeout, step_request{sid, 6, one, {48}, {}, {}});
  // The same step id with another input waits too, and is then applied (not answered with the first's output).
  Tensor changed = hidden.clone();
  changed.data_as<float>()[0] += 1.0f;
  auto changed_repeat = f.self->request(gate, timeout, step_request{sid, 5, changed, pos, {}, {}});
  std::vector<Tensor> outputs;
  std::string refused;
  for (auto* h : {&first, &repeat})
    h->receive([&](step_reply& r) { outputs.push_back(r.hidden); },
               [&](caf::error& e) { BOOST_FAIL("step 5: " << describe(e)); });
  other.receive([&](step_reply&) { refused = "(answered)"; }, [&](caf::error& e) { refused = describe(e); });
  prefill.receive([](step_reply&) {}, [&](caf::error& e) { BOOST_FAIL("the long prefill: " << describe(e)); });
  changed_repeat.receive([&](step_reply& r) { outputs.push_back(r.hidden); },
                         [&](caf::error& e) { BOOST_FAIL("step 5 with another input: " << describe(e)); });
  BOOST_REQUIRE_EQUAL(outputs.size(), 3u);
  BOOST_TEST(max_abs_diff(outputs[0], outputs[1]) == 0.0f);
  BOOST_TEST(max_abs_diff(outputs[0], outputs[2]) > 0.0f);
  BOOST_TEST(refused.find("step 5 of this session is still running") != std::string::npos, refused);
  // The session goes on after it.
  auto next = f.ask<step_reply>(gate, step_request{sid, 7, one, {48}, {}, {}});
  BOOST_TEST(bool(next), (next ? "" : describe(next.error())));
}

// A model whose attention slides (Mistral's window, 5 in the golden model) keeps only a ring of its window per
// session and block: with 256 cache tokens per block, sessions of 400 tokens (7 pages of 64 each if whole) take 2
// pages each, so two open and a third does not; and a session generating 300 tokens past its prompt (its ring of
// 128 positions wraps twice) gets exactly what a local run with whole caches gets.
BOOST_AUTO_TEST_CASE(a_sliding_window_model_keeps_only_its_window) {
  swarm_fixture f({{0, 2}, {2, 4}}, "mistral-window", 256);
  const auto gate = f.servers[0].gate;
  std::vector<uint64_t> held;
  for (int i = 0; i < 2; ++i) {
    auto opened = f.ask<session_opened>(gate, open_session{400, 1, 0, 0, {}, {}, {}, {}});
    BOOST_REQUIRE_MESSAGE(opened, (opened ? "" : describe(opened.error())));
    held.push_back(opened->session_id);
  }
  auto third = f.ask<session_opened>(gate, open_session{400, 1, 0, 0, {}, {}, {}, {}});
  BOOST_TEST(!third);
  if (!third) BOOST_TEST(is(third.error(), errc::out_of_cache), describe(third.error()));
  for (uint64_t id : held) BOOST_REQUIRE(f.ask<ack>(gate, close_session{id, {}}));

  const auto prompt = Golden("mistral-window").ids("input_ids");
  GenerationParams params;
  params.max_new_tokens = 300;
  params.stop_at_eos = false;
  auto backend = make_cpu_backend();
  LocalModel local(open_weights(model_dir("mistral-window")), *backend);
  const std::vector<int32_t> want = generate(local, prompt, params);
  BOOST_REQUIRE(want.size() == 300u);
  BOOST_TEST(generate_in(f, f.open(f.client(route_mode::push), 400), prompt, params) == want,
             boost::test_tools::per_element());
}

// Beam search's reordering (Petals' hypo_ids) on a push route of two servers: a session of two sequences whose
// second step continues the second sequence twice, and whose third swaps them, gets the logits a local run of
// the histories so made gets (the sequences share KV pages after the first reordering and copy the one each
// writes into).
BOOST_AUTO_TEST_CASE(hypothesis_ids_reorder_the_sequences_on_every_server) {
  swarm_fixture f({{0, 2}, {2, 4}});
  inference_session_actor session;
  f.self->request(f.client(route_mode::push), caf::infinite, open_session_request{64, 2})
      .receive([&](inference_session_actor s) { session = s; },
               [&](caf::error& e) { BOOST_FAIL("open: " << describe(e)); });
  const auto ids = Golden("llama").ids("input_ids");
  BOOST_REQUIRE(ids.size() >= 12u);
  auto part = [&](size_t from, size_t n) { return std::vector<int32_t>(ids.begin() + from, ids.begin() + from + n); };
  const auto a = part(0, 6), b = part(6, 6), x = part(1, 2), y = part(3, 2);  // (the prompt has 12 tokens)
  auto joined = [](std::initializer_list<std::vector<int32_t>> parts) {
    std::vector<int32_t> out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  std::vector<int32_t> pos(6);
  std::iota(pos.begin(), pos.end(), 0);
  BOOST_REQUIRE(f.ask<Tensor>(session, step_input{f.head->embed(joined({a, b}), 2), joined({pos, pos})}));
  auto second = f.ask<Tensor>(session, step_input{f.head->embed(x, 2), {6, 6}, {1, 1}});
  BOOST_REQUIRE_MESSAGE(second, (second ? "" : describe(second.error())));
  auto third = f.ask<Tensor>(session, step_input{f.head->embed(y, 2), {7, 7}, {1, 0}});
  BOOST_REQUIRE_MESSAGE(third, (third ? "" : describe(third.error())));
  auto bad = f.ask<Tensor>(session, step_input{f.head->embed(y, 2), {8, 8}, {0, 2}});
  BOOST_TEST(is(bad.error(), errc::bad_request), describe(bad.error()));

  auto backend = make_cpu_backend();
  LocalModel local(open_weights(model_dir("llama")), *backend);
  std::vector<int32_t> pos7(7), pos8(8);
  std::iota(pos7.begin(), pos7.end(), 0);
  std::iota(pos8.begin(), pos8.end(), 0);
  local.reset(2, 64);  // after the second step: b then x[0], b then x[1]
  Tensor want = local.forward(joined({b, {x[0]}, b, {x[1]}}), joined({pos7, pos7}), true);
  BOOST_TEST(max_abs_diff(f.head->logits(*second), want) < 1e-5f);
  local.reset(2, 64);  // after the third: (b, x[1]) then y[0], (b, x[0]) then y[1]
  want = local.forward(joined({b, {x[1], y[0]}, b, {x[0], y[1]}}), joined({pos8, pos8}), true);
  BOOST_TEST(max_abs_diff(f.head->logits(*third), want) < 1e-5f);
  f.self->send(session, close_atom::value);
}

// Beam search through the swarm (relay and push over two servers; a session of 4 sequences, one per beam) finds
// what a local beam search finds, with and without an end token; a session of another size refuses it.
BOOST_AUTO_TEST_CASE(a_beam_search_through_the_swarm_matches_the_local_one) {
  swarm_fixture f({{0, 2}, {2, 4}});
  const auto prompt = Golden("llama").ids("input_ids");
  auto backend = make_cpu_backend();
  LocalModel local(open_weights(model_dir("llama")), *backend);
  for (const auto mode : {route_mode::relay, route_mode::push})
    for (const std::vector<int32_t>& eos : {std::vector<int32_t>{}, std::vector<int32_t>{176}}) {
      GenerationParams params;
      params.num_beams = 4;
      params.max_new_tokens = 12;
      params.eos_token_ids = eos;
      params.stop_at_eos = !eos.empty();
      const std::vector<int32_t> want = generate(local, prompt, params);
      inference_session_actor session;
      f.self->request(f.client(mode), caf::infinite, open_session_request{64, 4})
          .receive([&](inference_session_actor s) { session = s; },
                   [&](caf::error& e) { BOOST_FAIL("open: " << describe(e)); });
      BOOST_TEST(generate_in(f, session, prompt, params) == want, boost::test_tools::per_element());
    }
  generate_request req;
  req.prompt = prompt;
  req.params.num_beams = 4;
  auto refused = f.ask<generate_result>(f.open(f.client(route_mode::push)), req);
  BOOST_TEST(is(refused.error(), errc::bad_request), describe(refused.error()));
}

BOOST_AUTO_TEST_CASE(hidden_states_match_the_local_blocks_within_1e_5) {
  swarm_fixture f({{0, 2}, {2, 4}});
  auto session = f.open(f.client(route_mode::push));
  auto source = open_weights(model_dir("llama"));
  auto backend = make_cpu_backend();
  LocalModel local(source, *backend);
  Golden g("llama");
  auto ids = g.ids("input_ids");
  std::vector<int32_t> pos(ids.size());
  std::iota(pos.begin(), pos.end(), 0);
  Tensor hidden = f.head->embed(ids, 1);
  auto out = f.ask<Tensor>(session, step_input{hidden, pos});
  BOOST_REQUIRE(out);
  local.reset(1, 64);
  Tensor want = local.forward(ids, pos, false);
  Tensor got = f.head->logits(*out);
  BOOST_TEST(max_abs_diff(got, want) < 1e-5f);
  f.self->send(session, close_atom::value);
}

BOOST_AUTO_TEST_CASE(forward_without_cache_matches_the_local_uncached_forward) {
  swarm_fixture f({{0, 4}});
  Golden g("llama");
  auto ids = g.ids("batch_input_ids");
  std::vector<int32_t> pos(12);
  std::iota(pos.begin(), pos.end(), 0);
  pos.insert(pos.end(), pos.begin(), pos.end());
  auto r =
      f.ask<forward_reply>(f.servers[0].gate, forward_request{f.head->embed(ids, 2), pos, {}, 0, 0, {}, 0, {}, {}});
  BOOST_REQUIRE(r);
  BOOST_TEST(max_abs_diff(f.head->logits(r->hidden), g.tensor("batch_logits")) < 1e-4f);
}

BOOST_AUTO_TEST_CASE(cache_is_freed_on_timeout_and_when_the_client_dies) {
  bare_system f;
  auto& sys = f.sys;
  auto& self = f.self;
  server_setup setup;
  setup.model = model_dir("llama");
  setup.first_block = 0;
  setup.last_block = 4;
  setup.cache_tokens = 100;  // two KV pages of 64 tokens per block: 128 tokens
  setup.session_timeout = std::chrono::milliseconds(300);
  auto node = start_server_node(sys, setup, f.connector);
  f.gate = node.gate;
  auto cache_left = [&] { return f.info().cache_tokens_left; };
  BOOST_TEST(cache_left() == 128);
  // A session left idle past session_timeout is closed by the server.
  uint64_t sid = 0;
  self->request(node.gate, std::chrono::seconds(5), open_session{60, 1, 0, 0, {}, {}, {}, {}})
      .receive([&](const session_opened& o) { sid = o.session_id; }, [](caf::error&) {});
  BOOST_TEST(cache_left() == 64);  // 60 tokens take a page
  const auto opened = std::chrono::steady_clock::now();
  while (cache_left() != 128 && std::chrono::steady_clock::now() - opened < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  BOOST_TEST(cache_left() == 128);
  BOOST_TEST(
      (std::chrono::steady_clock::now() - opened >= std::chrono::milliseconds(250)));  // not long before the timeout
  caf::error err;
  self->request(node.gate, std::chrono::seconds(5), close_session{sid, {}})
      .receive([](const ack&) {}, [&](caf::error& e) { err = e; });
  BOOST_TEST(is(err, errc::unknown_session));
  // A session whose owner dies is freed at once (well before the session timeout would free it).
  const caf::actor test = caf::actor_cast<caf::actor>(self);
  auto owner = sys.spawn([gate = node.gate, test](caf::event_based_actor* me) -> caf::behavior {
    me->request(gate, std::chrono::seconds(5), open_session{80, 1, 0, 0, {}, {}, {}, {}})
        .then([test](const session_opened&) { caf::anon_send(test, ack{}); });
    return {[](close_atom) {}};
  });
  self->receive([](const ack&) {}, caf::after(std::chrono::seconds(5)) >> [] { BOOST_FAIL("the owner's open"); });
  BOOST_TEST(cache_left() == 0);  // 80 tokens take both
  self->send_exit(owner, caf::exit_reason::kill);
  const auto killed = std::chrono::steady_clock::now();
  while (cache_left() != 128 && std::chrono::steady_clock::now() - killed < std::chrono::milliseconds(200))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  BOOST_TEST(cache_left() == 128);
}

BOOST_AUTO_TEST_CASE(a_server_is_joining_until_its_blocks_are_loaded) {
  bare_system f;
  server_setup setup;
  setup.model = model_dir("llama");
  setup.first_block = 1;
  setup.last_block = 3;
  auto source = open_weights(setup.model);
  auto node = start_server_node(f.sys, setup, f.connector, source, false);
  f.gate = node.gate;
  BOOST_TEST(f.info().state == "joining");
  caf::error err;
  f.self->request(node.gate, std::chrono::seconds(5), open_session{16, 1, 0, 0, {}, {}, {}, {}})
      .receive([](const session_opened&) {}, [&](caf::error& e) { err = e; });
  BOOST_TEST(is(err, errc::peer_unavailable), describe(err));
  load_server_blocks(f.sys, node, setup, *source);
  BOOST_TEST(f.info().state == "online");
  bool opened = false;
  f.self->request(node.gate, std::chrono::seconds(5), open_session{16, 1, 0, 0, {}, {}, {}, {}})
      .receive([&](const session_opened&) { opened = true; }, [](caf::error&) {});
  BOOST_TEST(opened);
}

// An address registered for an in-process actor is this process's own: once the actor stops, resolving it fails at
// once instead of dialling it: that would reach this node itself, whose peer gateway refuses a connection claiming
// its own id and says so (as `corolla run`'s client closing sessions at servers already stopped would make it do).
// Registering the address again makes it resolvable.
BOOST_AUTO_TEST_CASE(a_stopped_in_process_actor_is_not_dialled) {
  bare_system f;
  auto resolve = [&](const std::string& address) {
    caf::expected<caf::actor> out = caf::error{};
    f.self->request(f.connector, std::chrono::seconds(5), resolve_atom::value, address)
        .receive([&](caf::actor& a) { out = std::move(a); }, [&](caf::error& e) { out = std::move(e); });
    return out;
  };
  auto a = f.sys.spawn([]() -> caf::behavior { return {[](int x) { return x; }}; });
  f.self->send(f.connector, register_atom::value, std::string("127.0.0.1:1"), a);
  BOOST_TEST(static_cast<bool>(resolve("127.0.0.1:1")));
  f.self->send_exit(a, caf::exit_reason::user_shutdown);
  const auto stopped = std::chrono::steady_clock::now();
  caf::expected<caf::actor> r = resolve("127.0.0.1:1");
  while (r && std::chrono::steady_clock::now() - stopped < std::chrono::seconds(5)) r = resolve("127.0.0.1:1");
  BOOST_REQUIRE(!r);
  BOOST_TEST(describe(r.error()).find("the actor at 127.0.0.1:1 in this process has stopped") != std::string::npos,
             describe(r.error()));
  auto b = f.sys.spawn([]() -> caf::behavior { return {[](int x) { return x; }}; });
  f.self->send(f.connector, register_atom::value, std::string("127.0.0.1:1"), b);
  BOOST_TEST(static_cast<bool>(resolve("127.0.0.1:1")));
  f.self->send_exit(b, caf::exit_reason::user_shutdown);
}
