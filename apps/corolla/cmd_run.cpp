// corolla run: everything in one process — a DHT node, servers splitting the model (three by default), and the
// API with the chat page — then the chat page's URL, serving until SIGINT/SIGTERM. With --prompt it prints one
// streamed answer instead and exits.
#include <caf/all.hpp>
#include <future>
#include <iostream>

#include "actors/config/config_file.hpp"
#include "actors/net/connector.hpp"
#include "actors/system/system_config.hpp"
#include "apps/api/api_server.hpp"
#include "apps/api/generation.hpp"
#include "actors/server/node_config.hpp"
#include "apps/api/local_swarm.hpp"
#include "apps/corolla/cli_inputs.hpp"
#include "apps/corolla/commands.hpp"
#include "apps/corolla/stop_waiting_on_error.hpp"
#include "apps/corolla/wait_for_signal.hpp"
#include "model/hub/fetch_model.hpp"

namespace corolla::cli {
namespace {

struct RunOptions {
  std::string model = "demo";
  std::string tokenizer;
  std::string host = "127.0.0.1";
  int port = 8080;
  int servers = 3;
  std::string prompt;
  std::string system;
  int64_t max_new_tokens = 256;
  SamplingFlags sampling;
  std::string web_dir;
  int max_sessions = 32;
  int threads = 0;
  int64_t cache_tokens = 16384;
  std::string kv_cache_dtype = "f32";
  int64_t max_batch_tokens = api::LocalSwarmOptions{}.max_batch_tokens;
  int64_t max_connections = api::ApiConfig{}.max_connections;
  int64_t max_connections_per_address = api::ApiConfig{}.max_connections_per_address;
};

// One answer, streamed to stdout.
int answer(api::Engine& engine, const RunOptions& o) {
  auto model = engine.models().front();
  std::vector<ChatMessage> messages;
  if (!o.system.empty()) messages.push_back({"system", o.system});
  messages.push_back({"user", o.prompt});
  std::vector<int32_t> prompt =
      model->chat.format() == ChatFormat::plain
          ? model->tokenizer.encode(o.prompt)
          : model->tokenizer.encode(model->chat.render(messages, true), {.add_special = false, .parse_special = true});
  const int64_t max_new = std::min<int64_t>(o.max_new_tokens, model->context - static_cast<int64_t>(prompt.size()));
  if (max_new < 1) throw std::invalid_argument("the prompt is too long for the model's context");
  api::GenerationSession session(engine, model);
  std::promise<std::string> opened;
  session.open(static_cast<int64_t>(prompt.size()) + max_new,
               [&](const api::ApiError* e) { opened.set_value(e ? e->message : ""); });
  if (auto err = opened.get_future().get(); !err.empty()) throw std::runtime_error(err);
  auto job = std::make_shared<api::GenJob>();
  job->input = prompt;
  job->sampling = o.sampling.params();
  job->max_new_tokens = max_new;
  std::promise<std::string> done;
  api::GenResult result;
  job->on_chunk = [](const std::string& text, int64_t) { std::cout << text << std::flush; };
  job->on_done = [&](const api::GenResult& r) {
    std::cout << r.last_text << std::endl;
    result = r;
    done.set_value("");
  };
  job->on_error = [&](const api::ApiError& e) { done.set_value(e.message); };
  session.run(job);
  if (auto err = done.get_future().get(); !err.empty()) throw std::runtime_error(err);
  const double decode_s = result.seconds - result.first_token_seconds;
  std::cerr << "prompt " << prompt.size() << " tokens, first token after " << result.first_token_seconds * 1e3
            << " ms; " << result.completion_tokens << " tokens in " << result.seconds << " s";
  if (result.completion_tokens > 1 && decode_s > 0)
    std::cerr << " (" << (result.completion_tokens - 1) / decode_s << " tokens/s after the first)";
  std::cerr << " through " << o.servers << " servers\n";
  session.close();
  return 0;
}

int run(const RunOptions& o) {
  block_stop_signals();
  const std::string path = hub::locate_model(o.model, hub::ModelNeeds::everything());
  if (o.prompt.empty() && o.port != 0) api::check_can_listen(o.host, static_cast<uint16_t>(o.port));
  corolla_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  stop_waiting_on_error unwinding{sys};
  auto connector = spawn_connector(sys);
  int rc = 0;
  {
    api::LocalSwarmOptions so;
    so.model = path;
    so.servers = o.servers;
    so.host = o.host;
    so.cache_tokens = o.cache_tokens;
    so.kv_dtype = parse_dtype(o.kv_cache_dtype).value();  // checked with the flag
    so.max_batch_tokens = o.max_batch_tokens;
    so.threads = o.threads;
    so.progress = [](int i, int64_t first, int64_t last) {
      std::cerr << "starting server " << i << " (blocks " << first << ":" << last << ")\n";
    };
    api::LocalSwarm swarm(sys, connector, so);
    std::cerr << "swarm '" << swarm.swarm_id() << "' online: DHT node at " << swarm.dht_address() << ", servers at ";
    for (size_t i = 0; i < swarm.server_addresses().size(); ++i)
      std::cerr << (i ? ", " : "") << swarm.server_addresses()[i];
    std::cerr << "\n";

    api::ApiConfig cfg;
    cfg.host = o.host;
    cfg.port = static_cast<uint16_t>(o.port);
    cfg.web_dir = o.web_dir;
    cfg.initial_peers = {swarm.dht_address()};
    cfg.max_sessions = o.max_sessions;
    cfg.max_connections = o.max_connections;
    cfg.max_connections_per_address = o.max_connections_per_address;
    cfg.models.push_back({o.model == "demo" ? "demo" : "", path, o.tokenizer.empty() ? "" : o.tokenizer, ""});
    if (!o.prompt.empty()) {
      auto engine = std::make_shared<api::Engine>(sys, cfg, connector);
      rc = answer(*engine, o);
    } else {
      api::ApiServer server(sys, cfg, connector);
      const uint16_t port = server.start(1);
      const std::string base = "http://" + o.host + ":" + std::to_string(port);
      std::cout << "chat page: " << base << "/\n"
                << "swarm health: " << base << "/health\n"
                << "OpenAI API: " << base << "/v1 (model \"" << server.engine().models().front()->name << "\")\n"
                << "Petals API: ws://" << o.host << ":" << port << "/api/v2/generate\n"
                << "(other nodes may join with --initial_peers " << swarm.dht_address() << "; Ctrl-C stops)"
                << std::endl;
      const int sig = wait_for_stop_signal();
      std::cerr << "received signal " << sig << ", stopping\n";
      server.stop();
    }
    swarm.stop();
  }
  caf::anon_send_exit(connector, caf::exit_reason::user_shutdown);
  return rc;
}

}  // namespace

Runner add_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand(
      "run", "Run a DHT node, servers splitting the model and the chat page/API, all in this process");
  cmd->add_option("--model", o->model, "Model directory, .gguf file, or 'demo' (default)");
  cmd->add_option("--tokenizer", o->tokenizer, "Tokenizer, when the model's files have none");
  cmd->add_option("--host", o->host, "Address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", o->port, "HTTP port of the chat page and APIs (default 8080; 0: a free one)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--servers", o->servers, "Servers to split the model's blocks between (default 3)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--prompt", o->prompt, "Print one streamed answer to this prompt and exit");
  cmd->add_option("--system", o->system, "System message for --prompt");
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Longest answer for --prompt (default 256)")
      ->check(CLI::Range(1, 1 << 20));
  add_sampling_flags(*cmd, o->sampling);
  cmd->add_option("--web_dir", o->web_dir, "Serve the pages from this directory instead of the built-in copies");
  cmd->add_option("--max_sessions", o->max_sessions, "Inference sessions the API keeps open at once (default 32)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--max_connections", o->max_connections, "HTTP and WebSocket connections open at once (default 512)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--max_connections_per_address", o->max_connections_per_address,
                  "Connections open at once from one address (default 64)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--cache_tokens", o->cache_tokens, "KV-cache tokens per block of each server (default 16384)")
      ->check(CLI::Range(64, 1 << 24));
  cmd->add_option("--kv_cache_dtype", o->kv_cache_dtype,
                  "KV caches' dtype: f32, or f16 (half the memory, values rounded to 11 bits) (default f32)")
      ->check([](const std::string& v) { return check_kv_cache_dtype(v).value_or(""); });
  cmd->add_option("--max_batch_tokens", o->max_batch_tokens,
                  "Tokens of concurrent sessions' steps each server runs as one batch; 0 runs each step alone "
                  "(default 256)")
      ->check(CLI::Range(int64_t{0}, kMaxBatchTokens));
  cmd->add_option("--threads", o->threads, "CPU threads per server (0 = all cores)");
  return [o, cmd] {
    if (cmd->count("--prompt") && o->prompt.empty()) throw std::invalid_argument("the prompt is empty");
    return run(*o);
  };
}

}  // namespace corolla::cli
