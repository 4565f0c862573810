#include "model/beam_search.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace corolla {
namespace {

constexpr float kDead = -1.0e9f;  // what transformers adds to a score that must not be chosen

// Indices of the k largest of `scores`, largest first (transformers' torch.topk, sorted).
std::vector<int64_t> top_k(std::span<const float> scores, int64_t k) {
  std::vector<int64_t> idx(scores.size());
  std::iota(idx.begin(), idx.end(), 0);
  auto larger = [&](int64_t a, int64_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), larger);
  idx.resize(static_cast<size_t>(k));
  return idx;
}

// log_softmax of one row, in f32 as torch computes it: x - max - log(sum(exp(x - max))).
void log_softmax(const float* x, int64_t n, float* out) {
  const float mx = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
  const float lse = std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] - mx - lse;
}

}  // namespace

std::string beam_search_problem(const BeamSearchParams& p) {
  if (p.num_beams < 1 || p.num_beams > 64) return "num_beams must be 1..64";
  if (p.max_new_tokens < 1) return "beam search needs max_new_tokens >= 1";
  if (!std::isfinite(p.length_penalty)) return "length_penalty must be a number";
  return {};
}

BeamPrompt beam_prompt(std::span<const int32_t> prompt, int64_t beams) {
  BeamPrompt out;
  for (int64_t b = 0; b < beams; ++b)
    for (size_t i = 0; i < prompt.size(); ++i) {
      out.ids.push_back(prompt[i]);
      out.positions.push_back(static_cast<int32_t>(i));
    }
  return out;
}

BeamSearch::BeamSearch(BeamSearchParams params) : p_(std::move(params)) {
  if (auto problem = beam_search_problem(p_); !problem.empty()) throw std::invalid_argument(problem);
  running_.resize(static_cast<size_t>(p_.num_beams));
  running_[0].score = 0.0f;  // only the first beam's tokens count at the first step (the beams start equal)
  for (size_t b = 1; b < running_.size(); ++b) running_[b].score = kDead;
  finished_.resize(static_cast<size_t>(p_.num_beams));  // empty, at kDead
}

BeamSearch::Step BeamSearch::advance(std::span<const float> logits, int64_t vocab) {
  const int64_t beams = p_.num_beams;
  if (vocab < 1 || static_cast<int64_t>(logits.size()) != beams * vocab)
    throw std::invalid_argument("beam search: " + std::to_string(logits.size()) + " logits for " +
                                std::to_string(beams) + " beams of " + std::to_string(vocab));
  // Every continuation's accumulated log-probability; the best K, K leaving num_beams unfinished at worst.
  std::vector<float> scores(static_cast<size_t>(beams * vocab));
  for (int64_t b = 0; b < beams; ++b) {
    float* row = scores.data() + b * vocab;
    log_softmax(logits.data() + b * vocab, vocab, row);
    for (int64_t v = 0; v < vocab; ++v) row[v] += running_[static_cast<size_t>(b)].score;
  }
  const int64_t keep =
      std::min<int64_t>(std::max<int64_t>(2, 1 + static_cast<int64_t>(p_.eos.size())) * beams, beams * vocab);
  const std::vector<int64_t> top = top_k(scores, keep);
  std::vector<Hypothesis> candidates(static_cast<size_t>(keep));
  std::vector<int32_t> source(static_cast<size_t>(keep));
  std::vector<bool> ends(static_cast<size_t>(keep));
  const bool at_max = generated_ + 1 >= p_.max_new_tokens;
  for (int64_t k = 0; k < keep; ++k) {
    const int64_t beam = top[static_cast<size_t>(k)] / vocab;
    const auto token = static_cast<int32_t>(top[static_cast<size_t>(k)] % vocab);
    Hypothesis& c = candidates[static_cast<size_t>(k)];
    c.tokens = running_[static_cast<size_t>(beam)].tokens;
    c.tokens.push_back(token);
    c.score = scores[static_cast<size_t>(top[static_cast<size_t>(k)])];
    source[static_cast<size_t>(k)] = static_cast<int32_t>(beam);
    ends[static_cast<size_t>(k)] = at_max || std::find(p_.eos.begin(), p_.eos.end(), token) != p_.eos.end();
  }

  // The next running beams: the best candidates that did not end.
  std::vector<float> alive(static_cast<size_t>(keep));
  for (int64_t k = 0; k < keep; ++k)
    alive[static_cast<size_t>(k)] =
        candidates[static_cast<size_t>(k)].score + (ends[static_cast<size_t>(k)] ? kDead : 0.0f);
  Step step;
  std::vector<Hypothesis> next(static_cast<size_t>(beams));
  const std::vector<int64_t> chosen = top_k(alive, beams);
  for (int64_t b = 0; b < beams; ++b) {
    const auto k = static_cast<size_t>(chosen[static_cast<size_t>(b)]);
    next[static_cast<size_t>(b)] = candidates[k];
    next[static_cast<size_t>(b)].score = alive[k];
    step.sources.push_back(source[k]);
    step.tokens.push_back(candidates[k].tokens.back());
  }

  // The finished hypotheses: the best of those kept and of this step's top num_beams candidates that ended, their
  // scores divided by their length to the power of the penalty.
  bool all_finished = true;
  for (const auto& f : finished_) all_finished = all_finished && f.finished;
  const float length = std::pow(static_cast<float>(generated_ + 1), static_cast<float>(p_.length_penalty));
  std::vector<Hypothesis> merged = finished_;
  for (int64_t k = 0; k < keep; ++k) {
    Hypothesis c = candidates[static_cast<size_t>(k)];
    const bool just_finished = ends[static_cast<size_t>(k)] && k < beams;
    c.score = c.score / length;
    if (all_finished && p_.early_stopping == EarlyStopping::on_full) c.score += kDead;
    if (!improvable_) c.score += kDead;
    if (!just_finished) c.score += kDead;
    c.finished = just_finished;
    merged.push_back(std::move(c));
  }
  std::vector<float> merged_scores;
  for (const auto& h : merged) merged_scores.push_back(h.score);
  std::vector<Hypothesis> best(static_cast<size_t>(beams));
  const std::vector<int64_t> order = top_k(merged_scores, beams);
  for (int64_t b = 0; b < beams; ++b)
    best[static_cast<size_t>(b)] = merged[static_cast<size_t>(order[static_cast<size_t>(b)])];
  finished_ = std::move(best);
  running_ = std::move(next);
  ++generated_;

  // Whether the running beams could still beat the worst finished hypothesis (transformers' heuristic).
  const int64_t hypothetical =
      p_.early_stopping == EarlyStopping::never && p_.length_penalty > 0.0 ? p_.max_new_tokens : generated_;
  const float best_possible =
      running_.front().score / std::pow(static_cast<float>(hypothetical), static_cast<float>(p_.length_penalty));
  float worst = finished_.front().score;
  for (const auto& f : finished_) worst = std::min(worst, f.score);
  bool any_better = false;
  for (const auto& f : finished_) any_better = any_better || best_possible > (f.finished ? worst : kDead);
  improvable_ = improvable_ && any_better;

  all_finished = true;
  for (const auto& f : finished_) all_finished = all_finished && f.finished;
  const bool open_beam = !(all_finished && p_.early_stopping == EarlyStopping::on_full);
  bool all_end = true;
  for (bool e : ends) all_end = all_end && e;
  step.done = !(improvable_ && open_beam && !all_end);
  return step;
}

}  // namespace corolla
