// Training throughput: deep prompt tuning through a 3-server loopback swarm against the same training with every
// block in this process, side by side in one run.
//
// Three `corolla serve` processes host thirds of the model's blocks; the client (this process) runs a trainer
// over a training session (relay: the client sends each server its span's input). The local run uses the local
// block runner with the same number of threads. Both train the same batches (random token ids) from the same
// initial prompts; the losses of both runs are printed per step and must agree within 1e-3 (bf16 or f32 weights,
// the same kernels). Tokens/s counts the batch's tokens (not the prompts) over the wall time of the step
// (forward, loss, backward, Adam), the first step left out (warm-up).
//   bench_training --model=DIR [--steps=6 --batch=4 --tokens=128 --pre_seq_len=16 --threads=2]
#include <caf/all.hpp>
#include <chrono>
#include <cstdio>
#include <random>

#include "actors/client/client_api.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/system/system_config.hpp"
#include "bench/bench_util.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

using namespace corolla;
using namespace corolla::test;

namespace {

struct run_result {
  std::vector<double> losses, seconds;
  double tokens_per_second(int64_t tokens) const {
    double s = 0;
    for (size_t i = 1; i < seconds.size(); ++i) s += seconds[i];
    return seconds.size() > 1 ? tokens * static_cast<double>(seconds.size() - 1) / s : 0;
  }
};

run_result train(caf::scoped_actor& self, trainer_actor trainer, const std::vector<TrainingBatch>& batches) {
  run_result r;
  for (const auto& batch : batches) {
    const auto t0 = std::chrono::steady_clock::now();
    self->request(trainer, caf::infinite, train_step{batch})
        .receive([&](const train_step_result& s) { r.losses.push_back(s.loss); },
                 [&](caf::error& e) { throw std::runtime_error("training step: " + describe(e)); });
    r.seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string model = bench::arg(argc, argv, "model", "");
  if (model.empty()) {
    std::fprintf(stderr,
                 "usage: bench_training --model=DIR [--steps=6 --batch=4 --tokens=128 --pre_seq_len=16 "
                 "--threads=2]\n");
    return 2;
  }
  const int steps = std::stoi(bench::arg(argc, argv, "steps", "6"));
  const int64_t batch = std::stoll(bench::arg(argc, argv, "batch", "4"));
  const int64_t tokens = std::stoll(bench::arg(argc, argv, "tokens", "128"));
  const int64_t pre = std::stoll(bench::arg(argc, argv, "pre_seq_len", "16"));
  const std::string threads = bench::arg(argc, argv, "threads", "2");
  try {
    auto source = open_weights(model);
    const ModelConfig& c = source->config();
    std::vector<TrainingBatch> batches;
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> id(3, static_cast<int32_t>(c.vocab_size - 1));
    for (int s = 0; s < steps; ++s) {
      std::vector<TrainingExample> ex(static_cast<size_t>(batch));
      for (auto& e : ex)
        for (int64_t t = 0; t < tokens; ++t) e.ids.push_back(id(rng));
      batches.push_back(make_batch(ex, 0));
    }
    TuningOptions opt = tuning_options(TuningMode::deep_ptune, pre);
    opt.adam.lr = 1e-3f;

    // Three servers, a third of the blocks each.
    TempDir dir;
    std::vector<std::unique_ptr<ServerProcess>> servers;
    std::vector<std::string> addresses;
    const int64_t n = c.num_layers;
    for (int i = 0; i < 3; ++i) {
      const std::string span = std::to_string(n * i / 3) + ":" + std::to_string(n * (i + 1) / 3);
      servers.push_back(std::make_unique<ServerProcess>(
          std::vector<std::string>{"--model", model, "--block_indices", span, "--port", "0", "--threads", threads,
                                   "--data_dir", dir.str() + "/s" + std::to_string(i)}));
      addresses.push_back(servers.back()->address());
    }

    corolla_config cfg;
    caf::actor_system sys{cfg};
    caf::scoped_actor self{sys};
    auto client_backend = std::shared_ptr<Backend>(make_cpu_backend(std::stoi(threads)));
    auto head = std::make_shared<const ClientHead>(*source, *client_backend);
    std::vector<caf::actor> owned;
    std::shared_ptr<void> stop_all(nullptr, [&](void*) {
      for (auto& a : owned) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    });
    swarm_client_options o;
    o.initial_peers = addresses;
    o.mode = route_mode::relay;
    o.request_timeout = std::chrono::minutes(10);
    auto client = spawn_swarm_client(sys, o, head);
    owned.push_back(caf::actor_cast<caf::actor>(client));
    training_session_actor session;
    self->request(client, caf::infinite, open_training_request{"", batch * (tokens + pre)})
        .receive([&](training_session_actor s) { session = s; },
                 [&](caf::error& e) { throw std::runtime_error("open: " + describe(e)); });
    owned.push_back(caf::actor_cast<caf::actor>(session));
    auto swarm_trainer = spawn_trainer(sys, head, session, opt);
    owned.push_back(caf::actor_cast<caf::actor>(swarm_trainer));
    const run_result swarm = train(self, swarm_trainer, batches);
    for (auto& s : servers) s->process().stop();  // the local run gets the cores to itself

    auto local_blocks = spawn_local_block_runner(sys, source, client_backend);
    owned.push_back(caf::actor_cast<caf::actor>(local_blocks));
    auto local_trainer = spawn_trainer(sys, head, local_blocks, opt);
    owned.push_back(caf::actor_cast<caf::actor>(local_trainer));
    const run_result local = train(self, local_trainer, batches);

    double worst = 0;
    for (int s = 0; s < steps; ++s) {
      worst = std::max(worst, std::abs(swarm.losses[static_cast<size_t>(s)] - local.losses[static_cast<size_t>(s)]));
      std::printf("step %d: loss local %.6f swarm %.6f; seconds local %.2f swarm %.2f\n", s + 1,
                  local.losses[static_cast<size_t>(s)], swarm.losses[static_cast<size_t>(s)],
                  local.seconds[static_cast<size_t>(s)], swarm.seconds[static_cast<size_t>(s)]);
    }
    const int64_t step_tokens = batch * tokens;
    const double tl = local.tokens_per_second(step_tokens), ts = swarm.tokens_per_second(step_tokens);
    std::printf(
        "summary: %s, %lld blocks, batch %lld x %lld tokens + %lld prompts, %s threads: local %.1f tokens/s, "
        "3-server swarm %.1f tokens/s (swarm/local %.2f); largest loss difference %.2g\n",
        c.arch.c_str(), static_cast<long long>(n), static_cast<long long>(batch), static_cast<long long>(tokens),
        static_cast<long long>(pre), threads.c_str(), tl, ts, ts / tl, worst);
    return worst < 1e-3 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_training: %s\n", e.what());
    return 1;
  }
}
