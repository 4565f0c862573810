// The configuration of a client: which model, which nodes to join through, how to drive a chain of servers, and
// its limits. Read from a TOML file (config/client.toml documents every key), then overridden by command-line
// flags (apps/corolla/node_flags.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "actors/config/config_error.hpp"

namespace corolla {

struct ClientConfig {
  std::string model;                       // model directory, .gguf file, or "demo"; required
  std::vector<std::string> initial_peers;  // "HOST:PORT" of nodes in the swarm; at least one
  std::string mode = "push";               // push: each server forwards to the next; relay: the client relays
  int64_t max_length = 2048;               // longest session (prompt + generated tokens)
  double request_timeout_s = 30;           // longest wait for a server's reply before trying another server

  bool operator==(const ClientConfig&) const = default;
};

// Reads a client's TOML file over the defaults; unknown keys and bad values are errors naming the file, the line
// and the key. 'model' and 'initial_peers' may be absent here (flags can give them); validate() requires them.
// Throws ConfigError.
ClientConfig load_client_config(const std::string& toml_path);
// The same for a file's text already in memory; `source` names it in messages.
ClientConfig load_client_config_text(std::string_view text, const std::string& source);

// Checks a whole client configuration; messages start with "SOURCE: ". Throws ConfigError.
void validate(const ClientConfig& config, const std::string& source);

// The configuration as TOML that load_client_config() reads back to the same values. `table` is "" for
// top-level keys, or a header such as "[client]".
std::string to_toml(const ClientConfig& config, const std::string& table = "");

}  // namespace corolla
