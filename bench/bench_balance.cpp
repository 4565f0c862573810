// How evenly servers started with --num_blocks cover a model: 12 heterogeneous servers over 24 blocks, the
// production actors (gate, DHT node, announcer, block loader, balancer) in one process under the deterministic
// scheduler, 30 virtual minutes per run. The figure is the weakest block's throughput as a fraction of the ideal
// (every server's throughput times its block count, spread evenly over the blocks: no placement does better).
//
//   bench_balance [--seeds=20] [--minutes=30] [--qualities=0.75,0.9,1.01] [--spread=10] [--fixed=1]
//
// Per seed, one swarm (throughputs log-uniform in 100/spread..100 tokens/s per block, spans of 4..12 blocks) is
// run side by side:
//   together                   every server starts at the same instant, then joins and rebalances
//   one by one                 each server starts once the previous one is placed, then rebalances
//   ... no rebalancing         the same starts with balance_quality 0 (the initial choice only; --fixed=0 skips)
//   best placement found       an offline search (annealing from 100 random placements), for scale: the ideal
//                              is often out of reach with whole spans
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "support/balance_swarm.hpp"

using namespace corolla;
using namespace corolla::test;

namespace {

constexpr int64_t kBlocks = 24;

struct outcome {
  double ratio = 0;  // min block / ideal
  size_t moves = 0;
};

double ideal_of(const std::vector<swarm_member_spec>& specs) {
  double sum = 0;
  for (const auto& s : specs) sum += s.throughput * static_cast<double>(s.num_blocks);
  return sum / kBlocks;
}

outcome run(const std::vector<swarm_member_spec>& specs, bool together, double quality, int minutes, uint64_t seed) {
  BalanceSwarm w(kBlocks);
  swarm_options o;
  o.balance_quality = quality;
  o.seed = seed;
  w.start(specs, o, together);
  w.advance(std::chrono::minutes(minutes));
  return {w.min_block() / w.ideal(), w.moves()};
}

// Sorted block strengths of a placement (compared lexicographically: the weakest block first).
std::vector<double> sorted_strengths(const std::vector<swarm_member_spec>& specs, const std::vector<int64_t>& start) {
  std::vector<double> t(kBlocks, 0.0);
  for (size_t i = 0; i < specs.size(); ++i)
    for (int64_t b = start[i]; b < start[i] + specs[i].num_blocks; ++b)
      t[static_cast<size_t>(b)] += specs[i].throughput;
  std::sort(t.begin(), t.end());
  return t;
}

// The best weakest block an annealing search finds over whole-span placements.
double best_found(const std::vector<swarm_member_spec>& specs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  double best = 0;
  for (int restart = 0; restart < 100; ++restart) {
    std::vector<int64_t> start(specs.size());
    auto random_start = [&](size_t i) {
      return std::uniform_int_distribution<int64_t>(0, kBlocks - specs[i].num_blocks)(rng);
    };
    for (size_t i = 0; i < specs.size(); ++i) start[i] = random_start(i);
    auto cur = sorted_strengths(specs, start);
    double temperature = 5;
    for (int it = 0; it < 4000; ++it, temperature *= 0.999) {
      const size_t i = rng() % specs.size();
      const int64_t old = start[i];
      start[i] = random_start(i);
      auto next = sorted_strengths(specs, start);
      const double gain = (next[0] - cur[0]) + 0.1 * (next[1] - cur[1]) + 0.01 * (next[2] - cur[2]);
      if (next >= cur || std::uniform_real_distribution<double>(0, 1)(rng) < std::exp(gain / temperature))
        cur = std::move(next);
      else
        start[i] = old;
    }
    best = std::max(best, cur[0]);
  }
  return best;
}

struct row {
  std::string name;
  std::vector<outcome> runs;
  void print() const {
    std::vector<double> r;
    size_t moves = 0;
    for (const auto& o : runs) {
      r.push_back(o.ratio);
      moves += o.moves;
    }
    std::sort(r.begin(), r.end());
    const auto at_goal = std::count_if(r.begin(), r.end(), [](double x) { return x >= 0.8; });
    std::printf("| %-36s | %.3f | %.3f | %.3f | %.3f | %ld/%zu | %.1f |\n", name.c_str(), r.front(), r[r.size() / 4],
                r[r.size() / 2], r.back(), static_cast<long>(at_goal), r.size(),
                static_cast<double>(moves) / static_cast<double>(runs.size()));
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int seeds = std::stoi(bench::arg(argc, argv, "seeds", "20"));
  const int minutes = std::stoi(bench::arg(argc, argv, "minutes", "30"));
  const double spread = std::stod(bench::arg(argc, argv, "spread", "10"));
  const bool fixed = bench::arg(argc, argv, "fixed", "1") != "0";
  std::vector<double> qualities;
  std::stringstream list(bench::arg(argc, argv, "qualities", "0.75,0.9,1.01"));
  for (std::string q; std::getline(list, q, ',');) qualities.push_back(std::stod(q));

  std::vector<row> together(qualities.size()), one_by_one(qualities.size());
  for (size_t q = 0; q < qualities.size(); ++q) {
    together[q].name = "together, balance_quality " + std::to_string(qualities[q]).substr(0, 4);
    one_by_one[q].name = "one by one, balance_quality " + std::to_string(qualities[q]).substr(0, 4);
  }
  row together_fixed{"together, no rebalancing", {}}, one_by_one_fixed{"one by one, no rebalancing", {}},
      optimum{"best placement found (offline search)", {}};
  const double t0 = bench::wall_s();
  for (int s = 1; s <= seeds; ++s) {
    std::mt19937_64 rng(static_cast<uint64_t>(s));
    std::vector<swarm_member_spec> specs;
    for (int i = 0; i < 12; ++i) {
      const double throughput = 100 / spread * std::pow(spread, std::uniform_real_distribution<double>(0, 1)(rng));
      const int64_t blocks = std::uniform_int_distribution<int64_t>(4, 12)(rng);
      specs.push_back({std::round(throughput * 10) / 10, blocks});
    }
    const auto seed = static_cast<uint64_t>(s);
    optimum.runs.push_back({best_found(specs, seed) / ideal_of(specs), 0});
    std::fprintf(stderr, "seed %d: best found %.3f", s, optimum.runs.back().ratio);
    if (fixed) {
      together_fixed.runs.push_back(run(specs, true, 0, minutes, seed));
      one_by_one_fixed.runs.push_back(run(specs, false, 0, minutes, seed));
      std::fprintf(stderr, ", no rebalancing: together %.3f, one by one %.3f", together_fixed.runs.back().ratio,
                   one_by_one_fixed.runs.back().ratio);
    }
    for (size_t q = 0; q < qualities.size(); ++q) {
      together[q].runs.push_back(run(specs, true, qualities[q], minutes, seed));
      one_by_one[q].runs.push_back(run(specs, false, qualities[q], minutes, seed));
      std::fprintf(stderr, "; q %.2f: together %.3f (%zu moves), one by one %.3f (%zu moves)", qualities[q],
                   together[q].runs.back().ratio, together[q].runs.back().moves, one_by_one[q].runs.back().ratio,
                   one_by_one[q].runs.back().moves);
    }
    std::fprintf(stderr, "\n");
  }
  std::printf(
      "12 servers, 24 blocks, throughputs %.0f..100, %d seeds, %d virtual minutes each (%.0f s of wall time)\n\n",
      100 / spread, seeds, minutes, bench::wall_s() - t0);
  std::printf("| start | min/ideal worst | 25th pct | median | best | runs >= 0.8 | moves per run |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const auto& r : together) r.print();
  for (const auto& r : one_by_one) r.print();
  if (fixed) {
    one_by_one_fixed.print();
    together_fixed.print();
  }
  optimum.print();
  return 0;
}
