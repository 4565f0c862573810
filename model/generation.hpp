// One generation's rules, in one place for every engine that generates: a model in this process (`generate`,
// `corolla chat`), a swarm session (actors/client/session_generation.cpp) and, through the session, the HTTP API.
// An engine feeds tokens and hands the logits after the last one to a TokenGeneration; it chooses the next token
// (the sampler), gives it to the caller's callback (streaming, stop sequences, cancellation) and says whether the
// generation goes on: it ends at an end token, at max_new_tokens, or when the callback says so. The token that
// ends a generation is never fed: the engine holds every token but the last.
//
// Beam search (model/beam_search.hpp) is the other search; GenerationParams chooses between them.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"
#include "model/beam_search.hpp"
#include "model/sampling.hpp"

namespace corolla {

struct ModelConfig;  // model/config.hpp

struct GenerationParams {
  int64_t max_new_tokens = 32;
  SamplingParams sampling;
  bool stop_at_eos = true;
  // Beam search (model/beam_search.hpp) with more than one beam: the sampling must be greedy, and the result is
  // the best hypothesis, as transformers' generate(num_beams=...) returns it.
  int64_t num_beams = 1;
  double length_penalty = 1.0;
  EarlyStopping early_stopping = EarlyStopping::heuristic;
  std::vector<int32_t> eos_token_ids;  // the tokens that end a generation (empty: the model's)
};

// The tokens that end a generation with `params` of a model with `config`: none unless stop_at_eos.
std::vector<int32_t> end_tokens(const GenerationParams& params, const ModelConfig& config);

// "" when `params` can run (beam search only with greedy sampling), else why not.
std::string generation_problem(const GenerationParams& params);
// The beam search `params` ask for, on a model with `config` (its end tokens).
BeamSearchParams beam_search_params(const GenerationParams& params, const ModelConfig& config);

// Called with each new token as soon as it is chosen (the last one included); returning false ends the
// generation with that token (a stop sequence matched, the reader went away).
using TokenCallback = std::function<bool(int32_t)>;

// Why a generation ended.
enum class GenerationEnd {
  running,    // it has not
  end_token,  // it chose one of its end tokens
  length,     // max_new_tokens were chosen
  stopped,    // the callback returned false
};
const char* to_string(GenerationEnd end);

// Sampling with its history, counting and the ends, for one generation of one sequence.
class TokenGeneration {
 public:
  // `history`: the ids the sequence holds so far (for the repetition penalty); `end_ids`: end_tokens(...).
  // Throws std::invalid_argument for sampling parameters that cannot run.
  TokenGeneration(const GenerationParams& params, std::vector<int32_t> end_ids, std::vector<int32_t> history,
                  TokenCallback on_token = {});

  // Chooses the next token from the logits after the last fed token and gives it to the callback; true when the
  // generation goes on (feed last() and call again with the logits after it).
  bool advance(std::span<const float> logits);

  int32_t last() const { return tokens_.back(); }
  const std::vector<int32_t>& tokens() const { return tokens_; }  // the new tokens, the ending one included
  GenerationEnd end() const { return end_; }

 private:
  int64_t max_new_tokens_;
  Sampler sampler_;
  std::vector<int32_t> end_ids_;
  std::vector<int32_t> history_;
  TokenCallback on_token_;
  std::vector<int32_t> tokens_;
  GenerationEnd end_ = GenerationEnd::running;
};

// Hands the tokens of a search that chose them all at once (a beam search's best hypothesis) to the callback until
// it says stop; returns why that generation ended, in TokenGeneration's order (the callback's stop, an end token,
// the length).
GenerationEnd hand_over(const std::vector<int32_t>& tokens, const std::vector<int32_t>& end_ids,
                        const TokenCallback& on_token);

// Runs `generation` from the logits after the prompt (f32 on the host, one row), feeding each token it goes on
// with through `feed` (which returns the logits after it), until it ends; returns its new tokens. The loop of the
// engines in this process (a session's is the same loop, one continuation per step).
const std::vector<int32_t>& run_generation(TokenGeneration& generation, Tensor logits,
                                           const std::function<Tensor(int32_t)>& feed);

}  // namespace corolla
