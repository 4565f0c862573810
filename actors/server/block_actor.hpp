// One hosted transformer block as an actor. It owns the block's weights and the KV caches of the sessions
// that run through it. Spawned detached: its compute never stalls the scheduler that carries messages,
// heartbeats and timeouts.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <memory>

#include "model/block.hpp"

namespace corolla {

caf::actor spawn_block_actor(caf::actor_system& sys, std::shared_ptr<Block> block);

}  // namespace corolla
