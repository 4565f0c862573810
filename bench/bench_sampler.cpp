// The sampler's cost per token over a whole vocabulary, against the sort-based filters Hugging Face's warpers use:
// the whole row sorted, then top-k, the top-p prefix and a draw.
// Both run the same settings in turn on the same rows; prints microseconds per token and the ratio.
//   bench_sampler [tokens=300]
// Rows: normal logits of spread 2.5 (a sampled LM's rows are peaked; this is broader, so the nucleus holds hundreds
// of tokens), for SmolLM2's 49,152 and Llama-3's 128,256 vocabularies.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "model/sampling.hpp"

using namespace corolla;

namespace {

// The sort-based reference: temperature, the whole row sorted, top-k, softmax, the top-p prefix, a draw.
class SortingSampler {
 public:
  explicit SortingSampler(SamplingParams p) : p_(p), rng_(p.seed) {}
  int32_t next(const std::vector<float>& logits) {
    const auto n = static_cast<int32_t>(logits.size());
    work_.assign(logits.begin(), logits.end());
    for (auto& l : work_) l /= p_.temperature;
    order_.resize(logits.size());
    std::iota(order_.begin(), order_.end(), 0);
    std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) { return work_[a] > work_[b]; });
    const int32_t keep_k = p_.top_k > 0 && p_.top_k < n ? p_.top_k : n;
    std::vector<double> probs(static_cast<size_t>(keep_k));
    double sum = 0;
    for (int32_t i = 0; i < keep_k; ++i) sum += probs[i] = std::exp(work_[order_[i]] - work_[order_[0]]);
    int32_t keep = keep_k;
    if (p_.top_p < 1) {
      double cum = 0;
      keep = 0;
      while (keep < keep_k && cum < p_.top_p) cum += probs[keep++] / sum;
      sum = std::accumulate(probs.begin(), probs.begin() + keep, 0.0);
    }
    double r = std::uniform_real_distribution<double>(0, sum)(rng_);
    for (int32_t i = 0; i < keep; ++i)
      if ((r -= probs[i]) <= 0) return order_[i];
    return order_[keep - 1];
  }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<float> work_;
  std::vector<int32_t> order_;
};

}  // namespace

int main(int argc, char** argv) {
  const int tokens = argc > 1 ? std::atoi(argv[1]) : 300;
  struct Setting {
    const char* name;
    int top_k;
    float top_p, temperature;
  };
  const Setting settings[] = {{"temperature 0.7, top_p 0.9", 0, 0.9f, 0.7f},
                              {"top_k 50", 50, 1.0f, 1.0f},
                              {"top_k 50, top_p 0.9, temperature 0.8", 50, 0.9f, 0.8f},
                              {"temperature 1 (no filter)", 0, 1.0f, 1.0f}};
  std::printf("%-40s %8s %12s %12s %7s\n", "setting", "vocab", "sort us/tok", "corolla us", "ratio");
  for (int vocab : {49152, 128256}) {
    std::mt19937 rng(1);
    std::normal_distribution<float> noise(0, 2.5f);
    std::vector<std::vector<float>> rows(16, std::vector<float>(static_cast<size_t>(vocab)));
    for (auto& row : rows)
      for (auto& v : row) v = noise(rng);
    for (const Setting& s : settings) {
      SamplingParams p;
      p.greedy = false;
      p.top_k = s.top_k;
      p.top_p = s.top_p;
      p.temperature = s.temperature;
      SortingSampler sorting(p);
      Sampler sampler(p);
      double sort_s = 0, ours_s = 0;
      int64_t checksum = 0;
      for (int t = 0; t < tokens; ++t) {  // in turn, so both see the same machine
        const auto& row = rows[static_cast<size_t>(t) % rows.size()];
        auto t0 = std::chrono::steady_clock::now();
        checksum += sorting.next(row);
        auto t1 = std::chrono::steady_clock::now();
        checksum += sampler.next(row, {});
        auto t2 = std::chrono::steady_clock::now();
        sort_s += std::chrono::duration<double>(t1 - t0).count();
        ours_s += std::chrono::duration<double>(t2 - t1).count();
      }
      std::printf("%-40s %8d %12.1f %12.1f %6.1fx%s\n", s.name, vocab, 1e6 * sort_s / tokens, 1e6 * ours_s / tokens,
                  sort_s / ours_s, checksum < 0 ? " " : "");
    }
  }
}
