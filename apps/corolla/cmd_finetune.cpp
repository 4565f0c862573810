// corolla finetune: prompt tuning (ptune / deep_ptune) with the blocks in this process or on a swarm
// (--initial_peers). Prints one progress line per step, saves the trained tensors for `corolla generate --prompts`.
#include <caf/all.hpp>
#include <iostream>
#include <numeric>

#include "actors/client/client_api.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/net/peer_tls.hpp"
#include "actors/system/system_config.hpp"
#include "apps/corolla/cli_inputs.hpp"
#include "apps/corolla/commands.hpp"
#include "apps/corolla/node_flags.hpp"
#include "apps/corolla/stop_waiting_on_error.hpp"
#include "model/hub/fetch_model.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace corolla::cli {
namespace {

struct FinetuneOptions {
  std::string model;
  std::vector<std::string> initial_peers;
  std::string swarm_id;
  std::string data;
  std::string mode = "ptune";
  int64_t pre_seq_len = 16;
  int64_t steps = 100;
  double lr = 1e-2;
  int64_t batch_size = 8;
  int64_t max_length = 256;
  std::string head = "lm";
  int64_t num_labels = 2;
  bool train_head = false;
  std::string adapter;
  int64_t max_batch_tokens = 4096;
  uint64_t seed = 0;
  std::string out;
  std::string device = "cpu";
  int threads = 0;
  SwarmCredentials credentials;
};

// Batches in a fixed order: the examples shuffled once per pass over the data (seeded), taken batch_size at a time.
class BatchStream {
 public:
  BatchStream(std::vector<TrainingExample> examples, int64_t batch_size, uint64_t seed)
      : examples_(std::move(examples)), batch_size_(batch_size), rng_(seed) {
    order_.resize(examples_.size());
    std::iota(order_.begin(), order_.end(), size_t{0});
    std::shuffle(order_.begin(), order_.end(), rng_);
  }
  TrainingBatch next() {
    std::vector<TrainingExample> picked;
    for (int64_t i = 0; i < batch_size_; ++i) {
      if (at_ == order_.size()) {
        at_ = 0;
        std::shuffle(order_.begin(), order_.end(), rng_);
      }
      picked.push_back(examples_[order_[at_++]]);
    }
    return make_batch(picked, 0);
  }

 private:
  std::vector<TrainingExample> examples_;
  std::vector<size_t> order_;
  size_t at_ = 0;
  int64_t batch_size_;
  std::mt19937_64 rng_;
};

TuningOptions tuning_options(const FinetuneOptions& o) {
  TuningOptions t;
  auto mode = parse_tuning_mode(o.mode);
  if (!mode) throw std::invalid_argument("--mode: '" + o.mode + "' is not ptune or deep_ptune");
  t.mode = *mode;
  t.pre_seq_len = o.pre_seq_len;
  t.head = o.head == "classifier" ? TrainingHead::classifier : TrainingHead::lm;
  t.num_labels = o.num_labels;
  t.train_lm_head = o.train_head;
  t.adam.lr = static_cast<float>(o.lr);
  t.seed = o.seed;
  return t;
}

// The swarm's training session, or every block in this process.
block_runner_actor open_blocks(caf::actor_system& sys, caf::scoped_actor& self, const FinetuneOptions& o,
                               std::shared_ptr<WeightSource> source, std::shared_ptr<const ClientHead> head,
                               std::vector<caf::actor>& owned) {
  if (o.initial_peers.empty()) {
    if (!o.adapter.empty())
      throw std::invalid_argument("--adapter applies to a swarm's servers (give --initial_peers)");
    auto backend = std::shared_ptr<Backend>(make_backend(o.device, o.threads));
    std::cerr << "training with every block in this process on " << backend->name() << "\n";
    auto blocks = spawn_local_block_runner(sys, source, backend);
    owned.push_back(caf::actor_cast<caf::actor>(blocks));
    return blocks;
  }
  auto client = spawn_swarm_client(sys, cli_client_options(o.initial_peers, o.swarm_id, *source), std::move(head));
  owned.push_back(caf::actor_cast<caf::actor>(client));
  training_session_actor session;
  caf::error failure;
  self->request(client, caf::infinite, open_training_request{o.adapter, o.max_batch_tokens})
      .receive([&](training_session_actor s) { session = s; }, [&](caf::error& e) { failure = std::move(e); });
  if (failure) throw std::runtime_error("opening a training session: " + describe(failure));
  owned.push_back(caf::actor_cast<caf::actor>(session));
  return session;
}

int run(const FinetuneOptions& o) {
  const std::string path = hub::locate_model(
      o.model, o.initial_peers.empty() ? hub::ModelNeeds::everything() : hub::ModelNeeds::client_head());
  auto source = open_weights(path);
  std::optional<Tokenizer> tokenizer;
  try {
    tokenizer = Tokenizer::load(path);
  } catch (const std::exception&) {
    // Data given as token ids needs none; text examples then say that a tokenizer is missing.
  }
  auto examples = read_training_jsonl(o.data, tokenizer ? &*tokenizer : nullptr, o.max_length);
  const TuningOptions tuning = tuning_options(o);
  std::cerr << examples.size() << " examples from " << o.data << "; " << o.mode << " with " << o.pre_seq_len
            << " prompt tokens, " << o.steps << " steps of " << o.batch_size << " examples, lr " << o.lr << "\n";
  auto client_backend = std::shared_ptr<Backend>(make_cpu_backend(o.threads));
  auto head = std::make_shared<const ClientHead>(*source, *client_backend);

  corolla_config cfg;
  cfg.tls = PeerTls::make(o.credentials);
  caf::actor_system sys{cfg};
  stop_waiting_on_error unwinding{sys};
  caf::scoped_actor self{sys};
  std::vector<caf::actor> owned;
  int rc = 0;
  try {
    block_runner_actor blocks = open_blocks(sys, self, o, source, head, owned);
    trainer_actor trainer = spawn_trainer(sys, head, blocks, tuning);
    owned.push_back(caf::actor_cast<caf::actor>(trainer));
    BatchStream batches(std::move(examples), o.batch_size, o.seed);
    for (int64_t step = 0; step < o.steps && rc == 0; ++step) {
      self->request(trainer, caf::infinite, train_step{batches.next()})
          .receive(
              [&](const train_step_result& r) {
                std::cout << "step " << r.step << " loss " << r.loss << " tokens " << r.tokens << " tokens/s "
                          << r.tokens / r.seconds << std::endl;
              },
              [&](caf::error& e) {
                std::cerr << "error: step " << step + 1 << ": " << describe(e) << "\n";
                rc = 1;
              });
    }
    if (rc == 0 && !o.out.empty())
      self->request(trainer, caf::infinite, save_atom::value, o.out)
          .receive([&](const ack&) { std::cerr << "saved the trained tensors to " << o.out << "\n"; },
                   [&](caf::error& e) {
                     std::cerr << "error: saving " << o.out << ": " << describe(e) << "\n";
                     rc = 1;
                   });
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    rc = 1;
  }
  for (auto& a : owned) self->send_exit(a, caf::exit_reason::user_shutdown);
  return rc;
}

}  // namespace

