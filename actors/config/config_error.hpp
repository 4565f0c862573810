// The error thrown for a configuration that cannot be used (a file, flags, or the two together).
#pragma once

#include <stdexcept>

namespace corolla {

// what() is the whole message, ready to show to a user: it names the file or flags, the line when known, and
// the key, e.g. "config/node.toml:3: 'port' must be an integer in 0..65535, got \"abc\"".
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace corolla
