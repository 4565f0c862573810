// Training through servers as actors in one process (the same code as across processes, minus the wire): the
// servers' forward and backward equal the local blocks', a training run through the swarm follows the local run
// step for step, sub-batches take routes of their own, a server lost before a backward is replaced, and bad
// requests get errors that name the problem. LoRA adapters: servers list them, apply the one a request names
// (generation and training equal the local model with the adapter), and routes use only servers that hold it.
#define BOOST_TEST_MODULE training_inprocess
#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>
#include <map>
#include <numeric>

#include "actors/client/client_api.hpp"
#include "actors/net/connector.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/protocol/system_config.hpp"
#include "actors/server/server_node.hpp"
#include "model/train/local_training.hpp"
#include "model/train/span_training.hpp"
#include "support/golden.hpp"

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
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  caf::actor connector = spawn_connector(sys);
  std::shared_ptr<WeightSource> source = open_weights(model_dir("llama"));
  std::vector<server_node> servers;
  std::vector<std::string> addresses;
  std::unique_ptr<Backend> client_backend = make_cpu_backend(1);
  std::shared_ptr<ClientHead> head = std::make_shared<ClientHead>(*source, *client_backend);
  std::vector<caf::actor> owned;

  // adapters[i]: the adapter directories server i loads.
  explicit training_swarm(std::vector<std::pair<int64_t, int64_t>> spans,
                          std::vector<std::vector<std::string>> adapters = {}) {
    for (size_t i = 0; i < spans.size(); ++i) {
      server_setup setup;
      if (i < adapters.size()) setup.adapters = adapters[i];
      setup.model = model_dir("llama");
      setup.first_block = spans[i].first;
      setup.last_block = spans[i].second;
      setup.threads = 1;
      setup.seed = 200 + i;
      servers.push_back(start_server_node(sys, setup, connector, source));
      addresses.push_back("inproc:trainer-server-" + std::to_string(i));
      self->send(connector, register_atom::value, addresses.back(), servers.back().gate);
      self->send(servers.back().gate, address_atom::value, addresses.back());
    }
  }
  ~training_swarm() {
    for (auto& a : owned) self->send_exit(a, caf::exit_reason::user_shutdown);
    for (auto& s : servers) self->send_exit(s.gate, caf::exit_reason::user_shutdown);
    self->send_exit(connector, caf::exit_reason::user_shutdown);
  }

  caf::actor keep(caf::actor a) {
    owned.push_back(a);
    return a;
  }

  caf::actor client(route_mode mode = route_mode::relay) {
    return keep(spawn_swarm_client(sys, client_options(addresses, mode, std::chrono::seconds(10)), head, connector));
  }

  // A training session over the swarm (the client's block runner).
  caf::actor session(open_training_request req = {}) {
    auto client = this->client();
    caf::actor s;
    self->request(client, caf::infinite, req)
        .receive([&](caf::actor a) { s = a; }, [&](caf::error& e) { BOOST_FAIL("open: " << describe(e)); });
    return keep(s);
  }

  template <class Reply, class Request>
  caf::expected<Reply> ask(const caf::actor& dest, Request req) {
    caf::expected<Reply> out = caf::error{};
    self->request(dest, std::chrono::seconds(30), std::move(req))
        .receive([&](Reply& r) { out = std::move(r); }, [&](caf::error& e) { out = std::move(e); });
    return out;
  }
};

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
    e.ids.assign(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.begin() + static_cast<std::ptrdiff_t>(from + len));
    ex.push_back(e);
  }
  return make_batch(ex, 0);
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
  auto fwd = f.ask<forward_reply>(f.servers[0].gate, forward_request{x, pos, mine, 1, 3, "", {}});
  BOOST_REQUIRE_MESSAGE(fwd, why(fwd));
  BOOST_TEST(max_abs_diff(fwd->hidden, span_forward(ptrs, x, pos, mine, *backend)) < 1e-6f);
  auto back = f.ask<backward_reply>(f.servers[0].gate, backward_request{x, dy, pos, mine, 1, 3, "", {}});
  BOOST_REQUIRE_MESSAGE(back, why(back));
  SpanGradients want = span_backward(ptrs, x, dy, pos, mine, *backend);
  BOOST_TEST(max_abs_diff(back->grad_input, want.grad_in) < 1e-6f);
  BOOST_TEST(max_abs_diff(back->grad_prompts, want.grad_prompts) < 1e-6f);
  // The whole span without prompts: the golden stack's gradient needs all four blocks and the prompts.
  auto all = f.ask<backward_reply>(f.servers[0].gate, backward_request{x, dy, pos, prompts, 0, 0, "", {}});
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
    return f.ask<backward_reply>(gate, backward_request{h, grad, pos, prompts, first, last, "", {}});
  };
  expect(back(x, Tensor::empty(DType::f32, {2, 11, 64}), {}), errc::bad_request, "does not match the hidden states");
  expect(back(x, x, Tensor::empty(DType::f32, {2, 2, 13, 64})), errc::bad_request, "longer than the 12 tokens");
  expect(back(x, x, Tensor::empty(DType::f32, {3, 2, 4, 64})), errc::bad_request, "prompts for 3 blocks");
  expect(back(x, x, {}, 1, 4), errc::unknown_block, "not all served here");
  expect(back(Tensor::empty(DType::f32, {2, 12, 63}), x, {}), errc::bad_request, "f32[batch, tokens, 64]");
  auto fwd = f.ask<forward_reply>(gate, forward_request{x, {0, 1}, {}, 0, 0, "", {}});
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
  TuningOptions opt = tuning_options(TuningMode::deep_ptune, 4);
  PromptTuning tuning(f.head, opt);
  const TrainingBatch batch = example_batch();
  const BlockInputs in = tuning.inputs(batch);
  auto fwd = f.ask<blocks_forward_result>(session, blocks_forward{in.hidden, in.positions, in.prompts});
  BOOST_REQUIRE_MESSAGE(fwd, why(fwd));
  auto routes = f.ask<std::vector<std::string>>(session, route_atom::value);
  BOOST_REQUIRE_MESSAGE(routes, why(routes));
  BOOST_REQUIRE(routes->size() == 2u);
  BOOST_TEST((*routes)[0] != (*routes)[1]);
  auto backend = make_cpu_backend(1);
  LocalBlocks blocks(*f.source, *backend);
  BOOST_TEST(max_abs_diff(fwd->hidden, span_forward(blocks.blocks(), in.hidden, in.positions, in.prompts, *backend)) <
             1e-5f);
  const Tensor grad = tuning.loss(batch, fwd->hidden).grad;
  auto back = f.ask<blocks_backward_result>(session, blocks_backward{fwd->pass, grad});
  BOOST_REQUIRE_MESSAGE(back, why(back));
  SpanGradients want = span_backward(blocks.blocks(), in.hidden, grad, in.positions, in.prompts, *backend);
  BOOST_TEST(max_abs_diff(back->grad_input, want.grad_in) < 1e-5f);
  BOOST_TEST(max_abs_diff(back->grad_prompts, want.grad_prompts) < 1e-5f);
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

