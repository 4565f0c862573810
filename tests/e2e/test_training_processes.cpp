// Training through servers that are real processes on 127.0.0.1: `corolla finetune` learns a tiny task through a
// 2-server swarm (the loss falls by more than half in 50 steps) and `corolla generate --prompts` uses what it
// learned; training through the servers follows the local run step for step (within 1e-5); a server killed in
// the middle of training is replaced and the run still follows the local one. Servers started with --adapters
// apply the LoRA adapter `corolla generate --adapter` names: PEFT's greedy tokens. A batch whose requests and
// replies are above the streaming threshold crosses the processes in chunks, with the local blocks' results.
// `corolla generate --prompts` with deep prompts gives the same tokens through the servers as in one process.
#define BOOST_TEST_MODULE training_processes
#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "actors/client/client_api.hpp"
#include "actors/net/connector.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/system/system_config.hpp"
#include "model/train/local_training.hpp"
#include "model/train/span_training.hpp"
#include "model/weights/safetensors_file.hpp"
#include "support/golden.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

using namespace corolla;
using namespace corolla::test;

namespace {

// The tiny task: always continue with one fixed phrase of the tiny model's token ids.
const std::vector<int32_t> kPhrase = {17, 42, 99, 7, 150, 33, 61, 88, 5, 120};

std::string write_task(const TempDir& dir) {
  const std::string path = dir.str() + "/phrase.jsonl";
  std::ofstream out(path);
  for (int i = 0; i < 8; ++i) {
    out << "{\"ids\": [";
    for (size_t j = 0; j < kPhrase.size(); ++j) out << (j ? ", " : "") << kPhrase[j];
    out << "]}\n";
  }
  return path;
}

TrainingBatch phrase_batch() {
  std::vector<TrainingExample> ex(4);
  for (auto& e : ex) e.ids = kPhrase;
  ex[1].ids.resize(7);  // one shorter sequence: padding is exercised
  return make_batch(ex, 0);
}

std::unique_ptr<ServerProcess> server(const TempDir& dir, const std::string& span, const std::string& name) {
  return std::make_unique<ServerProcess>(std::vector<std::string>{"--model", model_dir("llama"), "--block_indices",
                                                                  span, "--port", "0", "--threads", "1", "--data_dir",
                                                                  dir.str() + "/" + name});
}

// Every line a process prints until it exits.
std::vector<std::string> all_lines(ChildProcess& p) {
  std::vector<std::string> lines;
  try {
    for (;;) lines.push_back(p.read_line(std::chrono::seconds(120)));
  } catch (const std::runtime_error&) {
  }
  return lines;
}

// A client that asks these servers directly (no DHT).
swarm_client_options client_options(std::vector<std::string> peers, route_mode mode, caf::timespan timeout) {
  swarm_client_options o;
  o.initial_peers = std::move(peers);
  o.mode = mode;
  o.request_timeout = timeout;
  return o;
}

template <class T>
std::string why(const caf::expected<T>& r) {
  return r ? std::string() : describe(r.error());
}

// A client in this process with a training session over the given servers, and the local reference.
struct training_client {
  corolla_config cfg;
  // Declared before the actor system, so destroyed after it: its actors use this until they stop.
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  std::shared_ptr<WeightSource> source = open_weights(model_dir("llama"));
  std::shared_ptr<ClientHead> head = std::make_shared<ClientHead>(*source, *backend);
  std::vector<caf::actor> owned;
  training_session_actor session;

  explicit training_client(std::vector<std::string> addresses, open_training_request req = {},
                           stream_limits streams = {}) {
    auto o = client_options(addresses, route_mode::relay, std::chrono::seconds(20));
    o.streams = streams;
    auto client = spawn_swarm_client(sys, o, head);
    owned.push_back(caf::actor_cast<caf::actor>(client));
    self->request(client, caf::infinite, req)
        .receive([&](training_session_actor s) { session = s; },
                 [&](caf::error& e) { BOOST_FAIL("open: " << describe(e)); });
    owned.push_back(caf::actor_cast<caf::actor>(session));
  }
  ~training_client() {
    for (auto& a : owned) self->send_exit(a, caf::exit_reason::user_shutdown);
  }
  trainer_actor trainer(const TuningOptions& opt) {
    auto t = spawn_trainer(sys, head, session, opt);
    owned.push_back(caf::actor_cast<caf::actor>(t));
    return t;
  }
  template <class Reply, class Handle, class Request>
  caf::expected<Reply> ask(const Handle& dest, Request req) {
    caf::expected<Reply> out = caf::error{};
    self->request(dest, std::chrono::seconds(60), std::move(req))
        .receive([&](Reply& r) { out = std::move(r); }, [&](caf::error& e) { out = std::move(e); });
    return out;
  }
  std::vector<std::string> routes() {
    auto r = ask<std::vector<std::string>>(session, route_atom::value);
    return r ? *r : std::vector<std::string>{};
  }
};

TuningOptions deep_options() {
  TuningOptions opt = tuning_options(TuningMode::deep_ptune, 4);
  opt.adam.lr = 0.05f;
  return opt;
}

}  // namespace

