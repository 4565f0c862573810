#include "actors/server/network_probe.hpp"

#include <caf/all.hpp>
#include <chrono>
#include <optional>

#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/protocol/messages.hpp"

namespace corolla {
namespace {

constexpr size_t kSmall = 64 << 10, kLarge = 2 << 20;
constexpr int kTries = 3;

// The shortest of kTries round trips of a probe of `bytes`; nullopt when the peer does not take it in the time
// left().
template <class Left>
std::optional<double> best_round_trip(caf::scoped_actor& self, const caf::actor& peer, size_t bytes, Left left) {
  bandwidth_probe probe;
  probe.payload.assign(bytes, '\x5a');
  std::optional<double> best;
  for (int i = 0; i < kTries; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    bool arrived = false;
    self->request(peer, left(), probe)
        .receive([&](const ack&) { arrived = true; }, [&](caf::error& e) { arrived = is(e, errc::bad_request); });
    if (!arrived) return std::nullopt;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!best || s < *best) best = s;
  }
  return best;
}

}  // namespace

network_estimate measure_network(caf::actor_system& sys, const caf::actor& connector,
                                 const std::vector<std::string>& peers, int64_t hidden_size, caf::timespan timeout) {
  network_estimate out;
  caf::scoped_actor self{sys};
  // One budget for everything: a slow or silent peer must not hold up the server's start for long.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left = [&] {
    return std::max<caf::timespan>(std::chrono::milliseconds(1), std::chrono::duration_cast<caf::timespan>(
                                                                     deadline - std::chrono::steady_clock::now()));
  };
  for (const auto& address : peers) {
    if (std::chrono::steady_clock::now() >= deadline) break;
    caf::actor peer;
    self->request(connector, left(), resolve_atom::value, address)
        .receive([&](caf::actor a) { peer = std::move(a); }, [](caf::error&) {});
    if (!peer) continue;
    auto small = best_round_trip(self, peer, kSmall, left);
    auto large = small ? best_round_trip(self, peer, kLarge, left) : std::nullopt;
    if (!small || !large) continue;
    out.peer = address;
    if (*large > *small) {
      out.bytes_per_second = static_cast<double>(kLarge - kSmall) / (*large - *small);
      out.network_rps = out.bytes_per_second / (static_cast<double>(std::max<int64_t>(hidden_size, 1)) * 4);
    }
    return out;
  }
  return out;
}

}  // namespace corolla
