// The network part of a route's expected latency, shared by the inference route planner and the batch spreader:
// the time to reach a server from the client, to hand hidden states from one server to the next, and to reply.
// Round trips are smoothed measurements in milliseconds (the client's own pings; the servers' announced pings to
// the servers of their next block); each leg costs half a round trip, capped, and unknown legs a default.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "actors/protocol/messages.hpp"

namespace corolla {

inline constexpr double kDefaultOneWaySeconds = 0.05;  // half an unknown round trip
inline constexpr double kMaxOneWaySeconds = 5;         // a measured half round trip counts at most this much

struct latency_model {
  const std::map<std::string, double>& client_rtt_ms;

  static double one_way(double rtt_ms) { return std::min(rtt_ms / 2000.0, kMaxOneWaySeconds); }

  std::optional<double> measured_client_leg(const server_info& s) const {
    auto it = client_rtt_ms.find(s.address);
    if (it == client_rtt_ms.end()) return std::nullopt;
    return one_way(it->second);
  }
  // Client -> server, or server -> client.
  double client_leg(const server_info& s) const { return measured_client_leg(s).value_or(kDefaultOneWaySeconds); }
  // Server `from` -> server `to`: from's announced ping, else through the client's measurements, else a default.
  double handover(const server_info& from, const server_info& to) const {
    for (const auto& [address, ms] : from.pings)
      if (address == to.address) return one_way(ms);
    auto a = measured_client_leg(from), b = measured_client_leg(to);
    if (a && b) return *a + *b;
    return kDefaultOneWaySeconds;
  }
};

}  // namespace corolla
