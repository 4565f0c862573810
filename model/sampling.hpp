// Choosing the next token from logits, with Hugging Face's semantics and order of processors:
// repetition penalty, then temperature, top-k, top-p, then a draw from a seeded RNG (or argmax when greedy). The
// filters select rather than sort the vocabulary: top-k keeps a heap of k in one pass, top-p bins the mass below the
// largest logit in one pass and collects only the bins that hold the nucleus; only those candidates are sorted.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace corolla {

struct SamplingParams {
  bool greedy = true;               // do_sample = false
  float temperature = 1.0f;         // > 0
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float repetition_penalty = 1.0f;  // 1: off
  uint64_t seed = 0;
  // Throws std::invalid_argument naming the bad parameter (sampling_params.cpp: readers of requests need it alone).
  void validate() const;
};

class Sampler {
 public:
  explicit Sampler(SamplingParams params);
  // `history` holds the ids seen so far (prompt and generated) for the repetition penalty.
  int32_t next(std::span<const float> logits, std::span<const int32_t> history);
  const SamplingParams& params() const { return params_; }

 private:
  struct Candidate {
    float logit;
    int32_t id;
  };
  static bool larger(const Candidate& a, const Candidate& b);
  // candidates_ = the k largest of work_, largest first.
  void select_largest(int32_t k);
  // candidates_ = a prefix of work_ sorted, largest first, that holds top-p's nucleus; returns the row's mass
  // (sum of exp(l - mx)).
  double collect_nucleus_candidates(float mx);
  int32_t draw_from_all(float mx);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> work_;
  std::vector<Candidate> candidates_;
  std::vector<double> probs_;
  std::vector<float> weights_;  // exp(l - max) over the whole row
  std::vector<double> block_sums_;
  std::vector<bool> seen_;
};

}  // namespace corolla
