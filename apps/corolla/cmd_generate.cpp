// corolla generate: generate with a whole model in this process, or through a swarm (--initial_peers), and
// stream the new tokens (text when the prompt is text, ids when it is --prompt-ids). With --prompts-file, one
// completion per line of the file, printed as JSON lines in the file's order: through a swarm all of them at
// once (a session each, which the servers batch), in this process one after another.
#include <caf/all.hpp>
#include <chrono>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "actors/client/client_api.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/net/peer_tls.hpp"
#include "actors/system/system_config.hpp"
#include "apps/corolla/cli_inputs.hpp"
#include "apps/corolla/commands.hpp"
#include "apps/corolla/node_flags.hpp"
#include "apps/corolla/stop_waiting_on_error.hpp"
#include "model/bounded_file.hpp"
#include "model/local_model.hpp"
#include "model/lora.hpp"
#include "model/hub/fetch_model.hpp"
#include "model/tokenizer/chat_template.hpp"
#include "model/tokenizer/stream_decoder.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/train/prompt_tuning.hpp"

namespace corolla::cli {
namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt_ids;
  std::string prompt;
  std::string prompts_file;  // one text prompt per line
  std::string system;
  bool raw = false;
  int64_t max_new_tokens = 32;
  int64_t spot_check_every = spot_check_options{}.every;
  SamplingFlags sampling;
  int64_t num_beams = 1;
  double length_penalty = 1.0;
  std::string early_stopping = "false";
  std::string dtype = "auto";
  std::string device = "cpu";
  int threads = 0;
  bool ignore_eos = false;
  std::vector<std::string> initial_peers;
  std::string mode = "push";
  std::string swarm_id;
  std::string prompts;  // tuned prompts (corolla finetune --out)
  std::string adapter;  // LoRA adapter: its name on the swarm, or its directory in this process
  SwarmCredentials credentials;
};

// Prints tokens as they come: decoded text (never a broken UTF-8 sequence) or space-separated ids.
class TokenPrinter {
 public:
  explicit TokenPrinter(std::optional<Tokenizer> tokenizer) {
    if (tokenizer) decoder_.emplace(std::move(*tokenizer));
  }
  void print(int32_t id) {
    std::lock_guard lock(mutex_);
    last_ = std::chrono::steady_clock::now();
    if (count_ == 0) first_ = last_;
    if (decoder_)
      std::cout << decoder_->push(id);
    else
      std::cout << (count_ ? " " : "") << id;
    ++count_;
    std::cout << std::flush;
  }
  void finish() {
    if (decoder_) std::cout << decoder_->flush();
    std::cout << std::endl;
  }
  size_t count() const { return count_; }
  // When the first and the last token were printed.
  std::chrono::steady_clock::time_point first() const { return first_; }
  std::chrono::steady_clock::time_point last() const { return last_; }

 private:
  std::chrono::steady_clock::time_point first_, last_;
  std::mutex mutex_;
  std::optional<StreamDecoder> decoder_;
  size_t count_ = 0;
};

GenerationParams generation_params(const GenerateOptions& o) {
  GenerationParams params;
  params.max_new_tokens = o.max_new_tokens;
  params.stop_at_eos = !o.ignore_eos;
  params.sampling = o.sampling.params();
  params.num_beams = o.num_beams;
  params.length_penalty = o.length_penalty;
  params.early_stopping = o.early_stopping == "true"    ? EarlyStopping::on_full
                          : o.early_stopping == "never" ? EarlyStopping::never
                                                        : EarlyStopping::heuristic;
  return params;
}

// A text prompt's ids: in the model's chat template unless --raw.
std::vector<int32_t> encode_prompt(const GenerateOptions& o, const Tokenizer& tokenizer, const std::string& text) {
  const ChatTemplate chat = ChatTemplate::for_tokenizer(tokenizer);
  if (o.raw || chat.format() == ChatFormat::plain) return tokenizer.encode(text);
  std::vector<ChatMessage> messages;
  if (!o.system.empty()) messages.push_back({"system", o.system});
  messages.push_back({"user", text});
  return tokenizer.encode(chat.render(messages, true), {.add_special = false, .parse_special = true});
}

// The prompt's ids, and the tokenizer when the prompt is text (to print text back).
std::vector<int32_t> prompt_ids(const GenerateOptions& o, const std::string& model_path,
                                std::optional<Tokenizer>& tokenizer) {
  if (!o.prompt_ids.empty()) {
    auto ids = parse_id_list(o.prompt_ids, "--prompt-ids");
    if (ids.empty()) throw std::invalid_argument("--prompt-ids: no token ids given");
    return ids;
  }
  tokenizer = Tokenizer::load(model_path);
  return encode_prompt(o, *tokenizer, o.prompt);
}