BOOST_AUTO_TEST_CASE(finetune_through_two_servers_learns_the_phrase_and_generate_uses_it) {
  TempDir dir;
  auto a = server(dir, "0:2", "a");
  auto b = server(dir, "2:4", "b");
  const std::string data = write_task(dir), prompts = dir.str() + "/prompts.safetensors";
  ChildProcess finetune(std::string(COROLLA_BIN_DIR) + "/corolla", {"finetune",
                                                                    "--model",
                                                                    model_dir("llama"),
                                                                    "--initial_peers",
                                                                    a->address() + "," + b->address(),
                                                                    "--data",
                                                                    data,
                                                                    "--mode",
                                                                    "ptune",
                                                                    "--pre_seq_len",
                                                                    "8",
                                                                    "--steps",
                                                                    "50",
                                                                    "--lr",
                                                                    "0.1",
                                                                    "--batch_size",
                                                                    "4",
                                                                    "--threads",
                                                                    "1",
                                                                    "--out",
                                                                    prompts});
  std::vector<double> losses;
  for (const auto& line : all_lines(finetune)) {
    std::istringstream in(line);
    std::string word, loss_word;
    int64_t step = 0;
    double loss = 0;
    if (in >> word >> step >> loss_word >> loss && word == "step" && loss_word == "loss") losses.push_back(loss);
  }
  BOOST_TEST(finetune.stop() == 0);
  BOOST_REQUIRE_EQUAL(losses.size(), 50u);
  BOOST_TEST(losses.back() < losses.front() / 2, "loss " << losses.front() << " -> " << losses.back());

  // With the trained prompts first, the model continues the phrase from its first token: in this process and
  // through the swarm.
  const std::vector<int32_t> want(kPhrase.begin() + 1, kPhrase.end());
  for (bool swarm : {false, true}) {
    std::vector<std::string> args = {"generate",         "--model", model_dir("llama"), "--prompt-ids", "17",
                                     "--max-new-tokens", "9",       "--ignore-eos",     "--prompts",    prompts};
    if (swarm) args.insert(args.end(), {"--initial_peers", a->address() + "," + b->address()});
    ChildProcess generate(std::string(COROLLA_BIN_DIR) + "/corolla", args);
    const std::string line = generate.read_line();
    std::vector<int32_t> got;
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) got.push_back(id);
    BOOST_TEST(got == want, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(training_through_two_server_processes_follows_the_local_run) {
  TempDir dir;
  auto a = server(dir, "0:2", "a");
  auto b = server(dir, "2:4", "b");
  training_client c({a->address(), b->address()});
  auto remote = c.trainer(deep_options());
  PromptTuning local(c.head, deep_options());
  LocalBlocks blocks(*c.source, *c.backend);
  const TrainingBatch batch = phrase_batch();
  for (int step = 0; step < 10; ++step) {
    auto r = c.ask<train_step_result>(remote, train_step{batch});
    BOOST_REQUIRE_MESSAGE(r, why(r));
    const double want = local_train_step(local, blocks, batch);
    BOOST_TEST(std::fabs(r->loss - want) < 1e-5, "step " << step << ": " << r->loss << " vs " << want);
  }
  auto params = c.ask<trained_parameters>(remote, params_atom::value);
  BOOST_REQUIRE(params);
  for (auto& [name, value] : params->tensors)
    for (auto& [lname, lvalue] : local.parameters())
      if (name == lname) BOOST_TEST(max_abs_diff(value, lvalue) < 1e-5f, name);
}

BOOST_AUTO_TEST_CASE(a_server_killed_mid_training_is_replaced) {
  TempDir dir;
  std::vector<std::unique_ptr<ServerProcess>> servers;
  servers.push_back(server(dir, "0:2", "a"));
  for (const char* name : {"b", "c", "d"}) servers.push_back(server(dir, "2:4", name));
  std::vector<std::string> addresses;
  for (auto& s : servers) addresses.push_back(s->address());
  training_client c(addresses);
  auto remote = c.trainer(deep_options());
  PromptTuning local(c.head, deep_options());
  LocalBlocks blocks(*c.source, *c.backend);
  const TrainingBatch batch = phrase_batch();
  auto step = [&](int i) {
    auto r = c.ask<train_step_result>(remote, train_step{batch});
    BOOST_REQUIRE_MESSAGE(r, "step " << i << ": " << why(r));
    const double want = local_train_step(local, blocks, batch);
    BOOST_TEST(std::fabs(r->loss - want) < 1e-5, "step " << i << ": " << r->loss << " vs " << want);
  };
  // The server of blocks 2..3 that the latest route used.
  auto serving_tail = [&]() -> ServerProcess* {
    auto routes = c.routes();
    BOOST_REQUIRE_EQUAL(routes.size(), 1u);
    for (size_t i = 1; i < servers.size(); ++i)
      if (routes[0].find(servers[i]->address()) != std::string::npos) return servers[i].get();
    BOOST_FAIL("no server of blocks 2..3 in the route " << routes[0]);
    return nullptr;
  };

  // Killed between two steps.
  for (int i = 0; i < 3; ++i) step(i);
  ServerProcess* first_victim = serving_tail();
  first_victim->process().kill_hard();
  for (int i = 3; i < 6; ++i) step(i);
  ServerProcess* replacement = serving_tail();
  BOOST_TEST(replacement != first_victim);

  // Killed between a forward and its backward: the replacement recomputes that span's forward first.
  const BlockInputs in = local.inputs(batch);
  auto fwd = c.ask<blocks_forward_result>(c.session, blocks_forward{in.hidden, in.positions, in.prompts});
  BOOST_REQUIRE_MESSAGE(fwd, why(fwd));
  serving_tail()->process().kill_hard();
  const Tensor grad = local.loss(batch, fwd->hidden).grad;
  auto back = c.ask<blocks_backward_result>(c.session, blocks_backward{fwd->pass, grad});
  BOOST_REQUIRE_MESSAGE(back, why(back));
  ServerProcess* last = serving_tail();
  BOOST_TEST((last != first_victim && last != replacement));
  SpanGradients want = span_backward(blocks.blocks(), in.hidden, grad, in.positions, in.prompts, *c.backend);
  BOOST_TEST(max_abs_diff(back->grad_input, want.grad_in) < 1e-5f);
  BOOST_TEST(max_abs_diff(back->grad_prompts, want.grad_prompts) < 1e-5f);
}

BOOST_AUTO_TEST_CASE(generate_with_an_adapter_through_server_processes) {
  TempDir dir;
  const std::string adapters = model_dir("llama") + "/adapters/";
  ServerProcess a({"--model", model_dir("llama"), "--block_indices", "0:2", "--port", "0", "--threads", "1",
                   "--data_dir", dir.str() + "/a", "--adapters", adapters + "lora-attn", adapters + "lora-mlp"});
  ServerProcess b({"--model", model_dir("llama"), "--block_indices", "2:4", "--port", "0", "--threads", "1",
                   "--data_dir", dir.str() + "/b", "--adapters", adapters + "lora-mlp/"});
  auto golden = SafetensorsFile::open(adapters + "lora-mlp/golden.safetensors");
  std::string prompt, want;
  for (int64_t i = 0; i < golden->tensor("input_ids").numel(); ++i)
    prompt += (i ? "," : "") + std::to_string(golden->tensor("input_ids").data_as<const int64_t>()[i]);
  for (int64_t i = 0; i < golden->tensor("greedy_ids").numel(); ++i)
    want += (i ? " " : "") + std::to_string(golden->tensor("greedy_ids").data_as<const int64_t>()[i]);
  auto generate = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"generate",         "--model", model_dir("llama"), "--prompt-ids", prompt,
                                     "--max-new-tokens", "16",      "--ignore-eos",     "--threads",    "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    ChildProcess p(std::string(COROLLA_BIN_DIR) + "/corolla", args);
    auto lines = all_lines(p);
    p.stop();
    return lines.empty() ? std::string() : lines.front();
  };
  BOOST_TEST(generate({"--adapter", "lora-mlp", "--initial_peers", a.address() + "," + b.address()}) == want);
  BOOST_TEST(generate({"--adapter", adapters + "lora-mlp"}) == want);  // in this process
  // lora-attn is on the first server only: no route, and the command says why.
  BOOST_TEST(generate({"--adapter", "lora-attn", "--initial_peers", a.address() + "," + b.address()}).empty());
}

BOOST_AUTO_TEST_CASE(a_large_batch_streams_between_processes_with_the_local_results) {
  TempDir dir;
  auto a = server(dir, "0:2", "a");
  auto b = server(dir, "2:4", "b");
  // 108 sequences of 160 tokens: 4.2 MiB of hidden states, above the 4 MiB threshold, in one request per server
  // (the forward, its reply, the backward with the gradient, its reply: all stream).
  const int64_t batch = 108, tokens = 160, p = 4;
  Tensor hidden = Tensor::empty(DType::f32, {batch, tokens, 64});
  Tensor prompts = Tensor::empty(DType::f32, {4, batch, p, 64});
  for (int64_t i = 0; i < hidden.numel(); ++i) hidden.data_as<float>()[i] = 0.1f * std::sin(0.37f * i);
  for (int64_t i = 0; i < prompts.numel(); ++i) prompts.data_as<float>()[i] = 0.05f * std::cos(0.11f * i);
  BOOST_REQUIRE(static_cast<size_t>(hidden.nbytes()) > kStreamThreshold);
  std::vector<int32_t> positions(static_cast<size_t>(batch * tokens));
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i % tokens);
  const open_training_request whole_batches{"", batch * tokens};

  training_client c({a->address(), b->address()}, whole_batches);
  auto fwd = c.ask<blocks_forward_result>(c.session, blocks_forward{hidden, positions, prompts});
  BOOST_REQUIRE_MESSAGE(fwd, why(fwd));
  Tensor grad = Tensor::empty(DType::f32, hidden.shape());
  for (int64_t i = 0; i < grad.numel(); ++i) grad.data_as<float>()[i] = 1e-3f * std::sin(0.21f * i);
  auto back = c.ask<blocks_backward_result>(c.session, blocks_backward{fwd->pass, grad});
  BOOST_REQUIRE_MESSAGE(back, why(back));
  LocalBlocks blocks(*c.source, *c.backend);
  BOOST_TEST(max_abs_diff(fwd->hidden, span_forward(blocks.blocks(), hidden, positions, prompts, *c.backend)) < 1e-5f);
  SpanGradients want = span_backward(blocks.blocks(), hidden, grad, positions, prompts, *c.backend);
  BOOST_TEST(max_abs_diff(back->grad_input, want.grad_in) < 1e-5f);
  BOOST_TEST(max_abs_diff(back->grad_prompts, want.grad_prompts) < 1e-5f);

  // The servers' replies did stream: a client that reassembles no message above 4 MiB refuses them by name.
  stream_limits strict;
  strict.max_message_bytes = size_t{4} << 20;
  training_client d({a->address(), b->address()}, whole_batches, strict);
  auto refused = d.ask<blocks_forward_result>(d.session, blocks_forward{hidden, positions, Tensor()});
  BOOST_REQUIRE(!refused);
  BOOST_TEST(why(refused).find("above the largest message accepted (4 MiB)") != std::string::npos, why(refused));
}

