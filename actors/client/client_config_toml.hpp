// Reading client keys from any TOML table, for files that hold them besides a client's own (local swarms).
#pragma once

#include "actors/client/client_config.hpp"
#include "actors/config/config_file.hpp"

namespace corolla {

// Applies the client keys present in the reader's table over `config`, checking each. Does not call finish().
void read_client_keys(TableReader& reader, ClientConfig& config);

// validate() with key names prefixed ("client.") in the messages.
void validate_client(const ClientConfig& config, const std::string& source, const std::string& key_prefix);

}  // namespace corolla
