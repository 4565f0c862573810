// Each subcommand of `corolla` lives in its own cmd_*.cpp and registers itself here.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace corolla::cli {

// Adds the subcommand to `app` and returns the function that runs it once the command line is parsed.
using Runner = std::function<int()>;
Runner add_generate(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_chat(CLI::App& app);
Runner add_dht(CLI::App& app);
Runner add_config_check(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_finetune(CLI::App& app);
Runner add_api(CLI::App& app);
Runner add_run(CLI::App& app);
Runner add_sim(CLI::App& app);
Runner add_keys(CLI::App& app);

}  // namespace corolla::cli