// The lines of --prompts-file that hold something, each a text prompt.
constexpr size_t kMaxPromptsFileBytes = size_t{64} << 20;
constexpr size_t kMaxPrompts = 4096;
std::vector<std::string> read_prompts_file(const std::string& path) {
  std::stringstream in(read_bounded_file(path, kMaxPromptsFileBytes, "--prompts-file"));
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (prompts.size() == kMaxPrompts)
      throw std::invalid_argument("--prompts-file: more than " + std::to_string(kMaxPrompts) + " prompts");
    prompts.push_back(line);
  }
  if (prompts.empty()) throw std::invalid_argument("--prompts-file " + path + ": no prompts (one per line)");
  return prompts;
}

// What to generate after: one prompt (ids, or text through the tokenizer), or every line of --prompts-file.
struct Prompts {
  std::optional<Tokenizer> tokenizer;  // when the prompts are text (to print text back)
  std::vector<std::string> many;       // --prompts-file's lines; empty: one prompt
  std::vector<int32_t> prompt;         // the one prompt's ids
};
Prompts read_prompts(const GenerateOptions& o, const std::string& path) {
  Prompts p;
  if (!o.prompts_file.empty()) p.many = read_prompts_file(o.prompts_file);
  if (!p.many.empty())
    p.tokenizer = Tokenizer::load(path);
  else
    p.prompt = prompt_ids(o, path, p.tokenizer);
  return p;
}

// One completion of a prompts file as a JSON line (special tokens such as the end of the turn left out).
void print_completion(size_t index, const Tokenizer& tokenizer, const std::vector<int32_t>& tokens) {
  const nlohmann::json line = {{"index", index}, {"text", tokenizer.decode(tokens, true)}, {"tokens", tokens.size()}};
  std::cout << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n" << std::flush;
}

// (A beam search prints its tokens when it ends: no prompt and decode times of their own to tell apart.)
void report(size_t prompt_len, size_t n, double first_s, double total_s, int64_t beams = 1) {
  if (beams > 1) {
    std::cerr << "prompt " << prompt_len << " tokens; best of " << beams << " beams: " << n << " tokens, searched in "
              << total_s << " s\n";
    return;
  }
  std::cerr << "prompt " << prompt_len << " tokens in " << first_s * 1e3 << " ms; " << n << " tokens generated";
  if (n > 1) std::cerr << ", " << (n - 1) / (total_s - first_s) << " tokens/s";
  std::cerr << "\n";
}

int run_local(const GenerateOptions& o, const std::string& path) {
  std::optional<DType> dtype;
  if (o.dtype != "auto") {
    dtype = parse_dtype(o.dtype);
    if (!dtype) throw std::invalid_argument("--dtype: unknown dtype '" + o.dtype + "'");
  }
  auto [tokenizer, many, prompt] = read_prompts(o, path);
  const auto params = generation_params(o);
  auto backend = make_backend(o.device, o.threads);
  const auto t_load = std::chrono::steady_clock::now();
  LocalModel model(open_weights(path), *backend, dtype);
  std::cerr << "loaded " << model.config().arch << " (" << model.config().num_layers << " blocks, "
            << model.weight_bytes() / 1e6 << " MB of block weights) in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count() << " s on "
            << backend->name() << "\n";
  if (!o.adapter.empty())
    model.set_adapter(LoraAdapter::load(o.adapter, model.config(), 0, model.config().num_layers, *backend));
  std::optional<TunedPrompts> tuned;
  if (!o.prompts.empty()) tuned = load_tuned_prompts(o.prompts, model.config());
  if (!many.empty()) {  // one after another: a single process has no other sessions to batch them with
    for (size_t i = 0; i < many.size(); ++i)
      print_completion(i, *tokenizer,
                       generate(
                           model, encode_prompt(o, *tokenizer, many[i]), params, [](int32_t) { return true; },
                           tuned ? &*tuned : nullptr));
    return 0;
  }
  TokenPrinter printer(std::move(tokenizer));
  const auto t0 = std::chrono::steady_clock::now();
  generate(
      model, prompt, params,
      [&](int32_t id) {
        printer.print(id);
        return true;
      },
      tuned ? &*tuned : nullptr);
  printer.finish();
  report(prompt.size(), printer.count(), std::chrono::duration<double>(printer.first() - t0).count(),
         std::chrono::duration<double>(printer.last() - t0).count(), o.num_beams);
  return 0;
}

