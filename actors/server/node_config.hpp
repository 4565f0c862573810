// The configuration of a server node: what it serves, where it listens, whom it joins, and its limits. Read from
// a TOML file (config/node.toml documents every key), then overridden by command-line flags
// (apps/corolla/node_flags.hpp). Key and flag names follow Petals' run_server where the meaning is the same.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/config/config_error.hpp"
#include "actors/config/swarm_credentials.hpp"

namespace corolla {

// The largest batch budget accepted (a batch's hidden states are this many rows of the hidden size).
constexpr int64_t kMaxBatchTokens = 1 << 20;

// Blocks [first, last) of a model, written "first:last" in files and flags.
struct BlockRange {
  int first = 0;
  int last = 0;
  bool operator==(const BlockRange&) const = default;
};

struct NodeConfig {
  std::string model;                        // model directory, .gguf file, or "demo"; required
  std::optional<int> num_blocks;            // serve this many blocks, chosen where the swarm needs them
  std::optional<BlockRange> block_indices;  // serve exactly these blocks (excludes num_blocks)
  // Neither: the node picks as many blocks as its memory allows, where the swarm needs them.
  std::string host = "127.0.0.1";          // address to listen on
  uint16_t port = 0;                       // port to listen on; 0 picks a free one
  std::string announce_address;            // "HOST:PORT" peers dial to reach this node (behind NAT, or when
                                           // host is 0.0.0.0); empty: host and the port listened on
  std::vector<std::string> initial_peers;  // "HOST:PORT" of nodes already in the swarm
  std::string swarm_id;                    // DHT key prefix of the swarm; "" = derived from the model's name
  std::string public_name;                 // name shown to other peers; also names the default data_dir
  // auto or one of weight_dtypes() (kernels/dtype.hpp)
  std::string dtype = "auto";
  std::string device = "cpu";          // cpu | cuda | cuda:N
  std::string data_dir;                // empty: node_data_dir() gives the default
  int64_t cache_tokens = 8192;         // KV-cache tokens per hosted block
  std::string kv_cache_dtype = "f32";  // the KV caches' dtype: f32, or f16 (half the memory; CPU backend)
  bool new_swarm = false;              // start a new swarm (excludes initial_peers)
  int threads = 0;                     // CPU threads; 0 = all cores
  double step_timeout_s = 30;          // longest wait for the next step of an inference session
  double session_timeout_s = 300;      // longest life of an inference session
  int max_sessions = 64;               // concurrent inference sessions
  int64_t max_batch_tokens = 256;      // tokens of sessions' steps run through the blocks at once; 0: no batching
  // What one remote peer (a client or server process) may hold and send (actors/server/peer_quotas.hpp).
  std::optional<int> max_sessions_per_peer;      // not set: half of max_sessions (at least 1)
  std::optional<int64_t> cache_tokens_per_peer;  // per hosted block; not set: half of cache_tokens (at least 1)
  double peer_requests_per_second = 1000;        // opens, steps, forwards, backwards (a one-second burst)
  int64_t inject_step_errors_after = -1;         // chaos testing: fail every step after this many (-1: never)
  double inject_wrong_outputs = 0;               // chaos testing: make this fraction of step outputs wrong (0..1)
  std::string throughput = "auto";               // "auto" (measure, cached), "eval" (measure again) or a number (rps)
  double update_period_s = 60;                   // how often the node announces its blocks to the DHT
  std::vector<std::string> adapters;         // PEFT LoRA adapter directories; requests name one by its directory name
  double balance_quality = 0.75;             // with num_blocks: move when the swarm's weakest block is below this
                                             // fraction of what moving could reach (0 never moves)
  double mean_balance_check_period_s = 120;  // with num_blocks: mean seconds between those checks
  // What peers get before they prove anything (peer_limits.hpp; the rest of those limits are fixed).
  int64_t max_peer_connections = 512;             // open peer connections, both directions
  int64_t max_peer_connections_per_address = 64;  // from one remote IP address
  double peer_connections_per_second = 20;        // new connections accepted from one remote IP address
  int64_t max_peer_frame_mb = 64;                 // one message from a peer (an activation), in MiB
  SwarmCredentials credentials;                   // TLS and a private swarm's certificate (swarm_credentials.hpp)

  bool operator==(const NodeConfig&) const = default;
};

// The directory for this node's database: data_dir with a leading "~" expanded, or, when data_dir is empty,
// ${COROLLA_CACHE:-~/.cache/corolla}/node-<public_name or "default"> (characters other than letters, digits,
// '.', '_' and '-' in the name become '_'); serve opens the default with open_node_store, which moves on to the
// next free one when another node holds it.
std::string node_data_dir(const NodeConfig& config);

// Reads a node's TOML file over the defaults. Every key is checked as it is read, and unknown keys are errors;
// the messages name the file, the line and the key (see actors/config/config_file.hpp). 'model' may be absent
// here (a flag can give it); validate() requires it. Throws ConfigError.
NodeConfig load_node_config(const std::string& toml_path);
// The same for a file's text already in memory; `source` names it in messages.
NodeConfig load_node_config_text(std::string_view text, const std::string& source);

// Checks a whole configuration (after flags have been applied, for instance): every value, the keys that
// exclude each other, and that a model is given. Messages start with "SOURCE: ". Throws ConfigError.
void validate(const NodeConfig& config, const std::string& source);

// The configuration as a TOML document that load_node_config() reads back to the same values; data_dir is
// written resolved (node_data_dir). `table` is "" for top-level keys, or a header such as "[[server]]".
std::string to_toml(const NodeConfig& config, const std::string& table = "");

// The peer gateway's limits a node's configuration sets.
struct peer_limits;
peer_limits peer_limits_of(const NodeConfig& config);
// The per-peer quotas it sets, with the defaults of the keys not set resolved.
struct peer_quota_options;
peer_quota_options peer_quota_of(const NodeConfig& config);

}  // namespace corolla
