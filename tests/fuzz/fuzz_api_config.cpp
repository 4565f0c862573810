// The API's configuration file (`corolla api --config`): any bytes through load_api_config_text (the loader's
// own path: TOML, typed keys, ranges, unknown keys), then validate() and, for a configuration that passes,
// to_toml() read back to the same values. Every refusal must be a ConfigError.
#include <cstdint>
#include <string>
#include <string_view>

#include "apps/api/api_config.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace corolla;
using corolla::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 1 << 16) return 0;
  api::ApiConfig config;
  try {
    config = api::load_api_config_text(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.toml");
    api::validate(config, "fuzz.toml");
  } catch (const ConfigError&) {
    return 0;
  }
  require(api::load_api_config_text(api::to_toml(config), "again.toml") == config);
  return 0;
}
