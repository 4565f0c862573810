// Round-trip times to peers, measured with info requests and smoothed (EWMA): what routing uses. Servers ping
// the servers of their next block and announce the result; clients ping the servers they may route through.
#pragma once

#include <caf/actor.hpp>
#include <caf/event_based_actor.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace corolla {

inline constexpr double kRttSmoothing = 0.3;  // weight of the newest sample

// Smoothed round trips in milliseconds, by address.
struct rtt_table {
  std::map<std::string, double> ms;
  void add(const std::string& address, double sample_ms) {
    auto [it, fresh] = ms.emplace(address, sample_ms);
    if (!fresh) it->second = kRttSmoothing * sample_ms + (1 - kRttSmoothing) * it->second;
  }
};

// Pings every address from `self` (resolved through `connector`; timed on the actor clock) and adds the samples
// to `table`; a peer that fails or times out is dropped from it. Calls done when every ping has ended.
void ping_peers(caf::event_based_actor* self, const caf::actor& connector, const std::vector<std::string>& addresses,
                std::shared_ptr<rtt_table> table, caf::timespan timeout, std::function<void()> done);

}  // namespace corolla
