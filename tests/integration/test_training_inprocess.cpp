// Training through servers as actors in one process (the same code as across processes, minus the wire): the
// servers' forward and backward equal the local blocks', a training run through the swarm follows the local run
// step for step, sub-batches take routes of their own, a server lost before a backward is replaced, and bad
// requests get errors that name the problem. LoRA adapters: servers list them, apply the one a request names
// (generation and training equal the local model with the adapter), and routes use only servers that hold it.
// Large requests and replies stream in chunks (a small threshold here) with the same results, and broken
// streams are refused by name. Generation with deep prompts equals the local model's, also after a failover.
#define BOOST_TEST_MODULE training_inprocess
#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>
#include <map>
#include <numeric>
#include <random>
#include <thread>

#include "actors/client/client_api.hpp"
#include "actors/net/connector.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/system/system_config.hpp"
#include "actors/server/server_node.hpp"
#include "model/local_model.hpp"
#include "model/train/local_training.hpp"
#include "model/train/span_training.hpp"
#include "support/golden.hpp"
#include "support/tampering_gate.hpp"

using namespace corolla;
using namespace corolla::test;

namespace {

// A client that asks these servers directly (no DHT).
swarm_client_options client_options(std::vector<std::string> peers, route_mode mode, caf::timespan timeout) {
  swarm_client_options o;
  o.initial_peers = std::move(peers);
  o.mode = mode;
  o.request_timeout = timeout;
  return o;
}

struct training_swarm {
  corolla_config cfg;
  // Declared before the actor system, so destroyed after it: its actors use this until they stop.
  std::unique_ptr<Backend> client_backend = make_cpu_backend(1);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  caf::actor connector = spawn_connector(sys);
  std::shared_ptr<WeightSource> source = open_weights(model_dir("llama"));
  std::vector<server_node> servers;
  std::vector<std::string> addresses;
  std::shared_ptr<ClientHead> head = std::make_shared<ClientHead>(*source, *client_backend);
  std::vector<caf::actor> owned;

  // adapters[i]: the adapter directories server i loads.
  stream_limits streams;  // the servers' and the clients'

  explicit training_swarm(std::vector<std::pair<int64_t, int64_t>> spans,
                          std::vector<std::vector<std::string>> adapters = {}, stream_limits streams = {})
      : streams(streams) {
    for (size_t i = 0; i < spans.size(); ++i) {
      server_setup setup;
      setup.streams = streams;
      if (i < adapters.size()) setup.adapters = adapters[i];
      setup.model = model_dir("llama");
      setup.first_block = spans[i].first;
      setup.last_block = spans[i].second;
      setup.threads = 1;
      setup.seed = 200 + i;
      servers.push_back(start_server_node(sys, setup, connector, source));
      addresses.push_back("inproc:trainer-server-" + std::to_string(i));
      self->send(connector, register_atom::value, addresses.back(), caf::actor_cast<caf::actor>(servers.back().gate));
      self->send(servers.back().gate, address_atom::value, addresses.back());
    }
  }
  ~training_swarm() {
    for (auto& a : owned) self->send_exit(a, caf::exit_reason::user_shutdown);
    for (auto& s : servers) self->send_exit(s.gate, caf::exit_reason::user_shutdown);
    self->send_exit(connector, caf::exit_reason::user_shutdown);
  }

  template <class Handle>
  Handle keep(Handle a) {
    owned.push_back(caf::actor_cast<caf::actor>(a));
    return a;
  }

  swarm_client_actor client(route_mode mode = route_mode::relay, spot_check_options checks = {}) {
    auto o = client_options(addresses, mode, std::chrono::seconds(10));
    o.streams = streams;
    o.spot_checks = checks;
    return keep(spawn_swarm_client(sys, o, head, connector));
  }

  // A training session over the swarm (the client's block runner).
  training_session_actor session(open_training_request req = {}, spot_check_options checks = {}) {
    auto client = this->client(route_mode::relay, checks);
    training_session_actor s;
    self->request(client, caf::infinite, req)
        .receive([&](training_session_actor a) { s = a; }, [&](caf::error& e) { BOOST_FAIL("open: " << describe(e)); });
    return keep(s);
  }

