// Inputs several subcommands share: token id lists, sampling flags, a swarm client's options.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/client/client_api.hpp"
#include "model/sampling.hpp"
#include "model/weights/weight_source.hpp"

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

// What a command-line client of a swarm starts from: `initial_peers`, the swarm's DHT keys (`swarm_id`, else the
// model's), a random DHT id, and what it learns of servers (reputations, bans) kept in the cache directory across
// runs, shared by generate, chat and finetune.
swarm_client_options cli_client_options(const std::vector<std::string>& initial_peers, const std::string& swarm_id,
                                        const WeightSource& source);

}  // namespace corolla::cli
