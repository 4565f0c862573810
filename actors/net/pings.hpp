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

#include "actors/protocol/atoms.hpp"
#include "actors/protocol/messages.hpp"

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

// Pings every address from `self` (any event-based actor, typed or not; resolved through `connector`; timed on the
// actor clock) and adds the samples to `table`; a peer that fails or times out is dropped from it. Calls done when
// every ping has ended.
template <class Self>
void ping_peers(Self* self, const caf::actor& connector, const std::vector<std::string>& addresses,
                std::shared_ptr<rtt_table> table, caf::timespan timeout, std::function<void()> done) {
  if (addresses.empty()) return done();
  auto pending = std::make_shared<size_t>(addresses.size());
  // Shared, not copied into every handler: `done` may carry a whole view of the swarm.
  auto finish = [pending, done = std::make_shared<std::function<void()>>(std::move(done))] {
    if (--*pending == 0) (*done)();
  };
  for (const auto& address : addresses) {
    auto forget = [=](caf::error&) {
      table->ms.erase(address);
      finish();
    };
    self->request(connector, timeout, resolve_atom::value, address)
        .then(
            [=](caf::actor peer) {
              const auto t0 = self->clock().now();
              self->request(peer, timeout, info_request{})
                  .then(
                      [=](const server_info&) {
                        table->add(address,
                                   std::chrono::duration<double, std::milli>(self->clock().now() - t0).count());
                        finish();
                      },
                      forget);
            },
            forget);
  }
}

}  // namespace corolla