  template <class Reply, class Handle, class Request>
  caf::expected<Reply> ask(const Handle& dest, Request req) {
    caf::expected<Reply> out = caf::error{};
    self->request(dest, std::chrono::seconds(30), std::move(req))
        .receive([&](Reply& r) { out = std::move(r); }, [&](caf::error& e) { out = std::move(e); });
    return out;
  }
};

// A server's gate behind a proxy that passes every message on, but sends back a malformed tensor (a hostile or
// broken server): in forwards, hidden states one token short (0) or in f16 (1); in backwards, an input gradient in
// f16 (2) or prompt gradients of one layer (3).
caf::behavior malformed_replies(caf::event_based_actor* self, caf::actor real, int how) {
  pass_on_the_rest(self, real);
  return {
      tamper<forward_request, forward_reply>(self, real,
                                             [how](forward_reply& r) {
                                               const Shape s = r.hidden.shape();
                                               if (how == 0)
                                                 r.hidden = Tensor::empty(DType::f32, {s[0], s[1] - 1, s[2]});
                                               if (how == 1) r.hidden = Tensor::empty(DType::f16, s);
                                             }),
      tamper<backward_request, backward_reply>(self, real,
                                               [how](backward_reply& r) {
                                                 if (how == 2)
                                                   r.grad_input = Tensor::empty(DType::f16, r.grad_input.shape());
                                                 const Shape s = r.grad_prompts.shape();
                                                 if (how == 3)
                                                   r.grad_prompts = Tensor::empty(DType::f32, {1, s[1], s[2], s[3]});
                                               }),
  };
}

// A server's gate behind a proxy whose forwards are wrong: every value one more than the server computed (a liar).
caf::behavior wrong_forwards(caf::event_based_actor* self, caf::actor real) {
  pass_on_the_rest(self, real);
  return {tamper<forward_request, forward_reply>(self, real, [](forward_reply& r) {
    Tensor shifted = Tensor::empty(DType::f32, r.hidden.shape());
    for (int64_t i = 0; i < shifted.numel(); ++i) shifted.data_as<float>()[i] = r.hidden.data_as<const float>()[i] + 1;
    r.hidden = shifted;
  })};
}

// A server whose backwards are wrong (every input gradient scaled by 1.5, and its prompt gradients too) and whose
// forwards are right.
caf::behavior wrong_backwards(caf::event_based_actor* self, caf::actor real) {
  pass_on_the_rest(self, real);
  return {tamper<backward_request, backward_reply>(self, real, [](backward_reply& r) {
    for (Tensor* t : {&r.grad_input, &r.grad_prompts}) {
      if (!t->defined()) continue;
      Tensor scaled = Tensor::empty(DType::f32, t->shape());
      for (int64_t i = 0; i < scaled.numel(); ++i) scaled.data_as<float>()[i] = t->data_as<const float>()[i] * 1.5f;
      *t = scaled;
    }
  })};
}

// The error of a failed reply, for messages (an expected holding a value has none).
template <class T>
std::string why(const caf::expected<T>& r) {
  return r ? std::string() : describe(r.error());
}

std::vector<int32_t> positions_of(int64_t b, int64_t t) {
  std::vector<int32_t> p(static_cast<size_t>(b * t));
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int32_t>(i % static_cast<size_t>(t));
  return p;
}

// Four examples of the golden model's token ids, of different lengths (padding is exercised).
TrainingBatch example_batch() {
  const auto ids = Golden("llama", "grads").ids("train_ids");
  std::vector<TrainingExample> ex;
  for (size_t i = 0; i < 4; ++i) {
    TrainingExample e;
    const size_t from = (i % 2) * 12, len = 12 - 2 * i;
    e.ids.assign(ids.begin() + static_cast<std::ptrdiff_t>(from),
                 ids.begin() + static_cast<std::ptrdiff_t>(from + len));
    ex.push_back(e);
  }
  return make_batch(ex, 0);
}

// A forward and a backward of the example batch's deep prompts through `session`, each equal to the local blocks'
// within `tolerance`.
void forward_and_backward_equal_the_local_blocks(training_swarm& f, const training_session_actor& session,
                                                 float tolerance = 1e-5f) {
  PromptTuning tuning(f.head, tuning_options(TuningMode::deep_ptune, 4));
  const TrainingBatch batch = example_batch();
  const BlockInputs in = tuning.inputs(batch);
  auto fwd = f.ask<blocks_forward_result>(session, blocks_forward{in.hidden, in.positions, in.prompts});
  BOOST_REQUIRE_MESSAGE(fwd, why(fwd));
  auto backend = make_cpu_backend(1);
  LocalBlocks blocks(*f.source, *backend);
  BOOST_TEST(fwd->hidden.shape() == in.hidden.shape());
  BOOST_TEST(max_abs_diff(fwd->hidden, span_forward(blocks.blocks(), in.hidden, in.positions, in.prompts, *backend)) <
             tolerance);
  const Tensor grad = tuning.loss(batch, fwd->hidden).grad;
  auto back = f.ask<blocks_backward_result>(session, blocks_backward{fwd->pass, grad});
  BOOST_REQUIRE_MESSAGE(back, why(back));
  SpanGradients want = span_backward(blocks.blocks(), in.hidden, grad, in.positions, in.prompts, *backend);
  BOOST_TEST(max_abs_diff(back->grad_input, want.grad_in) < tolerance);
  BOOST_TEST(max_abs_diff(back->grad_prompts, want.grad_prompts) < tolerance);
}

}  // namespace