Runner add_finetune(CLI::App& app) {
  auto o = std::make_shared<FinetuneOptions>();
  auto* cmd = app.add_subcommand("finetune", "Prompt tuning with the blocks in this process or on a swarm");
  cmd->add_option("--model", o->model, "Model directory (config.json + safetensors), .gguf file, or 'demo'")
      ->required();
  cmd->add_option("--data", o->data, "Training data: JSON Lines of {\"text\"} or {\"ids\"}, with \"label\" to classify")
      ->required();
  cmd->add_option("--initial_peers", o->initial_peers, "Train through the swarm: HOST:PORT of any server or DHT node")
      ->delimiter(',')
      ->transform(multiaddr_as_host_port());
  cmd->add_option("--swarm_id", o->swarm_id, "The swarm's DHT key prefix (default: derived from the model's name)");
  cmd->add_option("--mode", o->mode, "ptune (prompt embeddings) or deep_ptune (prompts for every block too)")
      ->check(CLI::IsMember({"ptune", "deep_ptune"}));
  cmd->add_option("--pre_seq_len", o->pre_seq_len, "Trainable prompt tokens")->check(CLI::Range(1, 4096));
  cmd->add_option("--steps", o->steps, "Training steps")->check(CLI::Range(1, 100000000));
  cmd->add_option("--lr", o->lr, "Adam learning rate")->check(CLI::PositiveNumber);
  cmd->add_option("--batch_size", o->batch_size, "Examples per step")->check(CLI::Range(1, 65536));
  cmd->add_option("--max_length", o->max_length, "Tokens kept of each example")->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--head", o->head, "lm (next-token loss) or classifier (labels)")
      ->check(CLI::IsMember({"lm", "classifier"}));
  cmd->add_option("--num_labels", o->num_labels, "Classes of the classifier head")->check(CLI::Range(2, 1 << 20));
  cmd->add_flag("--train_head", o->train_head, "Also train the LM head (an f32 copy of it)");
  cmd->add_option("--adapter", o->adapter, "LoRA adapter the servers apply (only servers holding it are used)");
  cmd->add_option("--max_batch_tokens", o->max_batch_tokens, "Tokens per request; larger batches are split")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--seed", o->seed, "Seed of the initial prompts and of the order of examples");
  cmd->add_option("--out", o->out, "Where to save the trained tensors (safetensors)");
  cmd->add_option("--device", o->device, "cpu or cuda[:N] for the blocks (without a swarm)");
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all cores)");
  add_credential_flags(*cmd, o->credentials);
  return [o, cmd] {
    o->credentials = credentials_from_flags(*cmd, o->credentials);
    return run(*o);
  };
}

}  // namespace corolla::cli
