// The TOML readers of node, client and local-swarm files (actors/server/node_config.hpp,
// actors/client/client_config.hpp, actors/client/swarm_config.hpp). The first byte picks the reader, the rest is
// the file. Every refusal must be a ConfigError (a message naming file, line and key); any other exception is a
// check that was missed.
#include <cstdint>
#include <string_view>

#include "actors/client/client_config.hpp"
#include "actors/client/swarm_config.hpp"
#include "actors/server/node_config.hpp"

using namespace corolla;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 3) {
      case 0: {
        const NodeConfig c = load_node_config_text(text, "node.toml");
        validate(c, "node.toml");
        (void)to_toml(c);
        break;
      }
      case 1: {
        const ClientConfig c = load_client_config_text(text, "client.toml");
        validate(c, "client.toml");
        (void)to_toml(c);
        break;
      }
      default: (void)to_toml(load_swarm_config_text(text, "swarm.toml")); break;
    }
  } catch (const ConfigError&) {
  }
  return 0;
}
