#include "apps/corolla/commands.hpp"

namespace corolla::cli {
Runner add_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate tokens with a model");
  (void)cmd;
  return [] { return 0; };
}
}  // namespace corolla::cli
