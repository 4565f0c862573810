// A simulator scenario file (sim/scenario.hpp). Every refusal must be a ConfigError naming file, line and key; an
// accepted scenario's model passes the model config's validation.
#include <cstdint>
#include <string_view>

#include "actors/config/config_error.hpp"
#include "sim/scenario.hpp"

using namespace corolla;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const sim::scenario s =
        sim::read_scenario_text(std::string_view(reinterpret_cast<const char*>(data), size), "s.toml");
    s.model.config().validate("s.toml");
    (void)s.model.block_bytes();
  } catch (const ConfigError&) {
  }
  return 0;
}