BOOST_AUTO_TEST_CASE(server_forward_and_backward_equal_the_local_blocks) {
  training_swarm f({{0, 4}});
  Golden g("llama", "grads");
  const Tensor x = g.tensor("block_input"), dy = g.tensor("block_grad_output"), prompts = g.tensor("span_prompts");
  const auto pos = positions_of(2, 12);
  // Blocks 1..2 only: a part of the span, with their share of the prompts.
  auto backend = make_cpu_backend(1);
  std::vector<std::unique_ptr<Block>> blocks;
  std::vector<Block*> ptrs;
  for (int i = 1; i < 3; ++i) {
    blocks.push_back(load_block(*f.source, i, *backend));
    ptrs.push_back(blocks.back().get());
  }
  const Tensor mine = prompts.slice_rows(1, 3);
  auto fwd = f.ask<forward_reply>(f.servers[0].gate, forward_request{x, pos, mine, 1, 3, "", 0, {}, {}});
  BOOST_REQUIRE_MESSAGE(fwd, why(fwd));
  BOOST_TEST(max_abs_diff(fwd->hidden, span_forward(ptrs, x, pos, mine, *backend)) < 1e-6f);
  auto back = f.ask<backward_reply>(f.servers[0].gate, backward_request{x, dy, pos, mine, 1, 3, "", 0, {}});
  BOOST_REQUIRE_MESSAGE(back, why(back));
  SpanGradients want = span_backward(ptrs, x, dy, pos, mine, *backend);
  BOOST_TEST(max_abs_diff(back->grad_input, want.grad_in) < 1e-6f);
  BOOST_TEST(max_abs_diff(back->grad_prompts, want.grad_prompts) < 1e-6f);
  // The whole span without prompts: the golden stack's gradient needs all four blocks and the prompts.
  auto all = f.ask<backward_reply>(f.servers[0].gate, backward_request{x, dy, pos, prompts, 0, 0, "", 0, {}});
  BOOST_REQUIRE(all);
  BOOST_TEST(max_abs_diff(all->grad_input, g.tensor("span_grad_input")) < 1e-4f);
  BOOST_TEST(max_abs_diff(all->grad_prompts, g.tensor("span_grad_prompts")) < 1e-4f);
}

BOOST_AUTO_TEST_CASE(bad_training_requests_get_errors_naming_the_problem) {
  training_swarm f({{0, 2}});
  auto gate = f.servers[0].gate;
  const Tensor x = Golden("llama", "grads").tensor("block_input");
  const auto pos = positions_of(2, 12);
  auto expect = [&](caf::expected<backward_reply> r, errc code, const std::string& words) {
    BOOST_REQUIRE(!r);
    BOOST_TEST(is(r.error(), code), describe(r.error()));
    BOOST_TEST(describe(r.error()).find(words) != std::string::npos, describe(r.error()));
  };
  auto back = [&](Tensor h, Tensor grad, Tensor prompts, int64_t first = 0, int64_t last = 0) {
    return f.ask<backward_reply>(gate, backward_request{h, grad, pos, prompts, first, last, "", 0, {}});
  };
  expect(back(x, Tensor::empty(DType::f32, {2, 11, 64}), {}), errc::bad_request, "does not match the hidden states");
  expect(back(x, x, Tensor::empty(DType::f32, {2, 2, 13, 64})), errc::bad_request, "longer than the 12 tokens");
  expect(back(x, x, Tensor::empty(DType::f32, {3, 2, 4, 64})), errc::bad_request, "prompts for 3 blocks");
  expect(back(x, x, {}, 1, 4), errc::unknown_block, "not all served here");
  expect(back(Tensor::empty(DType::f32, {2, 12, 63}), x, {}), errc::bad_request, "f32[batch, tokens, 64]");
  auto fwd = f.ask<forward_reply>(gate, forward_request{x, {0, 1}, {}, 0, 0, "", 0, {}, {}});
  BOOST_TEST(is(fwd.error(), errc::bad_request));
  // The server still serves.
  BOOST_TEST(bool(back(x, x, {})));
}

BOOST_AUTO_TEST_CASE(training_through_two_servers_follows_the_local_run) {
  training_swarm f({{0, 2}, {2, 4}});
  TuningOptions opt = tuning_options(TuningMode::deep_ptune, 4);
  opt.adam.lr = 0.05f;
  auto remote = f.keep(spawn_trainer(f.sys, f.head, f.session(), opt));
  auto local_backend = make_cpu_backend(1);
  PromptTuning local(f.head, opt);
  LocalBlocks blocks(*f.source, *local_backend);
  const TrainingBatch batch = example_batch();
  for (int step = 0; step < 4; ++step) {
    auto r = f.ask<train_step_result>(remote, train_step{batch});
    BOOST_REQUIRE_MESSAGE(r, why(r));
    const double want = local_train_step(local, blocks, batch);
    BOOST_TEST(std::fabs(r->loss - want) < 1e-5, "step " << step << ": " << r->loss << " vs " << want);
    BOOST_TEST(r->step == step + 1);
    BOOST_TEST(r->tokens == batch.tokens());
  }
  auto params = f.ask<trained_parameters>(remote, params_atom::value);
  BOOST_REQUIRE(params);
  for (auto& [name, value] : params->tensors)
    for (auto& [lname, lvalue] : local.parameters())
      if (name == lname) BOOST_TEST(max_abs_diff(value, lvalue) < 1e-5f, name);
}

