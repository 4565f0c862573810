// Beam search as Hugging Face transformers runs it (GenerationMixin._beam_search, do_sample=False): the one
// search that a local model and a swarm session both drive. Each step takes the logits of the running beams'
// last tokens and says which beam each new running beam continues (a step's hypothesis ids: the caches are
// reordered by them) and which token it takes; finished hypotheses are kept with their length-penalised scores,
// and the search ends as transformers ends it (early_stopping true, false or "never").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace corolla {

enum class EarlyStopping { heuristic, on_full, never };  // transformers' early_stopping = False, True, "never"

struct BeamSearchParams {
  int64_t num_beams = 1;
  double length_penalty = 1.0;
  EarlyStopping early_stopping = EarlyStopping::heuristic;
  int64_t max_new_tokens = 32;
  std::vector<int32_t> eos;  // tokens that finish a hypothesis (empty: none)
};

// "" when the parameters can run, else why not.
std::string beam_search_problem(const BeamSearchParams& params);

// The prompt as a beam search's first step takes it: in each beam's sequence, at positions 0..T-1 (the beams
// start equal; as transformers does, each prefills it).
struct BeamPrompt {
  std::vector<int32_t> ids, positions;
};
BeamPrompt beam_prompt(std::span<const int32_t> prompt, int64_t beams);

class BeamSearch {
 public:
  explicit BeamSearch(BeamSearchParams params);

  struct Step {
    std::vector<int32_t> sources;  // per new running beam, the beam it continues
    std::vector<int32_t> tokens;   // per new running beam, the token it takes next
    bool done = false;             // the search is over: tokens and sources mean nothing
  };
  // The logits [num_beams, vocab] of the running beams' last tokens (all beams the same before the first token).
  Step advance(std::span<const float> logits, int64_t vocab);
  // The best finished hypothesis's new tokens (its EOS included when it ended on one).
  const std::vector<int32_t>& best() const { return finished_.front().tokens; }
  int64_t generated() const { return generated_; }

 private:
  struct Hypothesis {
    std::vector<int32_t> tokens;
    float score = -1.0e9f;
    bool finished = false;
  };
  BeamSearchParams p_;
  std::vector<Hypothesis> running_, finished_;
  int64_t generated_ = 0;
  bool improvable_ = true;  // transformers' is_early_stop_heuristic_unsatisfied
};

}  // namespace corolla
