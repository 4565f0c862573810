// An inference session: one chain of servers holding this conversation's KV caches. It embeds tokens, sends
// hidden states through the chain (client relay: server by server; push: to the first server with the route,
// the last replying), samples, and streams tokens out.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <memory>
#include <vector>

#include "actors/client/client_api.hpp"
#include "actors/client/route_planner.hpp"

namespace corolla {

struct session_options {
  route_mode mode = route_mode::push;
  caf::timespan request_timeout = std::chrono::seconds(30);
  int64_t max_length = 2048;
  int64_t batch = 1;
  std::string adapter;  // LoRA adapter every server applies ("" = none)
};

// The session answers (open_atom) with an ack once every server of `route` has opened its part.
caf::actor spawn_inference_session(caf::actor_system& sys, std::shared_ptr<const ClientHead> head,
                                   caf::actor connector, session_options options, std::vector<planned_hop> route);

}  // namespace corolla
