// The configuration of `corolla api`: where the HTTP server listens, which swarm it joins, the models it offers
// and its limits. Read from a TOML file (config/api.toml documents every key); `corolla run` builds one in code.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "actors/config/config_error.hpp"
#include "actors/config/swarm_credentials.hpp"

namespace corolla::api {

struct ApiModelConfig {
  std::string name;       // what clients ask for: OpenAI "model", Petals "model"; default: the swarm id
  std::string path;       // weights for the client's head (embeddings, LM head): directory, .gguf or "demo"
  std::string tokenizer;  // tokenizer (GGUF, HF directory or tokenizer.json); default: `path`
  std::string swarm_id;   // the swarm's DHT key prefix; default: derived from the model, as servers do
  bool operator==(const ApiModelConfig&) const = default;
};

struct ApiConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;                      // 0: a free port
  std::string web_dir;                       // serve the pages from here; empty: the copies built into corolla
  std::vector<std::string> initial_peers;    // HOST:PORT of DHT nodes or servers of the swarm; at least one
  std::string mode = "push";                 // push | relay (see config/client.toml)
  double request_timeout_s = 30;             // longest wait for a server's reply
  int64_t max_sessions = 32;                 // inference sessions open at once (WebSockets and requests in flight)
  int64_t spot_check_every = 64;             // recompute one step in this many on another server and compare; 0: off
  int64_t max_length = 2048;                 // longest session a client may ask (prompt and generated tokens)
  int64_t max_new_tokens = 1024;             // largest max_tokens / max_new_tokens of one request
  int64_t default_max_tokens = 256;          // chat completions without max_tokens
  double state_ttl_s = 2;                    // /health, /api/v1/state and /metrics reread the DHT this often at most
  int64_t max_connections = 512;             // HTTP and WebSocket connections open at once
  int64_t max_connections_per_address = 64;  // ... from one remote address
  double header_timeout_s = 10;              // an idle connection, or one slow to send a request's header, closes
  double body_timeout_s = 30;                // a request's body must arrive within this after its header
  int64_t max_body_bytes = 1 << 20;          // a request body or a WebSocket message
  SwarmCredentials credentials;              // TLS and a private swarm's certificate (swarm_credentials.hpp)
  std::vector<ApiModelConfig> models;        // at least one
  bool operator==(const ApiConfig&) const = default;
};

// Reads an API TOML file over the defaults; unknown keys and bad values are errors naming the file, the line and
// the key. Throws ConfigError.
ApiConfig load_api_config(const std::string& toml_path);
// The same over the file's text (for the fuzz target); `source` names it in messages.
ApiConfig load_api_config_text(std::string_view text, const std::string& source);
// Checks the whole configuration (after flags). Throws ConfigError with messages starting "SOURCE: ".
void validate(const ApiConfig& config, const std::string& source);
// The configuration as TOML that load_api_config() reads back to the same values.
std::string to_toml(const ApiConfig& config);

}  // namespace corolla::api
