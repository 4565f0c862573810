#include "apps/corolla/cli_inputs.hpp"

#include <climits>
#include <random>
#include <stdexcept>

#include "actors/dht/announcer.hpp"
#include "model/model_path.hpp"

namespace corolla::cli {

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& what) {
  std::vector<int32_t> ids;
  std::string word;
  auto flush = [&] {
    if (word.empty()) return;
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || v < 0 || v > INT32_MAX)
      throw std::invalid_argument(what + ": '" + word + "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
    word.clear();
  };
  for (char c : text) {
    if (c == ' ' || c == ',' || c == '\n' || c == '\t' || c == '\r')
      flush();
    else
      word += c;
  }
  flush();
  return ids;
}

SamplingParams SamplingFlags::params() const {
  SamplingParams p;
  p.greedy = temperature == 0;
  p.temperature = temperature > 0 ? temperature : 1.0f;
  p.top_k = top_k;
  p.top_p = top_p;
  p.repetition_penalty = repetition_penalty;
  p.seed = seed;
  p.validate();
  return p;
}

void add_sampling_flags(CLI::App& cmd, SamplingFlags& f) {
  cmd.add_option("--temperature", f.temperature, "0 = greedy; > 0 samples")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  cmd.add_option("--top-k", f.top_k, "Sample among the k most likely tokens (0 = all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd.add_option("--top-p", f.top_p, "Nucleus sampling mass (1 = off)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd.add_option("--repetition-penalty", f.repetition_penalty, "Penalty for repeated tokens (1 = off)")
      ->capture_default_str();
  cmd.add_option("--seed", f.seed, "Random seed for sampling");
}

swarm_client_options cli_client_options(const std::vector<std::string>& initial_peers, const std::string& swarm_id,
                                        const WeightSource& source) {
  swarm_client_options opts;
  opts.initial_peers = initial_peers;
  opts.model_prefix = swarm_id.empty() ? default_model_prefix(source) : swarm_id;
  opts.data_dir = corolla_cache_dir() + "/client";
  std::random_device rd;
  for (auto& byte : opts.dht_id) byte = static_cast<uint8_t>(rd());
  return opts;
}

}  // namespace corolla::cli
