// Command-line flags for nodes and clients, named after Petals' run_server where the meaning is the same. The
// configuration is resolved in layers: the defaults, then the TOML file given with --config, then only the flags
// actually given on the command line; then it is validated. A flag replaces what it conflicts with in the file:
// --num_blocks drops the file's block_indices (and back), --initial_peers drops new_swarm (and back).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/client/client_config.hpp"
#include "actors/server/node_config.hpp"

namespace corolla::cli {

// The raw flag values; CLI11 writes into them, so they must stay where they are once the flags are added.
struct NodeFlags {
  CLI::App* cmd = nullptr;  // set by add_node_flags; resolve_node_config() asks it which flags were given
  std::string config;
  std::string model;
  int num_blocks = 0;
  std::string block_indices;
  std::string host;
  int port = 0;
  std::vector<std::string> initial_peers;
  std::string public_name;
  std::string swarm_id;
  std::string dtype;
  std::string device;
  std::string data_dir;
  int64_t cache_tokens = 0;
  std::string kv_cache_dtype;
  bool new_swarm = false;
  int threads = 0;
  double step_timeout = 0;
  double session_timeout = 0;
  int max_sessions = 0;
  int64_t max_batch_tokens = 0;
  int max_sessions_per_peer = 0;
  int64_t cache_tokens_per_peer = 0;
  double peer_requests_per_second = 0;
  int64_t inject_step_errors_after = -1;
  double inject_wrong_outputs = 0;
  std::string throughput;
  double update_period = 0;
  std::vector<std::string> adapters;
  double balance_quality = 0;
  double mean_balance_check_period = 0;
  int64_t max_peer_connections = 0;
  int64_t max_peer_connections_per_address = 0;
  double peer_connections_per_second = 0;
  int64_t max_peer_frame_mb = 0;
  std::string announce_address;
  SwarmCredentials credentials;
  // Petals' run_server flags with no direct counterpart (see add_node_flags).
  std::string quant_type, max_disk_space, identity_path;
};

// The node's flags, with Petals' names for the same things too: the model as the first argument (run_server's
// form), --torch_dtype (torch's dtype names: float16, bfloat16, float32) for --dtype, --attn_cache_tokens for
// --cache_tokens, --quant_type int8 for --dtype q8_0, and Petals' multiaddresses in --initial_peers. Petals flags
// with no meaning here (--quant_type nf4, --max_disk_space, --identity_path) are refused with what to use instead.
void add_node_flags(CLI::App& cmd, NodeFlags& flags);

// For --initial_peers options: Petals' multiaddresses (/ip4/HOST/tcp/PORT/p2p/ID) taken as HOST:PORT, with a note on
// stderr; other values pass unchanged to the HOST:PORT check.
CLI::Validator multiaddr_as_host_port();

// --tls, --swarm_authority, --certificate, --private_key (actors/config/swarm_credentials.hpp), for every command
// that joins a swarm.
void add_credential_flags(CLI::App& cmd, SwarmCredentials& flags);
// The credential flags given on `cmd` over `c` (a private swarm's three files replace the file's together).
void apply_credential_flags(const CLI::App& cmd, const SwarmCredentials& flags, SwarmCredentials& c);
// apply_credential_flags over nothing, checked: what a command without a config file uses. Throws ConfigError.
SwarmCredentials credentials_from_flags(const CLI::App& cmd, const SwarmCredentials& flags);
// Throws ConfigError (from the file, or when the result is not a usable configuration).
NodeConfig resolve_node_config(const NodeFlags& flags);

struct ClientFlags {
  CLI::App* cmd = nullptr;
  std::string config;
  std::string model;
  std::vector<std::string> initial_peers;
  std::string mode;
  int64_t max_length = 0;
  double request_timeout = 0;
};

void add_client_flags(CLI::App& cmd, ClientFlags& flags);
// Throws ConfigError.
ClientConfig resolve_client_config(const ClientFlags& flags);

}  // namespace corolla::cli