// Every prompt of --prompts-file through the swarm at once: a session each, their generations started together
// (the servers batch their steps), the completions printed in the file's order.
int generate_many(const GenerateOptions& o, caf::scoped_actor& self, const swarm_client_actor& client,
                  const Tokenizer& tokenizer, const std::vector<std::string>& texts,
                  const std::optional<TunedPrompts>& tuned) {
  const auto params = generation_params(o);
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& text : texts) prompts.push_back(encode_prompt(o, tokenizer, text));
  std::vector<inference_session_actor> sessions;
  int rc = 0;
  for (const auto& prompt : prompts) {
    const int64_t max_length = (tuned ? tuned->length() : 0) + static_cast<int64_t>(prompt.size()) + o.max_new_tokens;
    self->request(client, caf::infinite,
                  open_session_request{max_length, o.num_beams, o.adapter, tuned ? tuned->deep_prompts : Tensor()})
        .receive([&](inference_session_actor session) { sessions.push_back(session); },
                 [&](caf::error& e) {
                   std::cerr << "error: opening session " << sessions.size() << ": " << describe(e) << "\n";
                   rc = 1;
                 });
    if (rc) break;
  }
  if (!rc) {
    using pending_t = decltype(self->request(sessions[0], caf::infinite, generate_request{}));
    std::vector<pending_t> pending;
    for (size_t i = 0; i < sessions.size(); ++i)
      pending.push_back(self->request(sessions[i], caf::infinite,
                                      generate_request{prompts[i], params, {}, tuned ? tuned->prompts : Tensor()}));
    for (size_t i = 0; i < pending.size(); ++i)
      pending[i].receive([&](const generate_result& r) { print_completion(i, tokenizer, r.tokens); },
                         [&](caf::error& e) {
                           std::cerr << "error: prompt " << i << ": " << describe(e) << "\n";
                           rc = 1;
                         });
  }
  for (const auto& s : sessions) self->send(s, close_atom::value);
  return rc;
}

int run_swarm(const GenerateOptions& o, const std::string& path) {
  auto [tokenizer, many, prompt] = read_prompts(o, path);
  const auto params = generation_params(o);
  auto source = open_weights(path);
  // The client's share of the model (embeddings, final norm, LM head) on --device: per token the LM head reads
  // vocab × hidden weights, a CPU's memory bandwidth is what a GPU server's client waits on.
  auto backend = std::shared_ptr<Backend>(make_backend(o.device, o.threads));
  auto head = std::make_shared<const ClientHead>(*source, *backend);  // only the head's tensors are read
  std::optional<TunedPrompts> tuned;
  // Deep prompts (deep_ptune) go to the servers when the session opens: each adds its blocks' share to the
  // tuned prompts' positions.
  if (!o.prompts.empty()) tuned = load_tuned_prompts(o.prompts, head->config());

  corolla_config cfg;
  cfg.tls = PeerTls::make(o.credentials);
  caf::actor_system sys{cfg};
  stop_waiting_on_error unwinding{sys};
  caf::scoped_actor self{sys};
  swarm_client_options opts = cli_client_options(o.initial_peers, o.swarm_id, *source);
  opts.mode = o.mode == "relay" ? route_mode::relay : route_mode::push;
  opts.spot_checks.every = o.spot_check_every;
  opts.spot_checks.new_servers = o.spot_check_every > 0;
  auto client = spawn_swarm_client(sys, opts, head);
  if (!many.empty()) {
    const int rc = generate_many(o, self, client, *tokenizer, many, tuned);
    self->send_exit(client, caf::exit_reason::user_shutdown);
    return rc;
  }
  TokenPrinter printer(std::move(tokenizer));
  const int64_t max_length = (tuned ? tuned->length() : 0) + static_cast<int64_t>(prompt.size()) + o.max_new_tokens;
  int rc = 0;
  self->request(client, caf::infinite,
                open_session_request{max_length, o.num_beams, o.adapter, tuned ? tuned->deep_prompts : Tensor()})
      .receive(
          [&](inference_session_actor session) {
            generate_request req{prompt, params, {}, tuned ? tuned->prompts : Tensor()};
            // Printed from the session's thread as each token is chosen; the reply comes after the last.
            req.on_token = [&](int32_t id) {
              printer.print(id);
              return true;
            };
            const auto t0 = std::chrono::steady_clock::now();
            self->request(session, caf::infinite, std::move(req))
                .receive(
                    [&](const generate_result&) {
                      printer.finish();
                      report(prompt.size(), printer.count(),
                             std::chrono::duration<double>(printer.first() - t0).count(),
                             std::chrono::duration<double>(printer.last() - t0).count(), o.num_beams);
                    },
                    [&](caf::error& e) {
                      std::cerr << "error: " << describe(e) << "\n";
                      rc = 1;
                    });
            self->send(session, close_atom::value);
          },
          [&](caf::error& e) {
            std::cerr << "error: " << describe(e) << "\n";
            rc = 1;
          });
  self->send_exit(client, caf::exit_reason::user_shutdown);
  return rc;
}

}  // namespace

