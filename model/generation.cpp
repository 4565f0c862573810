#include "model/generation.hpp"

#include <algorithm>
#include <stdexcept>

#include "model/config.hpp"

namespace corolla {

std::vector<int32_t> end_tokens(const GenerationParams& params, const ModelConfig& config) {
  if (!params.stop_at_eos) return {};
  return params.eos_token_ids.empty() ? config.eos_token_ids : params.eos_token_ids;
}

std::string generation_problem(const GenerationParams& params) {
  if (params.max_new_tokens < 1) return "max_new_tokens must be at least 1";
  if (params.num_beams == 1) return {};
  if (!params.sampling.greedy) return "beam search draws no samples: num_beams > 1 needs greedy sampling";
  if (params.sampling.repetition_penalty != 1.0f) return "beam search with a repetition penalty is not supported";
  return beam_search_problem(
      {params.num_beams, params.length_penalty, params.early_stopping, params.max_new_tokens, {}});
}

BeamSearchParams beam_search_params(const GenerationParams& params, const ModelConfig& config) {
  return {params.num_beams, params.length_penalty, params.early_stopping, params.max_new_tokens,
          end_tokens(params, config)};
}

const char* to_string(GenerationEnd end) {
  switch (end) {
    case GenerationEnd::running: return "running";
    case GenerationEnd::end_token: return "end_token";
    case GenerationEnd::length: return "length";
    case GenerationEnd::stopped: return "stopped";
  }
  return "?";
}

namespace {

bool is_end(const std::vector<int32_t>& end_ids, int32_t id) {
  return std::find(end_ids.begin(), end_ids.end(), id) != end_ids.end();
}

const GenerationParams& checked(const GenerationParams& params) {
  if (auto problem = generation_problem(params); !problem.empty()) throw std::invalid_argument(problem);
  if (params.num_beams != 1) throw std::invalid_argument("a beam search is not a token-by-token generation");
  return params;
}

}  // namespace

TokenGeneration::TokenGeneration(const GenerationParams& params, std::vector<int32_t> end_ids,
                                 std::vector<int32_t> history, TokenCallback on_token)
    : max_new_tokens_(checked(params).max_new_tokens),
      sampler_(params.sampling),
      end_ids_(std::move(end_ids)),
      history_(std::move(history)),
      on_token_(std::move(on_token)) {}

bool TokenGeneration::advance(std::span<const float> logits) {
  if (end_ != GenerationEnd::running) throw std::logic_error("TokenGeneration::advance after the generation ended");
  const int32_t next = sampler_.next(logits, history_);
  tokens_.push_back(next);
  history_.push_back(next);
  if (on_token_ && !on_token_(next))
    end_ = GenerationEnd::stopped;
  else if (is_end(end_ids_, next))
    end_ = GenerationEnd::end_token;
  else if (static_cast<int64_t>(tokens_.size()) >= max_new_tokens_)
    end_ = GenerationEnd::length;
  return end_ == GenerationEnd::running;
}

GenerationEnd hand_over(const std::vector<int32_t>& tokens, const std::vector<int32_t>& end_ids,
                        const TokenCallback& on_token) {
  if (on_token)
    for (int32_t id : tokens)
      if (!on_token(id)) return GenerationEnd::stopped;
  return !tokens.empty() && is_end(end_ids, tokens.back()) ? GenerationEnd::end_token : GenerationEnd::length;
}

const std::vector<int32_t>& run_generation(TokenGeneration& generation, Tensor logits,
                                           const std::function<Tensor(int32_t)>& feed) {
  while (generation.advance({logits.data_as<const float>(), static_cast<size_t>(logits.numel())}))
    logits = feed(generation.last());
  return generation.tokens();
}

}  // namespace corolla