BOOST_AUTO_TEST_CASE(bad_training_input_on_the_client_gets_clear_errors) {
  training_swarm f({{0, 4}});
  auto session = f.session();
  // Prompts of the wrong length for the hidden states.
  const Tensor h = Tensor::empty(DType::f32, {1, 3, 64});
  auto r = f.ask<blocks_forward_result>(session, blocks_forward{h, positions_of(1, 3), Tensor::empty(DType::f32, {4, 1, 5, 64})});
  BOOST_TEST(is(r.error(), errc::bad_request));
  BOOST_TEST(describe(r.error()).find("longer than the 3 tokens") != std::string::npos, describe(r.error()));
  auto b = f.ask<blocks_backward_result>(session, blocks_backward{42, h});
  BOOST_TEST(describe(b.error()).find("no forward pass 42") != std::string::npos, describe(b.error()));
  // A classifier batch without labels, through the trainer.
  auto trainer = f.keep(spawn_trainer(f.sys, f.head, session, tuning_options(TuningMode::ptune, 16, TrainingHead::classifier)));
  auto t = f.ask<train_step_result>(trainer, train_step{example_batch()});
  BOOST_TEST(describe(t.error()).find("needs a label for every example") != std::string::npos, describe(t.error()));
  // A route that cannot exist.
  auto client = f.keep(spawn_swarm_client(f.sys, client_options(f.addresses, route_mode::relay, std::chrono::seconds(5)), f.head, f.connector));
  auto s = f.ask<caf::actor>(client, open_training_request{"no-such-adapter", 4096});
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
    caf::actor session;
    f.self->request(f.client(mode), caf::infinite, open_session_request{64, 1, "lora-attn"})
        .receive([&](caf::actor s) { session = s; }, [&](caf::error& e) { BOOST_FAIL("open: " << describe(e)); });
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
  auto none = f.ask<caf::actor>(f.client(), open_session_request{64, 1, "lora-mlp"});
  BOOST_TEST(is(none.error(), errc::no_route), why(none));
  BOOST_TEST(why(none).find("lora-mlp") != std::string::npos, why(none));

  // A server asked for an adapter it does not hold says which it has.
  auto bad = f.ask<session_opened>(f.servers[1].gate, open_session{16, 1, 0, 0, "lora-mlp", {}});
  BOOST_TEST(is(bad.error(), errc::bad_request));
  BOOST_TEST(why(bad).find("unknown adapter 'lora-mlp' (this server holds lora-attn)") != std::string::npos, why(bad));
  const Tensor x = Golden("llama", "grads").tensor("block_input");
  auto fwd = f.ask<forward_reply>(f.servers[2].gate, forward_request{x, positions_of(2, 12), {}, 0, 0, "lora-attn", {}});
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
    SpanGradients g = span_backward(blocks.blocks(), in.hidden, loss.grad, in.positions, in.prompts, *backend, adapter.get());
    local.accumulate(batch, g.grad_in, g.grad_prompts);
    local.apply();
    BOOST_TEST(std::fabs(r->loss - loss.loss) < 1e-5, "step " << step << ": " << r->loss << " vs " << loss.loss);
  }
}