BOOST_AUTO_TEST_CASE(sub_batches_take_routes_of_their_own) {
  training_swarm f({{0, 4}, {0, 4}});
  // 4 sequences of 4 + 12 tokens with at most 32 tokens per request: two sub-batches, one per server.
  auto session = f.session({"", 32});
  forward_and_backward_equal_the_local_blocks(f, session);
  auto routes = f.ask<std::vector<std::string>>(session, route_atom::value);
  BOOST_REQUIRE_MESSAGE(routes, why(routes));
  BOOST_REQUIRE(routes->size() == 2u);
  BOOST_TEST((*routes)[0] != (*routes)[1]);
}

BOOST_AUTO_TEST_CASE(a_server_lost_before_the_backward_is_replaced) {
  // Blocks 2..3 on two servers; the one the forward used dies before the backward.
  training_swarm f({{0, 2}, {2, 4}, {2, 4}});
  auto session = f.session();
  PromptTuning tuning(f.head, tuning_options(TuningMode::deep_ptune, 4));
  const TrainingBatch batch = example_batch();
  const BlockInputs in = tuning.inputs(batch);
  auto fwd = f.ask<blocks_forward_result>(session, blocks_forward{in.hidden, in.positions, in.prompts});
  BOOST_REQUIRE_MESSAGE(fwd, why(fwd));
  auto routes = f.ask<std::vector<std::string>>(session, route_atom::value);
  BOOST_REQUIRE(routes && routes->size() == 1u);
  const size_t victim = routes->front().find(f.addresses[1]) != std::string::npos ? 1 : 2;
  f.self->send_exit(f.servers[victim].gate, caf::exit_reason::kill);
  const Tensor grad = tuning.loss(batch, fwd->hidden).grad;
  auto back = f.ask<blocks_backward_result>(session, blocks_backward{fwd->pass, grad});
  BOOST_REQUIRE_MESSAGE(back, why(back));
  auto after = f.ask<std::vector<std::string>>(session, route_atom::value);
  BOOST_REQUIRE(after && after->size() == 1u);
  BOOST_TEST(after->front().find(f.addresses[victim]) == std::string::npos, after->front());
  BOOST_TEST(after->front().find(f.addresses[3 - victim]) != std::string::npos, after->front());
  auto backend = make_cpu_backend(1);
  LocalBlocks blocks(*f.source, *backend);
  SpanGradients want = span_backward(blocks.blocks(), in.hidden, grad, in.positions, in.prompts, *backend);
  BOOST_TEST(max_abs_diff(back->grad_input, want.grad_in) < 1e-5f);
  BOOST_TEST(max_abs_diff(back->grad_prompts, want.grad_prompts) < 1e-5f);
}

// A server that returns tensors of another shape or dtype than its span's is replaced like a failed one: the
// forward and the backward equal the local blocks', and the server is out of the routes. (Joining its short
// tensor into the batch read past the end of it.)
BOOST_AUTO_TEST_CASE(a_server_that_returns_malformed_tensors_is_replaced) {
  for (int how = 0; how < 4; ++how) {
    BOOST_TEST_CONTEXT("malformed reply " << how) {
      training_swarm f({{0, 4}, {0, 4}});
      auto proxy = f.keep(f.sys.spawn(malformed_replies, caf::actor_cast<caf::actor>(f.servers[0].gate), how));
      f.self->send(f.connector, register_atom::value, f.addresses[0], proxy);
      // Two sub-batches of at most 32 tokens: one on each server.
      auto session = f.session({"", 32});
      forward_and_backward_equal_the_local_blocks(f, session);
      auto routes = f.ask<std::vector<std::string>>(session, route_atom::value);
      BOOST_REQUIRE(routes);
      for (const auto& r : *routes) BOOST_TEST(r.find(f.addresses[0]) == std::string::npos, r);
    }
  }
}

namespace {

// Server 0 of `spans` behind `liar`, every forward and backward checked: the forward and the backward equal the local
// blocks' and the liar is out of the session's routes. Four sub-batches of one sequence (16 tokens) each, over the
// servers (the sums of one sequence at a time round differently from the whole batch's, by up to 2e-5).
void a_liar_is_caught_by_spot_checks(std::vector<std::pair<int64_t, int64_t>> spans,
                                     caf::behavior (*liar)(caf::event_based_actor*, caf::actor)) {
  training_swarm f(std::move(spans));
  auto proxy = f.keep(f.sys.spawn(liar, caf::actor_cast<caf::actor>(f.servers[0].gate)));
  f.self->send(f.connector, register_atom::value, f.addresses[0], proxy);
  auto session = f.session({"", 16}, spot_check_options{1, true});
  forward_and_backward_equal_the_local_blocks(f, session, 1e-4f);
  auto routes = f.ask<std::vector<std::string>>(session, route_atom::value);
  BOOST_REQUIRE(routes);
  for (const auto& r : *routes) BOOST_TEST(r.find(f.addresses[0]) == std::string::npos, r);
}

}  // namespace

