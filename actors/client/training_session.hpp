// A training session: the swarm as a block runner (training_api.hpp). Stateless towards the servers, like Petals:
// the forward sends each span's input to a server of the span and keeps it; the backward sends it again with the
// gradient, the server recomputing its forward before its backward.
//
// Requests and replies above the streaming threshold cross processes as chunks (actors/protocol/wire_stream.hpp).
//
// Batches above max_batch_tokens are split into sub-batches, each on a chain of its own (spread_batch: where it
// would finish earliest, so in proportion to the servers' forward rates), run concurrently. A server that fails a
// request (error, timeout, lost connection) is left out for the rest of the session (and reported to the swarm client,
// which bans it) and its span is re-planned over the others (possibly several servers) by the swarm client; in a
// backward the new servers first recompute the forward of that span from the kept input, so the step completes.
//
// Spot checks (spot_check.hpp): a hop's forward is recomputed on other servers of its blocks with probability
// 1 / spot_checks.every, and always on a server this session has not checked yet; a hop that lied is replaced as a
// failed server is, so the forward's output is an honest run's. Backwards are not checked.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <set>
#include <string>
#include <vector>

#include "actors/client/route_planner.hpp"
#include "actors/client/session_messages.hpp"
#include "actors/client/spot_check.hpp"
#include "actors/client/training_api.hpp"
#include "actors/protocol/wire_stream.hpp"

namespace corolla {

// The session's whole interface: training_session_actor, and the chunks of large replies from servers.
using training_session_internal =
    training_session_actor::extend<caf::replies_to<wire_chunk>::with<ack>, caf::reacts_to<stream_sweep_atom>>;

struct training_session_options {
  caf::timespan request_timeout = std::chrono::seconds(30);
  std::string adapter;
  int64_t max_batch_tokens = 4096;
  int64_t num_blocks = 0;
  stream_limits streams;           // large requests and replies cross processes in chunks (wire_stream.hpp)
  spot_check_options spot_checks;  // which forwards are recomputed elsewhere and compared (spot_check.hpp)
  uint64_t seed = 0;               // of the draw of forwards to check (the simulator replays it)
};

// The swarm client's answer to open_training_request: a session over `servers` (those holding the adapter asked
// for), once a route covers every block; no_route otherwise. Routes avoid `banned` servers while others cover
// the blocks.
caf::expected<training_session_actor> open_training_session(
    caf::actor_system& sys, caf::actor connector, swarm_client_internal client, std::vector<server_info> servers,
    std::set<std::string> banned, const open_training_request& req, caf::timespan request_timeout, int64_t num_blocks,
    stream_limits streams = {}, spot_check_options spot_checks = {}, uint64_t seed = 0);

// `servers`: the swarm as the client sees it now. `client` (optional): the swarm client, asked for replacement
// routes (replan_request) and told of servers that fail (peer_report, which bans them; training requests take far
// longer than inference steps, so their latencies are not reported); without one the session re-plans over
// `servers` itself.
training_session_internal spawn_training_session(caf::actor_system& sys, caf::actor connector,
                                                 swarm_client_internal client, std::vector<server_info> servers,
                                                 std::set<std::string> banned, training_session_options options);

}  // namespace corolla
