// What an inference session asks of its swarm client while it recovers from a failure (in-process messages).
#pragma once

#include <caf/allowed_unsafe_message_type.hpp>
#include <set>
#include <string>
#include <vector>

#include "actors/client/route_planner.hpp"

namespace corolla {

// A new chain for blocks [first, last) from the swarm's current servers, skipping banned peers and `avoid`.
// Answered with the hops (std::vector<planned_hop>) or an error (errc::no_route).
struct replan_request {
  int64_t first = 0, last = 0;
  int64_t min_cache_tokens = 0;
  std::set<std::string> avoid;
  std::string adapter;  // only servers that hold this LoRA adapter ("" = any)
};

// How a request to a server went: a success with its latency, or a failure (the peer is then banned).
struct peer_report {
  std::string peer;  // peer_id (route_planner.hpp): the server's key, or its address when its record named none
  bool ok = true;
  double latency_ms = 0;
  std::string what;  // the failure, for the log
};

}  // namespace corolla

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::replan_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::peer_report)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<corolla::planned_hop>)