// A server whose forwards are wrong is caught by spot checks (every forward checked here): as the checked server,
// outvoted by two others, and as a verifier, outvoted by a second one. (Without checks the training client took its
// forwards on faith.)
BOOST_AUTO_TEST_CASE(a_server_whose_forwards_are_wrong_is_caught_by_spot_checks) {
  a_liar_is_caught_by_spot_checks({{0, 4}, {0, 4}, {0, 4}}, wrong_forwards);
}

// A server whose backwards are wrong (its forwards right) is caught by spot checks of backwards, which count their
// own servers checked: as the checked server and as a verifier. (Without them the gradients were taken on faith.)
BOOST_AUTO_TEST_CASE(a_server_whose_backwards_are_wrong_is_caught_by_spot_checks) {
  a_liar_is_caught_by_spot_checks({{0, 4}, {0, 4}, {0, 4}}, wrong_backwards);
}

// Verifiers of a backward that span the checked server's blocks in two hops run their forward first, for the second
// hop's input: a liar over blocks 0..3 checked on servers of 0..1 and 2..3.
BOOST_AUTO_TEST_CASE(a_backward_is_checked_on_a_chain_of_servers) {
  a_liar_is_caught_by_spot_checks({{0, 4}, {0, 2}, {2, 4}, {0, 2}, {2, 4}}, wrong_backwards);
}

BOOST_AUTO_TEST_CASE(bad_training_input_on_the_client_gets_clear_errors) {
  training_swarm f({{0, 4}});
  auto session = f.session();
  // Prompts of the wrong length for the hidden states.
  const Tensor h = Tensor::empty(DType::f32, {1, 3, 64});
  auto r = f.ask<blocks_forward_result>(
      session, blocks_forward{h, positions_of(1, 3), Tensor::empty(DType::f32, {4, 1, 5, 64})});
  BOOST_TEST(is(r.error(), errc::bad_request));
  BOOST_TEST(describe(r.error()).find("longer than the 3 tokens") != std::string::npos, describe(r.error()));
  auto b = f.ask<blocks_backward_result>(session, blocks_backward{42, h});
  BOOST_TEST(describe(b.error()).find("no forward pass 42") != std::string::npos, describe(b.error()));
  // A classifier batch without labels, through the trainer.
  auto trainer =
      f.keep(spawn_trainer(f.sys, f.head, session, tuning_options(TuningMode::ptune, 16, TrainingHead::classifier)));
  auto t = f.ask<train_step_result>(trainer, train_step{example_batch()});
  BOOST_TEST(describe(t.error()).find("needs a label for every example") != std::string::npos, describe(t.error()));
  // A route that cannot exist.
  auto client = f.keep(spawn_swarm_client(
      f.sys, client_options(f.addresses, route_mode::relay, std::chrono::seconds(5)), f.head, f.connector));
  auto s = f.ask<training_session_actor>(client, open_training_request{"no-such-adapter", 4096});
  BOOST_TEST(is(s.error(), errc::no_route), describe(s.error()));
  BOOST_TEST(describe(s.error()).find("no-such-adapter") != std::string::npos, describe(s.error()));
}

namespace {

std::string adapter_dir(const std::string& name) { return model_dir("llama") + "/adapters/" + name; }

}  // namespace

