#define BOOST_TEST_MODULE sampling
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "model/sampling.hpp"

using namespace corolla;

namespace {
std::vector<float> logits() { return {1.0f, 3.0f, 2.0f, -1.0f, 0.5f}; }
}  // namespace

BOOST_AUTO_TEST_CASE(greedy_takes_the_argmax) {
  Sampler s({});
  BOOST_TEST(s.next(logits(), {}) == 1);
}

// Over a vocabulary-sized row, with ties (small integers) and the largest anywhere, at the ends included: the
// first largest, as std::max_element finds it; and a row of zeros gives token 0.
BOOST_AUTO_TEST_CASE(greedy_takes_the_first_largest_of_a_long_row) {
  std::mt19937 rng(7);
  Sampler s({});
  for (size_t n : {1u, 7u, 16u, 17u, 32000u, 32003u}) {
    std::vector<float> row(n);
    for (int trial = 0; trial < 20; ++trial) {
      for (auto& v : row) v = static_cast<float>(static_cast<int>(rng() % 50) - 60);
      if (trial % 3 == 1) row[rng() % n] = 5;
      if (trial % 3 == 2) row[n - 1] = 7;
      const auto want = std::max_element(row.begin(), row.end()) - row.begin();
      BOOST_TEST(s.next(row, {}) == want, "n " << n << " trial " << trial);
    }
  }
  BOOST_TEST(s.next(std::vector<float>(32000, 0.0f), {}) == 0);
}

BOOST_AUTO_TEST_CASE(repetition_penalty_divides_positive_and_multiplies_negative_logits_once) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  Sampler s(p);
  // Token 1 (3.0) becomes 1.5 < token 2 (2.0); repeating it in the history must not penalise it twice.
  std::vector<int32_t> history = {1, 1, 1};
  BOOST_TEST(s.next(logits(), history) == 2);
  // A negative logit is multiplied: token 3 (-1) becomes -2 and stays last.
  std::vector<float> l = {-1.0f, -1.5f};
  history = {0};
  BOOST_TEST(s.next(l, history) == 1);
}

BOOST_AUTO_TEST_CASE(same_seed_same_draws) {
  SamplingParams p;
  p.greedy = false;
  p.seed = 42;
  Sampler a(p), b(p);
  for (int i = 0; i < 100; ++i) BOOST_TEST(a.next(logits(), {}) == b.next(logits(), {}));
}

BOOST_AUTO_TEST_CASE(top_k_1_and_tiny_top_p_are_greedy) {
  SamplingParams p;
  p.greedy = false;
  p.top_k = 1;
  Sampler k(p);
  p.top_k = 0;
  p.top_p = 0.01f;
  Sampler t(p);
  for (int i = 0; i < 50; ++i) {
    BOOST_TEST(k.next(logits(), {}) == 1);
    BOOST_TEST(t.next(logits(), {}) == 1);
  }
}

BOOST_AUTO_TEST_CASE(draws_follow_the_tempered_softmax) {
  SamplingParams p;
  p.greedy = false;
  p.temperature = 2.0f;
  p.seed = 7;
  Sampler s(p);
  const auto l = logits();
  std::map<int, int> counts;
  const int n = 200000;
  for (int i = 0; i < n; ++i) counts[s.next(l, {})]++;
  double z = 0;
  for (float v : l) z += std::exp(v / 2.0);
  for (size_t i = 0; i < l.size(); ++i) {
    const double want = std::exp(l[i] / 2.0) / z;
    BOOST_TEST(std::fabs(counts[static_cast<int>(i)] / double(n) - want) < 0.005, "token " << i);
  }
}

// With no filter the draw finds its block of tokens by the blocks' sums, then its token: tokens at both ends of
// blocks, in a short last block and on both sides of a boundary are drawn as often as their probability says.
BOOST_AUTO_TEST_CASE(draws_over_a_whole_row_reach_every_block) {
  SamplingParams p;
  p.greedy = false;
  p.seed = 9;
  Sampler s(p);
  std::vector<float> row(1000, -30.f);
  const std::map<int, float> heavy{{0, 0.f}, {255, 0.7f}, {256, 1.1f}, {511, 0.3f}, {700, 1.5f}, {999, 0.9f}};
  for (auto [id, l] : heavy) row[static_cast<size_t>(id)] = l;
  double z = 0;
  for (float l : row) z += std::exp(double(l));
  std::map<int, int> counts;
  const int n = 100000;
  for (int i = 0; i < n; ++i) counts[s.next(row, {})]++;
  for (auto [id, count] : counts) BOOST_TEST(heavy.count(id) == 1u, "drew " << id);
  for (auto [id, l] : heavy)
    BOOST_TEST(std::fabs(counts[id] / double(n) - std::exp(double(l)) / z) < 0.006, "token " << id);
}

