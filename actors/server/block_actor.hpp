// One hosted transformer block as an actor. It owns the block's weights and the KV caches of the sessions
// that run through it. Spawned detached by servers: its compute never stalls the scheduler that carries
// messages, heartbeats and timeouts. Under a deterministic scheduler (tests, the simulator) every actor must run
// on the scheduler's one thread, so there it is spawned like any other.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <memory>

#include "model/block.hpp"

namespace corolla {

caf::actor spawn_block_actor(caf::actor_system& sys, std::shared_ptr<Block> block, bool detached = true);

}  // namespace corolla
