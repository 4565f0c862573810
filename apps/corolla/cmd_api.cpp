// corolla api: the HTTP and WebSocket front of a swarm (chat page, chat.petals.dev- and OpenAI-compatible APIs,
// health page, metrics) until SIGINT/SIGTERM. config/api.toml documents the configuration file.
#include <caf/all.hpp>
#include <iostream>

#include "actors/net/connector.hpp"
#include "actors/net/peer_tls.hpp"
#include "actors/system/system_config.hpp"
#include "apps/api/api_server.hpp"
#include "apps/corolla/commands.hpp"
#include "apps/corolla/node_flags.hpp"
#include "apps/corolla/stop_waiting_on_error.hpp"
#include "apps/corolla/wait_for_signal.hpp"

namespace corolla::cli {
namespace {

struct ApiFlags {
  std::string config;
  std::string host;
  int port = -1;
  std::vector<std::string> initial_peers;
  std::string web_dir;
  int threads = 1;
  int64_t max_connections = 0, max_connections_per_address = 0;
  SwarmCredentials credentials;
};

int run(const ApiFlags& f, CLI::App* cmd) {
  api::ApiConfig cfg = api::load_api_config(f.config);
  if (cmd->count("--host")) cfg.host = f.host;
  if (cmd->count("--port")) cfg.port = static_cast<uint16_t>(f.port);
  if (cmd->count("--initial_peers")) cfg.initial_peers = f.initial_peers;
  if (cmd->count("--web_dir")) cfg.web_dir = f.web_dir;
  if (cmd->count("--max_connections")) cfg.max_connections = f.max_connections;
  if (cmd->count("--max_connections_per_address")) cfg.max_connections_per_address = f.max_connections_per_address;
  apply_credential_flags(*cmd, f.credentials, cfg.credentials);
  api::validate(cfg, f.config);
  block_stop_signals();
  corolla_config sys_cfg;
  sys_cfg.tls = PeerTls::make(cfg.credentials);
  caf::actor_system sys{sys_cfg};
  stop_waiting_on_error unwinding{sys};
  auto connector = spawn_connector(sys);
  int rc = 0;
  {
    api::ApiServer server(sys, cfg, connector);
    const uint16_t port = server.start(f.threads);
    const std::string base = "http://" + cfg.host + ":" + std::to_string(port);
    std::cout << "api at " << base << "/ (chat page), " << base << "/v1 (OpenAI), " << base
              << "/api/v2/generate (Petals WebSocket), " << base << "/health" << std::endl;
    const int sig = wait_for_stop_signal();
    std::cerr << "received signal " << sig << ", stopping\n";
    server.stop();
  }
  caf::anon_send_exit(connector, caf::exit_reason::user_shutdown);
  return rc;
}

}  // namespace

Runner add_api(CLI::App& app) {
  auto f = std::make_shared<ApiFlags>();
  auto* cmd = app.add_subcommand("api", "Serve the chat page and the Petals- and OpenAI-compatible APIs for a swarm");
  cmd->add_option("--config", f->config, "API configuration (TOML; config/api.toml documents every key)")->required();
  cmd->add_option("--host", f->host, "Address to listen on (overrides the file)");
  cmd->add_option("--port", f->port, "Port to listen on, 0 for a free one (overrides the file)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--initial_peers", f->initial_peers, "HOST:PORT of DHT nodes or servers (overrides the file)")
      ->delimiter(',')
      ->transform(multiaddr_as_host_port());
  cmd->add_option("--web_dir", f->web_dir, "Serve the pages from this directory instead of the built-in copies");
  cmd->add_option("--threads", f->threads, "HTTP I/O threads")->check(CLI::Range(1, 64));
  cmd->add_option("--max_connections", f->max_connections, "Connections open at once (overrides the file)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--max_connections_per_address", f->max_connections_per_address,
                  "Connections open at once from one address (overrides the file)")
      ->check(CLI::Range(1, 1000000));
  add_credential_flags(*cmd, f->credentials);
  return [f, cmd] { return run(*f, cmd); };
}

}  // namespace corolla::cli