BOOST_AUTO_TEST_CASE(top_p_keeps_the_smallest_nucleus) {
  SamplingParams p;
  p.greedy = false;
  p.top_p = 0.7f;  // probabilities of logits(): 0.61, 0.22, 0.08, ... -> nucleus {1, 2}
  p.seed = 3;
  Sampler s(p);
  for (int i = 0; i < 2000; ++i) {
    const int32_t t = s.next(logits(), {});
    BOOST_TEST((t == 1 || t == 2));
  }
}

BOOST_AUTO_TEST_CASE(bad_parameters_are_named) {
  SamplingParams p;
  p.temperature = 0;
  BOOST_CHECK_EXCEPTION(Sampler{p}, std::invalid_argument,
                        [](const auto& e) { return std::string(e.what()).find("temperature") != std::string::npos; });
  p = {};
  p.top_p = 1.5f;
  BOOST_CHECK_EXCEPTION(Sampler{p}, std::invalid_argument,
                        [](const auto& e) { return std::string(e.what()).find("top_p") != std::string::npos; });
}

// Over a vocabulary-sized row (Llama-2's 32,000 logits), the draws follow the brute-force reference: the whole
// row sorted, top-k, then the smallest prefix reaching top_p, renormalized; no token outside it is ever drawn.
// The rows range from peaked (a nucleus of a few tokens) to flat (thousands), so the sampler's partial selection
// has to widen its candidates, and the settings cover each filter alone, both, and none.
BOOST_AUTO_TEST_CASE(a_large_vocabulary_is_drawn_from_the_sorted_nucleus) {
  struct Case {
    int top_k;
    float top_p, temperature, spread;
  };
  std::mt19937 rng(11);
  for (const Case& c : {Case{0, 0.9f, 0.7f, 2.5f}, Case{0, 0.95f, 1.0f, 0.5f}, Case{40, 0.8f, 1.3f, 2.5f},
                        Case{0, 1.0f, 0.5f, 1.0f}, Case{0, 0.5f, 1.0f, 8.0f}}) {
    std::normal_distribution<float> noise(0, c.spread);
    std::vector<float> row(32000);
    for (auto& v : row) v = noise(rng);
    // Reference.
    std::vector<int32_t> order(row.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    size_t keep = c.top_k > 0 ? static_cast<size_t>(c.top_k) : row.size();
    std::vector<double> p(keep);
    double sum = 0;
    for (size_t i = 0; i < keep; ++i) sum += p[i] = std::exp((row[order[i]] - row[order[0]]) / c.temperature);
    if (c.top_p < 1) {
      double cum = 0;
      size_t cut = 0;
      while (cut < keep && cum < c.top_p) cum += p[cut++] / sum;
      keep = cut;
    }
    std::map<int32_t, double> want;
    double kept = 0;
    for (size_t i = 0; i < keep; ++i) kept += p[i];
    for (size_t i = 0; i < keep; ++i) want[order[i]] = p[i] / kept;

    SamplingParams params;
    params.greedy = false;
    params.top_k = c.top_k;
    params.top_p = c.top_p;
    params.temperature = c.temperature;
    params.seed = 5;
    Sampler s(params);
    const int n = 3000;
    std::map<int32_t, int> counts;
    for (int i = 0; i < n; ++i) counts[s.next(row, {})]++;
    const std::string what =
        "top_k " + std::to_string(c.top_k) + " top_p " + std::to_string(c.top_p) + " nucleus " + std::to_string(keep);
    for (auto [id, count] : counts) BOOST_TEST(want.count(id) == 1u, what << ": drew " << id << " outside it");
    for (size_t i = 0; i < std::min<size_t>(keep, 5); ++i)
      BOOST_TEST(std::fabs(counts[order[i]] / double(n) - want[order[i]]) < 0.035, what << ": rank " << i);
  }
}
