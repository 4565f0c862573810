// An inference session: one chain of servers holding this conversation's KV caches. It embeds tokens, sends
// hidden states through the chain (client relay: server by server; push: to the first server with the route,
// the last replying), samples, and streams tokens out.
//
// Fault tolerance: the session keeps, per hop, every hidden state that hop has taken (its history; in push mode
// each forwarding server sends the client a copy of its output). When a hop fails (its node goes down or
// freezes, a request times out, it replies with a server-side error), the session reports it to the swarm
// client (which bans the server), asks it for a new chain over that hop's blocks only, opens sessions there,
// replays the history to rebuild their caches, and runs the failed step again. Hops that did not fail keep their
// sessions; they answer a repeated step id with the same input from their last output instead of applying it twice
// (with another input, from a replaced server before them, they apply it).
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <memory>
#include <vector>

#include "actors/client/client_api.hpp"
#include "actors/client/route_planner.hpp"
#include "actors/client/session_messages.hpp"
#include "actors/client/spot_check.hpp"
#include "actors/protocol/wire_stream.hpp"

namespace corolla {

using retry_atom = caf::atom_constant<caf::atom("retry")>;

// The session's whole interface: what its users send (inference_session_actor), what its swarm client sends
// (open_atom, once), what servers send (push mode's output copies; verifiers' large replies in chunks), and its
// own timers.
using inference_session_internal =
    inference_session_actor::extend<caf::replies_to<open_atom>::with<ack>, caf::reacts_to<step_reply>,
                                    caf::reacts_to<retry_atom, uint64_t>, caf::replies_to<wire_chunk>::with<ack>,
                                    caf::reacts_to<stream_sweep_atom>>;

struct session_options {
  route_mode mode = route_mode::push;
  caf::timespan request_timeout = std::chrono::seconds(30);
  int64_t max_length = 2048;
  int64_t batch = 1;
  caf::timespan recovery_timeout = std::chrono::seconds(60);
  std::string adapter;  // LoRA adapter every server applies ("" = none); replacements must hold it too
  // Deep prompts [blocks, batch, P, hidden] (undefined: none): each server gets its blocks' share when its part of
  // the session opens (replacements too), and adds them to the tokens at positions < P (so replays get them).
  Tensor prompts;
  spot_check_options spot_checks;  // which steps are recomputed elsewhere and compared (spot_check.hpp)
  stream_limits streams;           // verification forwards and their replies cross processes in chunks
  uint64_t seed = 0;               // of the draw of steps to check (the simulator replays it)
};

// The session answers open_atom with an ack once every server of `route` has opened its part (replacing those
// that fail to open). `client` is the swarm client that plans replacement routes and keeps reputations;
// `head_batcher` (actors/client/head_batcher.hpp) computes the logits of generation steps.
inference_session_internal spawn_inference_session(caf::actor_system& sys, std::shared_ptr<const ClientHead> head,
                                                   caf::actor head_batcher, caf::actor connector,
                                                   swarm_client_internal client, session_options options,
                                                   std::vector<planned_hop> route);

}  // namespace corolla
