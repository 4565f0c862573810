#include "sim/invariants.hpp"

#include <algorithm>
#include <cstdint>

#include "sim/scenario.hpp"

namespace corolla::sim {

const std::vector<std::string>& invariant_names() {
  static const std::vector<std::string> names = {"session-progress", "session-outcome", "session-output",
                                                 "cache-released",   "block-coverage",  "dht-readable",
                                                 "request-answered", "forged-refused"};
  return names;
}

invariant_bounds bounds_for(const scenario& sc) {
  const auto& w = sc.workload;
  invariant_bounds b;
  // A step waits at most request_timeout_s for a server, then recovery may search for recovery_timeout_s; an
  // open that finds no route is retried every 20 s. Twice the longest of these, plus the network's timeout.
  b.stall_s = 2 * (w.recovery_timeout_s + 2 * w.request_timeout_s + 20) + 4 * sc.network.connection_timeout_s;
  // A client's close reaches its servers within a request; a server learns that a vanished client's session
  // actor is gone when the link goes down (connection_timeout_s).
  b.settle_s = 2 * w.request_timeout_s + 4 * sc.network.connection_timeout_s + 10;
  // A gap is seen once the dead server's records expire (twice the announce period), then some balancer must
  // check: with one server that is an exponential wait of mean mean_balance_check_s; 6 means leave e^-6 of it.
  b.cover_s = 2 * sc.announce_period_s + 6 * sc.mean_balance_check_s + 60;
  // An announcement every period, at most one period stale, stored on replicas within a lookup's time.
  b.dht_s = 2 * sc.announce_period_s + 30;
  return b;
}

std::optional<std::string> CoverageWatch::observe(double t_s, bool coverable, bool covered) {
  if (covered || !coverable) {
    gap_since_.reset();
    reported_ = false;
    return std::nullopt;
  }
  if (!gap_since_) gap_since_ = t_s;
  if (reported_ || t_s - *gap_since_ <= bound_s_) return std::nullopt;
  reported_ = true;
  return "a block has gone unserved for " + std::to_string(static_cast<int64_t>(t_s - *gap_since_)) +
         " s while the live servers could serve the model twice (bound " +
         std::to_string(static_cast<int64_t>(bound_s_)) + " s)";
}

bool spare_capacity(const std::vector<int64_t>& live_spans, int64_t blocks) {
  int64_t total = 0;
  for (int64_t s : live_spans) total += std::min(s, blocks);
  return blocks > 0 && total >= 2 * blocks;
}

}  // namespace corolla::sim
