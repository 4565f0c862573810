// What an inference or training session asks of its swarm client while it recovers from a failure (in-process
// messages).
#pragma once

#include <caf/allowed_unsafe_message_type.hpp>
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "actors/client/client_api.hpp"
#include "actors/client/route_planner.hpp"
#include "actors/protocol/errors.hpp"

namespace corolla {

// A new chain for blocks [first, last) from the swarm's current servers, skipping banned peers and `avoid`.
// Answered with the hops (std::vector<planned_hop>) or an error (errc::no_route).
struct replan_request {
  int64_t first = 0, last = 0;
  int64_t min_cache_tokens = 0;
  std::set<std::string> avoid;
  std::string adapter;  // only servers that hold this LoRA adapter ("" = any)
  // A spot check's verifier: banned and busy servers stay out even when nothing else covers the blocks, and only
  // the servers known already are planned over (better no check than one that waits on failing servers or DHT
  // lookups).
  bool strict = false;
};

// How a request to a server went: a success with its latency, or a failure (the peer is then banned).
struct peer_report {
  std::string peer;  // peer_id (route_planner.hpp): the server's key, or its address when its record named none
  bool ok = true;
  double latency_ms = 0;
  std::string what;      // the failure, for the log
  bool checked = false;  // only: a spot check of the peer passed, its first steps need no check any more
  int64_t busy_ms = 0;   // > 0: not a failure but too_busy (a quota), with the server's retry hint: the peer is
                         // avoided that long, its reputation untouched
};

// The report of a request to `peer` that failed with `e`.
inline peer_report failure_report(std::string peer, const caf::error& e) {
  peer_report r{std::move(peer), false, 0, describe(e), false, 0};
  if (auto wait = retry_after(e)) r.busy_ms = std::max<int64_t>(1, wait->count());
  return r;
}

// The swarm client as its sessions (inference and training) see it: its users' interface, and what sessions ask
// of it while they recover.
using swarm_client_internal =
    swarm_client_actor::extend<caf::replies_to<replan_request>::with<std::vector<planned_hop>>,
                               caf::reacts_to<peer_report>>;

}  // namespace corolla

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::replan_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::peer_report)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<corolla::planned_hop>)