BOOST_AUTO_TEST_CASE(servers_apply_the_adapter_a_request_names) {
  // Blocks 0..1 on a server with both adapters, 2..3 on one with lora-attn and on one with none.
  training_swarm f({{0, 2}, {2, 4}, {2, 4}},
                   {{adapter_dir("lora-attn"), adapter_dir("lora-mlp")}, {adapter_dir("lora-attn")}, {}});
  auto infos = f.ask<std::vector<server_info>>(f.client(), refresh_atom::value);
  BOOST_REQUIRE(infos);
  std::map<std::string, std::vector<std::string>> listed;
  for (auto& i : *infos) listed[i.address] = i.adapters;
  BOOST_TEST((listed[f.addresses[0]] == std::vector<std::string>{"lora-attn", "lora-mlp"}));
  BOOST_TEST((listed[f.addresses[1]] == std::vector<std::string>{"lora-attn"}));
  BOOST_TEST(listed[f.addresses[2]].empty());

  // Generation with the adapter through the swarm: PEFT's greedy tokens, through the servers that hold it.
  for (auto mode : {route_mode::relay, route_mode::push}) {
    inference_session_actor session;
    f.self->request(f.client(mode), caf::infinite, open_session_request{64, 1, "lora-attn"})
        .receive([&](inference_session_actor s) { session = s; },
                 [&](caf::error& e) { BOOST_FAIL("open: " << describe(e)); });
    f.keep(session);
    auto golden = SafetensorsFile::open(adapter_dir("lora-attn") + "/golden.safetensors");
    auto to_ids = [](const Tensor& t) {
      return std::vector<int32_t>(t.data_as<const int64_t>(), t.data_as<const int64_t>() + t.numel());
    };
    generate_request req;
    req.prompt = to_ids(golden->tensor("input_ids"));
    req.params.max_new_tokens = 16;
    req.params.stop_at_eos = false;
    auto r = f.ask<generate_result>(session, req);
    BOOST_REQUIRE_MESSAGE(r, why(r));
    BOOST_TEST(r->tokens == to_ids(golden->tensor("greedy_ids")), boost::test_tools::per_element());
    auto route = f.ask<std::vector<std::string>>(session, route_atom::value);
    BOOST_REQUIRE(route);
    for (const auto& hop : *route) BOOST_TEST(hop.find(f.addresses[2]) == std::string::npos, hop);
  }
  // lora-mlp covers blocks 0..1 only: no route.
  auto none = f.ask<inference_session_actor>(f.client(), open_session_request{64, 1, "lora-mlp"});
  BOOST_TEST(is(none.error(), errc::no_route), why(none));
  BOOST_TEST(why(none).find("lora-mlp") != std::string::npos, why(none));

  // A server asked for an adapter it does not hold says which it has.
  auto bad = f.ask<session_opened>(f.servers[1].gate, open_session{16, 1, 0, 0, "lora-mlp", {}, {}, {}});
  BOOST_TEST(is(bad.error(), errc::bad_request));
  BOOST_TEST(why(bad).find("unknown adapter 'lora-mlp' (this server holds lora-attn)") != std::string::npos, why(bad));
  const Tensor x = Golden("llama", "grads").tensor("block_input");
  auto fwd = f.ask<forward_reply>(f.servers[2].gate,
                                  forward_request{x, positions_of(2, 12), {}, 0, 0, "lora-attn", 0, {}, {}});
  BOOST_TEST(why(fwd).find("holds none") != std::string::npos, why(fwd));

  // Training with the adapter through the swarm follows local training with it.
  TuningOptions opt = tuning_options(TuningMode::deep_ptune, 4);
  opt.adam.lr = 0.05f;
  auto remote = f.keep(spawn_trainer(f.sys, f.head, f.session({"lora-attn", 4096}), opt));
  auto backend = make_cpu_backend(1);
  auto adapter = LoraAdapter::load(adapter_dir("lora-attn"), f.source->config(), 0, 4, *backend);
  PromptTuning local(f.head, opt);
  LocalBlocks blocks(*f.source, *backend);
  const TrainingBatch batch = example_batch();
  for (int step = 0; step < 3; ++step) {
    auto r = f.ask<train_step_result>(remote, train_step{batch});
    BOOST_REQUIRE_MESSAGE(r, why(r));
    const BlockInputs in = local.inputs(batch);
    const HeadLoss loss =
        local.loss(batch, span_forward(blocks.blocks(), in.hidden, in.positions, in.prompts, *backend, adapter.get()));
    SpanGradients g =
        span_backward(blocks.blocks(), in.hidden, loss.grad, in.positions, in.prompts, *backend, adapter.get());
    local.accumulate(batch, g.grad_in, g.grad_prompts);
    local.apply();
    BOOST_TEST(std::fabs(r->loss - loss.loss) < 1e-5, "step " << step << ": " << r->loss << " vs " << loss.loss);
  }
}

// --- large messages as streams of chunks ------------------------------------------------------------------------

// Streams above 4 KiB, in chunks of 1000 bytes, between actors of this process too.
stream_limits small_streams() {
  stream_limits l;
  l.threshold = 4096;
  l.chunk_bytes = 1000;
  l.in_process = true;
  l.timeout = std::chrono::milliseconds(200);
  return l;
}

BOOST_AUTO_TEST_CASE(large_requests_and_replies_stream_in_chunks_with_the_same_results) {
  auto backend = make_cpu_backend(1);
  auto source = open_weights(model_dir("llama"));
  PromptTuning tuning(std::make_shared<ClientHead>(*source, *backend), tuning_options(TuningMode::deep_ptune, 4));
  const TrainingBatch batch = example_batch();
  const BlockInputs in = tuning.inputs(batch);  // 4 x 16 x 64 f32: 16 KiB of hidden states per request
  auto run = [&](stream_limits limits) {
    training_swarm f({{0, 2}, {2, 4}}, {}, limits);
    auto session = f.session({"", 1 << 20});
    auto fwd = f.ask<blocks_forward_result>(session, blocks_forward{in.hidden, in.positions, in.prompts});
    BOOST_REQUIRE_MESSAGE(fwd, why(fwd));
    auto back =
        f.ask<blocks_backward_result>(session, blocks_backward{fwd->pass, tuning.loss(batch, fwd->hidden).grad});
    BOOST_REQUIRE_MESSAGE(back, why(back));
    return std::make_pair(fwd->hidden, *back);
  };
  const auto plain = run({});  // nothing streams in one process by default
  const auto streamed = run(small_streams());
  BOOST_TEST(max_abs_diff(streamed.first, plain.first) == 0.f);
  BOOST_TEST(max_abs_diff(streamed.second.grad_input, plain.second.grad_input) == 0.f);
  BOOST_TEST(max_abs_diff(streamed.second.grad_prompts, plain.second.grad_prompts) == 0.f);
  LocalBlocks blocks(*source, *backend);
  BOOST_TEST(max_abs_diff(streamed.first,
                          span_forward(blocks.blocks(), in.hidden, in.positions, in.prompts, *backend)) < 1e-5f);

  // The requests did stream: servers that accept no message above 8 KiB refuse them, by name.
  stream_limits strict = small_streams();
  strict.max_message_bytes = 8192;
  training_swarm f({{0, 4}}, {}, strict);
  f.streams = small_streams();  // the client's limits
  auto session = f.session({"", 1 << 20});
  auto fwd = f.ask<blocks_forward_result>(session, blocks_forward{in.hidden, in.positions, in.prompts});
  BOOST_REQUIRE(!fwd);
  BOOST_TEST(is(fwd.error(), errc::bad_request), why(fwd));
  BOOST_TEST(why(fwd).find("above the largest message accepted (8192 bytes)") != std::string::npos, why(fwd));
  // And so did the replies: a client that accepts none above 8 KiB finds the server's reply refused.
  training_swarm g({{0, 4}}, {}, small_streams());
  g.streams = strict;
  auto other = g.session({"", 1 << 20});
  auto refused = g.ask<blocks_forward_result>(other, blocks_forward{in.hidden, in.positions, in.prompts});
  BOOST_REQUIRE(!refused);  // the request streams to the server fine; its reply does not come back
  BOOST_TEST(why(refused).find("above the largest message accepted (8192 bytes)") != std::string::npos, why(refused));
}