BOOST_AUTO_TEST_CASE(generate_with_deep_prompts_through_server_processes_equals_the_local_run) {
  TempDir dir;
  auto a = server(dir, "0:2", "a");
  auto b = server(dir, "2:4", "b");
  // Deep prompts as `corolla finetune --mode deep_ptune --pre_seq_len 3` saves them (random values).
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 1.f);
  Tensor prompts = Tensor::empty(DType::f32, {3, 64}), deep = Tensor::empty(DType::f32, {4, 3, 64});
  for (Tensor* t : {&prompts, &deep})
    for (int64_t i = 0; i < t->numel(); ++i) t->data_as<float>()[i] = normal(rng);
  const std::string file = dir.str() + "/deep.safetensors";
  write_safetensors(file, {{"prompts", prompts}, {"deep_prompts", deep}});
  auto generate = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"generate",         "--model", model_dir("llama"), "--prompt-ids", "17,42,99",
                                     "--max-new-tokens", "12",      "--ignore-eos",     "--threads",    "1",
                                     "--prompts",        file};
    args.insert(args.end(), extra.begin(), extra.end());
    ChildProcess p(std::string(COROLLA_BIN_DIR) + "/corolla", args);
    auto lines = all_lines(p);
    BOOST_TEST(p.stop() == 0);
    return lines.empty() ? std::string() : lines.front();
  };
  const std::string local = generate({});
  BOOST_TEST(!local.empty());
  for (const char* mode : {"push", "relay"})
    BOOST_TEST(generate({"--initial_peers", a->address() + "," + b->address(), "--mode", mode}) == local, mode);
}
