#include "actors/balance/rebalance.hpp"

#include <algorithm>
#include <stdexcept>

#include "actors/balance/block_selection.hpp"

namespace corolla {
namespace {

// The tolerance of the final quality comparison (Petals' eps).
constexpr double kEps = 1e-3;

struct sim_span {
  int64_t first, last;
  double rate;
};

void add(std::vector<double>& t, const sim_span& s, double amount) {
  for (int64_t b = s.first; b < s.last; ++b) t[static_cast<size_t>(b)] += amount;
}

double min_of(const std::vector<double>& t) { return t.empty() ? 0 : *std::min_element(t.begin(), t.end()); }

// Takes `s` out, finds its best start (preferring its own on a near tie), and puts it there.
bool best_response(std::vector<double>& t, sim_span& s) {
  add(t, s, -s.rate);
  const int64_t start = rechoose_first_block(t, s.last - s.first, s.first, s.rate);
  const bool moved = start != s.first;
  s.last = start + (s.last - s.first);
  s.first = start;
  add(t, s, s.rate);
  return moved;
}

}  // namespace

double check_quality(double balance_quality, bool settling, int64_t sessions) {
  if (balance_quality <= 0 || !settling || sessions > 0) return balance_quality;
  return std::max(balance_quality, 1.0);
}

rebalance_check check_rebalance(const std::vector<server_info>& swarm, const std::string& self_address,
                                int64_t total_blocks, double balance_quality, std::mt19937_64& rng) {
  std::vector<sim_span> spans;
  size_t self = swarm.size();
  for (const auto& s : swarm) {
    const int64_t first = std::max<int64_t>(0, s.first_block), last = std::min(s.last_block, total_blocks);
    if (s.address == self_address) self = spans.size();
    spans.push_back({first, std::max(first, last), s.throughput > 0 ? s.throughput : 1.0});
  }
  if (self == swarm.size()) throw std::invalid_argument("server " + self_address + " is not in the swarm given");
  const sim_span here = spans[self];
  if (here.first >= here.last) throw std::invalid_argument("server " + self_address + " serves no block");

  rebalance_check out;
  std::vector<double> t = block_throughputs(swarm, total_blocks);
  out.current_min = min_of(t);
  out.reachable_min = out.current_min;

  // Never leave a block uncovered while this server loads elsewhere.
  for (int64_t b = here.first; b < here.last; ++b) {
    bool covered = false;
    for (size_t i = 0; i < swarm.size() && !covered; ++i)
      covered = i != self && swarm[i].state == "online" && swarm[i].first_block <= b && b < swarm[i].last_block;
    if (!covered) {
      out.new_first = here.first;
      out.reason = "block " + std::to_string(b) + " has no other online server";
      return out;
    }
  }

  // This server's best place, then everyone else's best responses until the placement settles.
  sim_span moved = here;
  if (!best_response(t, moved)) {
    out.new_first = here.first;
    out.reason = "already at its best place";
    return out;
  }
  out.new_first = moved.first;
  spans[self] = moved;
  std::vector<size_t> order(spans.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Each round either moves nobody (done) or improves some server's window; the cap only guards against a cycle
  // of exact ties.
  for (int round = 0; round < 100; ++round) {
    std::shuffle(order.begin(), order.end(), rng);
    bool any = false;
    for (size_t i : order) any = best_response(t, spans[i]) || any;
    if (!any) break;
  }
  out.reachable_min = min_of(t);
  if (out.reachable_min <= 0 || out.reachable_min < out.current_min) {
    out.reason = "moving would not raise the weakest block";
    return out;
  }
  out.quality = out.current_min / out.reachable_min;
  out.move = out.quality < balance_quality - kEps;
  out.reason =
      "balance quality " + std::to_string(out.quality) + (out.move ? " < " : " >= ") + std::to_string(balance_quality);
  return out;
}

}  // namespace corolla