Runner add_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  auto* cmd = app.add_subcommand("generate", "Generate with a model, in this process or through a swarm");
  cmd->add_option("--model", o->model, "Model directory (config.json + safetensors), .gguf file, or 'demo'")
      ->required();
  auto* ids = cmd->add_option("--prompt-ids", o->prompt_ids, "Prompt token ids, comma separated (e.g. 1,2,3)");
  auto* text = cmd->add_option("--prompt", o->prompt, "Prompt text (in the model's chat template unless --raw)");
  auto* file = cmd->add_option("--prompts-file", o->prompts_file,
                               "A text prompt per line: every completion, printed as a JSON line in the file's "
                               "order (through a swarm all at once, batched by the servers)");
  ids->excludes(text);
  file->excludes(ids)->excludes(text);
  cmd->add_flag("--raw", o->raw, "Tokenize --prompt as it is, without the chat template");
  cmd->add_option("--system", o->system, "System message for the chat template");
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Tokens to generate")->check(CLI::Range(1, 1 << 20));
  add_sampling_flags(*cmd, o->sampling);
  cmd->add_option("--num-beams", o->num_beams,
                  "Beam search over this many beams (greedy sampling only; the best hypothesis is printed at the end)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--length-penalty", o->length_penalty, "Beam search: scores divided by length^this (default 1)");
  cmd->add_option("--early-stopping", o->early_stopping,
                  "Beam search: false (stop when no beam can improve), true (when num_beams hypotheses are done), "
                  "never")
      ->check(CLI::IsMember({"false", "true", "never"}));
  cmd->add_option("--dtype", o->dtype, "Serving dtype of weights (local): auto, " + weight_dtype_list());
  cmd->add_option("--device", o->device,
                  "cpu or cuda[:N]: for the whole model (local), or for the embeddings and LM head (through a swarm)");
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all cores)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past the end-of-sequence token");
  cmd->add_option("--initial_peers", o->initial_peers,
                  "Generate through the swarm: HOST:PORT of any of its servers or DHT nodes")
      ->delimiter(',')
      ->transform(multiaddr_as_host_port());
  cmd->add_option("--mode", o->mode, "push (server to server) or relay (through the client)")
      ->check(CLI::IsMember({"push", "relay"}));
  cmd->add_option("--swarm_id", o->swarm_id, "The swarm's DHT key prefix (default: derived from the model's name)");
  cmd->add_option("--spot_check_every", o->spot_check_every,
                  "Recompute one step in this many (and the first on each new server) on another server and compare; "
                  "0: no checks (default 64)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--prompts", o->prompts, "Tuned prompts to put first (a file saved by `corolla finetune --out`)");
  cmd->add_option("--adapter", o->adapter,
                  "LoRA adapter to apply: its name on the swarm's servers (--adapters), or its directory (PEFT "
                  "format) when generating in this process");
  add_credential_flags(*cmd, o->credentials);
  return [o, cmd] {
    o->credentials = credentials_from_flags(*cmd, o->credentials);
    if (cmd->count("--prompt") && o->prompt.empty()) throw std::invalid_argument("the prompt is empty");
    if (o->prompt_ids.empty() && o->prompt.empty() && o->prompts_file.empty())
      throw std::invalid_argument("give --prompt, --prompt-ids or --prompts-file");
    const std::string path = hub::locate_model(
        o->model, o->initial_peers.empty() ? hub::ModelNeeds::everything() : hub::ModelNeeds::client_head());
    return o->initial_peers.empty() ? run_local(*o, path) : run_swarm(*o, path);
  };
}

}  // namespace corolla::cli
