// Inputs several subcommands share: token id lists and sampling flags.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "model/sampling.hpp"

namespace corolla::cli {

// Token ids separated by spaces, commas or newlines. Throws std::invalid_argument naming `what` and the item.
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& what);

struct SamplingFlags {
  float temperature = 0;  // 0: greedy
  int top_k = 0;
  float top_p = 1;
  float repetition_penalty = 1;
  uint64_t seed = 0;
  SamplingParams params() const;  // validated
};

// --temperature, --top-k, --top-p, --repetition-penalty, --seed (defaults: the values `flags` holds).
void add_sampling_flags(CLI::App& cmd, SamplingFlags& flags);

}  // namespace corolla::cli