BOOST_AUTO_TEST_CASE(broken_and_abandoned_streams_are_refused_and_freed) {
  training_swarm f({{0, 4}}, {}, small_streams());
  auto gate = f.servers[0].gate;
  const Tensor x = Golden("llama", "grads").tensor("block_input");  // [2, 12, 64]
  const forward_request whole{x, positions_of(2, 12), {}, 0, 0, "", 0, {}, {}};
  const auto chunks = cut_chunks(pieces(whole), 41, 1000);
  BOOST_REQUIRE(chunks.size() > 3u);
  auto final_of = [](uint64_t id) {
    forward_request hollow;
    hollow.stream = id;
    return hollow;
  };
  // A chunk lost on the way: the next one is refused, and so is the final message.
  for (size_t i = 0; i < 2; ++i) BOOST_TEST(bool(f.ask<ack>(gate, chunks[i])));
  auto gap = f.ask<ack>(gate, chunks[3]);
  BOOST_TEST(is(gap.error(), errc::bad_request), why(gap));
  const std::string due = "stream 41: a chunk at byte " + std::to_string(chunks[3].offset) + " where byte " +
                          std::to_string(chunks[2].offset) + " was due";
  BOOST_TEST(why(gap).find(due) != std::string::npos, why(gap));
  BOOST_TEST(why(f.ask<ack>(gate, chunks[2])).find(due) != std::string::npos);  // too late: it stays broken
  auto lost = f.ask<forward_reply>(gate, final_of(41));
  BOOST_TEST(is(lost.error(), errc::bad_request), why(lost));
  BOOST_TEST(why(lost).find(due) != std::string::npos, why(lost));
  // The final message of a stream that never was.
  auto unknown = f.ask<forward_reply>(gate, final_of(42));
  BOOST_TEST(why(unknown).find("stream 42 is unknown here") != std::string::npos, why(unknown));
  // A stream abandoned half way is dropped after the timeout (200 ms); its final message, come late, says so.
  for (size_t i = 0; i < 2; ++i) {
    wire_chunk c = chunks[i];
    c.stream = 43;
    BOOST_TEST(bool(f.ask<ack>(gate, c)));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto late = f.ask<forward_reply>(gate, final_of(43));
  BOOST_TEST(why(late).find("stream 43 was abandoned: no chunk for 0.20 s") != std::string::npos, why(late));
  // A whole stream is taken and its request served; the reply streams back to this requester, which does not
  // acknowledge its chunks: once they time out the gate gives up on it (holding nothing) and says so.
  for (auto c : chunks) {
    c.stream = 44;
    BOOST_TEST(bool(f.ask<ack>(gate, c)));
  }
  auto unacknowledged = f.ask<forward_reply>(gate, final_of(44));
  BOOST_TEST(why(unacknowledged).find("the reply could not be streamed back") != std::string::npos,
             why(unacknowledged));
}

// --- deep prompts in generation ---------------------------------------------------------------------------------

TunedPrompts random_prompts(int64_t blocks, int64_t length, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  TunedPrompts t{Tensor::empty(DType::f32, {length, 64}), Tensor::empty(DType::f32, {blocks, length, 64})};
  for (Tensor* x : {&t.prompts, &t.deep_prompts})
    for (int64_t i = 0; i < x->numel(); ++i) x->data_as<float>()[i] = normal(rng);
  return t;
}

GenerationParams greedy(int64_t n) {
  GenerationParams p;
  p.max_new_tokens = n;
  p.stop_at_eos = false;
  return p;
}

BOOST_AUTO_TEST_CASE(generation_with_deep_prompts_equals_the_local_model_and_survives_a_failover) {
  // Blocks 2..3 on two servers: the one a session uses dies half way through its generation.
  training_swarm f({{0, 2}, {2, 4}, {2, 4}});
  const TunedPrompts tuned = random_prompts(4, 3, 7);
  const std::vector<int32_t> prompt = {17, 42, 99, 7};
  auto backend = make_cpu_backend(1);
  LocalModel local(f.source, *backend);
  const auto want = generate(local, prompt, greedy(12), {}, &tuned);
  TunedPrompts shallow = tuned;
  shallow.deep_prompts = Tensor();
  BOOST_TEST(generate(local, prompt, greedy(12), {}, &shallow) != want);  // the deep prompts matter

  const int64_t max_length = 3 + 4 + 12;
  for (auto mode : {route_mode::relay, route_mode::push}) {
    BOOST_TEST_CONTEXT((mode == route_mode::push ? "push" : "relay")) {
      auto session =
          f.ask<inference_session_actor>(f.client(mode), open_session_request{max_length, 1, "", tuned.deep_prompts});
      BOOST_REQUIRE_MESSAGE(session, why(session));
      f.keep(*session);
      auto r = f.ask<generate_result>(*session, generate_request{prompt, greedy(12), {}, tuned.prompts});
      BOOST_REQUIRE_MESSAGE(r, why(r));
      BOOST_TEST(r->tokens == want, boost::test_tools::per_element());
    }
  }

  // Six tokens, the server of blocks 2..3 dies, six more: the replacement replays the history (the tuned prompts'
  // positions among it) with the same deep prompts, and the tokens go on as the local model's.
  auto session = f.ask<inference_session_actor>(f.client(route_mode::push),
                                                open_session_request{max_length, 1, "", tuned.deep_prompts});
  BOOST_REQUIRE_MESSAGE(session, why(session));
  f.keep(*session);
  auto first = f.ask<generate_result>(*session, generate_request{prompt, greedy(6), {}, tuned.prompts});
  BOOST_REQUIRE_MESSAGE(first, why(first));
  auto route = f.ask<std::vector<std::string>>(*session, route_atom::value);
  BOOST_REQUIRE(route && route->size() == 2u);
  const size_t victim = route->back().find(f.addresses[1]) != std::string::npos ? 1 : 2;
  f.self->send_exit(f.servers[victim].gate, caf::exit_reason::kill);
  auto rest = f.ask<generate_result>(*session, generate_request{{first->tokens.back()}, greedy(6)});
  BOOST_REQUIRE_MESSAGE(rest, why(rest));
  auto stats = f.ask<session_stats>(*session, stats_atom::value);
  BOOST_REQUIRE(stats);
  BOOST_TEST(stats->recovery_seconds.size() == 1u);
  std::vector<int32_t> got = first->tokens;
  got.insert(got.end(), rest->tokens.begin(), rest->tokens.end());
  BOOST_TEST(got == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(deep_prompts_of_the_wrong_shape_are_refused) {
  training_swarm f({{0, 2}, {2, 4}});
  auto client = f.client();
  auto open = [&](Tensor prompts, int64_t batch = 1) {
    return f.ask<inference_session_actor>(client, open_session_request{16, batch, "", prompts});
  };
  auto expect = [&](const caf::expected<inference_session_actor>& r, const std::string& words) {
    BOOST_REQUIRE(!r);
    BOOST_TEST(is(r.error(), errc::bad_request), why(r));
    BOOST_TEST(why(r).find(words) != std::string::npos, why(r));
  };
  expect(open(Tensor::empty(DType::f32, {3, 2, 64})), "deep prompts must be f32[4, prompt_len, 64]");
  expect(open(Tensor::empty(DType::f32, {4, 2, 63})), "got f32[4, 2, 63]");
  expect(open(Tensor::empty(DType::f32, {4, 2, 2, 64})), "f32[4, 1, prompt_len, 64]");  // batch 2 for a batch of 1
  expect(open(Tensor::empty(DType::f32, {4, 17, 64})), "length 17 exceed the session's max_length 16");
  // The servers check them too: a gate gets prompts for its own blocks only.
  auto gate = f.servers[0].gate;
  auto bad = [&](Tensor prompts, int64_t first = 0, int64_t last = 0) {
    return f.ask<session_opened>(gate, open_session{16, 1, first, last, "", prompts, {}, {}});
  };
  auto refused = [&](const caf::expected<session_opened>& r, const std::string& words) {
    BOOST_REQUIRE(!r);
    BOOST_TEST(is(r.error(), errc::bad_request), why(r));
    BOOST_TEST(why(r).find(words) != std::string::npos, why(r));
  };
  refused(bad(Tensor::empty(DType::f32, {4, 1, 2, 64})), "deep prompts must be f32[2, 1, prompt_len, 64]");
  refused(bad(Tensor::empty(DType::f32, {1, 1, 2, 64}), 0, 2), "got f32[1, 1, 2, 64]");
  refused(bad(Tensor::empty(DType::f32, {2, 1, 20, 64})), "length 20 exceed the session's max_length 16");
  refused(bad(Tensor::empty(DType::i32, {2, 1, 2, 64})), "deep prompts must be f32");
  auto good = bad(Tensor::empty(DType::f32, {1, 1, 2, 64}), 1, 2);  // block 1 alone
  BOOST_TEST(bool(good), why(good));
}
