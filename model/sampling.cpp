#include "model/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "kernels/cpu/vector_math.hpp"

namespace corolla {

namespace {

// The index of the first largest logit, as std::max_element finds it, in two passes the compiler vectorizes: the
// largest value over 8 independent lanes, then the first index holding it. A greedy step scans the whole
// vocabulary (32,000-256,000 logits); max_element's one compare-and-branch per element was 3.5% of a 10,000-server
// simulation.
int32_t first_argmax(std::span<const float> x) {
  constexpr size_t kLanes = 8;
  if (x.size() < 2 * kLanes) return static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin());
  float lane[kLanes];
  std::copy_n(x.begin(), kLanes, lane);
  size_t i = kLanes;
  for (; i + kLanes <= x.size(); i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
  float best = *std::max_element(lane, lane + kLanes);
  for (; i < x.size(); ++i) best = x[i] > best ? x[i] : best;
  for (size_t k = 0; k < x.size(); ++k)
    if (x[k] == best) return static_cast<int32_t>(k);
  return static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin());  // NaNs: no value equals best
}

}  // namespace

Sampler::Sampler(SamplingParams params) : params_(params), rng_(params.seed) { params_.validate(); }

int32_t Sampler::next(std::span<const float> logits, std::span<const int32_t> history) {
  const auto n = static_cast<int32_t>(logits.size());
  if (params_.greedy && params_.repetition_penalty == 1.0f)  // nothing to change: no working copy of the vocabulary
    return first_argmax(logits);
  work_.assign(logits.begin(), logits.end());
  if (params_.repetition_penalty != 1.0f) {
    // Once per distinct token, as Hugging Face's gather/scatter does.
    seen_.assign(static_cast<size_t>(n), false);
    for (int32_t id : history) {
      if (id < 0 || id >= n || seen_[static_cast<size_t>(id)]) continue;
      seen_[static_cast<size_t>(id)] = true;
      float& l = work_[static_cast<size_t>(id)];
      l = l < 0 ? l * params_.repetition_penalty : l / params_.repetition_penalty;
    }
  }
  if (params_.greedy) return first_argmax(work_);

  for (auto& l : work_) l /= params_.temperature;
  const float mx = work_[static_cast<size_t>(first_argmax(work_))];
  const bool top_k = params_.top_k > 0 && params_.top_k < n;
  if (!top_k && params_.top_p >= 1.0f) return draw_from_all(mx);
  // The candidates, largest first, and the mass top-p measures against: with top-k the k's (HF's top-p works on
  // what top-k kept), else the whole row's, of which the candidates need only hold the nucleus.
  double total = 0;
  if (top_k) {
    select_largest(params_.top_k);
  } else {
    total = collect_nucleus_candidates(mx);
  }
  const size_t count = candidates_.size();
  probs_.resize(count);
  double sum = 0;
  for (size_t i = 0; i < count; ++i) sum += probs_[i] = std::exp(candidates_[i].logit - mx);
  if (top_k) total = sum;
  size_t keep = count;
  if (params_.top_p < 1.0f) {
    // The smallest prefix whose probability reaches top_p (at least one token).
    double cum = 0;
    size_t cut = 0;
    while (cut < count) {
      cum += probs_[cut] / total;
      ++cut;
      if (cum >= params_.top_p) break;
    }
    keep = cut;
    sum = std::accumulate(probs_.begin(), probs_.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_);
  for (size_t i = 0; i < keep; ++i) {
    r -= probs_[i];
    if (r <= 0) return candidates_[i].id;
  }
  return candidates_[keep - 1].id;
}

// Larger logit first; ties by the smaller id, so the order (and a seeded draw) does not depend on the selection.
bool Sampler::larger(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// One pass with a heap of the k largest so far: past the first few hundred tokens almost every logit is below the
// heap's least and costs one well-predicted comparison (a selection over all n pairs was 2-4x slower).
void Sampler::select_largest(int32_t k) {
  candidates_.clear();
  auto smaller_first = [](const Candidate& a, const Candidate& b) { return larger(a, b); };  // a min-heap top
  for (size_t i = 0; i < work_.size(); ++i) {
    const Candidate c{work_[i], static_cast<int32_t>(i)};
    if (static_cast<int32_t>(candidates_.size()) < k) {
      candidates_.push_back(c);
      std::push_heap(candidates_.begin(), candidates_.end(), smaller_first);
    } else if (larger(c, candidates_.front())) {
      std::pop_heap(candidates_.begin(), candidates_.end(), smaller_first);
      candidates_.back() = c;
      std::push_heap(candidates_.begin(), candidates_.end(), smaller_first);
    }
  }
  std::sort(candidates_.begin(), candidates_.end(), larger);
}

// The nucleus is the largest logits' prefix whose share of the whole mass reaches top_p. One pass sums the mass
// (returned) and how it spreads over bins of a quarter below the largest logit; the bins from the top that first
// reach top_p of it bound the nucleus, and only the tokens in them are collected and sorted.
double Sampler::collect_nucleus_candidates(float mx) {
  constexpr int kBins = 256;
  constexpr float kPerUnit = 4.0f;  // bins per unit of logit: they span 64 below the largest (e^-64: no mass)
  weights_.resize(work_.size());
  best_vector_kernels().exp_shifted(work_.data(), mx, weights_.data(), static_cast<int64_t>(work_.size()));
  double mass[kBins] = {};
  for (size_t i = 0; i < work_.size(); ++i) {
    const float below = (mx - work_[i]) * kPerUnit;
    mass[below < static_cast<float>(kBins - 1) ? static_cast<int>(below) : kBins - 1] += weights_[i];
  }
  const double total = std::accumulate(mass, mass + kBins, 0.0);
  int last = 0;
  double held = mass[0];
  while (held < params_.top_p * total && last < kBins - 1) held += mass[++last];
  // The tokens of bins 0..last, tested as they were binned (the last bin holds everything below it too).
  candidates_.clear();
  for (size_t i = 0; i < work_.size(); ++i)
    if (last == kBins - 1 || (mx - work_[i]) * kPerUnit < static_cast<float>(last + 1))
      candidates_.push_back({work_[i], static_cast<int32_t>(i)});
  std::sort(candidates_.begin(), candidates_.end(), larger);
  return total;
}

// No filter: a draw over the whole row in vocabulary order (the distribution needs no sorting). The weights come
// from the vector kernels' exp, and the draw first finds its block of kDrawBlock tokens by the blocks' sums (each
// summed over independent lanes), then its token within the block: a walk token by token through the whole
// vocabulary is a chain of dependent additions (tens of microseconds for 50,000 tokens).
int32_t Sampler::draw_from_all(float mx) {
  constexpr size_t kDrawBlock = 256, kLanes = 8;
  const size_t n = work_.size();
  weights_.resize(n);
  best_vector_kernels().exp_shifted(work_.data(), mx, weights_.data(), static_cast<int64_t>(n));
  block_sums_.assign((n + kDrawBlock - 1) / kDrawBlock, 0.0);
  double sum = 0;
  for (size_t b = 0; b < block_sums_.size(); ++b) {
    const size_t from = b * kDrawBlock, to = std::min(n, from + kDrawBlock);
    double lanes[kLanes] = {};
    size_t i = from;
    for (; i + kLanes <= to; i += kLanes)
      for (size_t j = 0; j < kLanes; ++j) lanes[j] += weights_[i + j];
    for (; i < to; ++i) lanes[0] += weights_[i];
    sum += block_sums_[b] = std::accumulate(lanes, lanes + kLanes, 0.0);
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_);
  for (size_t b = 0; b < block_sums_.size(); ++b) {
    if (r > block_sums_[b]) {
      r -= block_sums_[b];
      continue;
    }
    for (size_t i = b * kDrawBlock; i < std::min(n, (b + 1) * kDrawBlock); ++i) {
      r -= weights_[i];
      if (r <= 0) return static_cast<int32_t>(i);
    }
  }
  return first_argmax(work_);  // rounding left a sliver: the most likely token
}

}  // namespace corolla
