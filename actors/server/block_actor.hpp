// One hosted transformer block as an actor. It owns the block's weights and the KV caches of the sessions
// that run through it. Spawned detached by servers: its compute never stalls the scheduler that carries
// messages, heartbeats and timeouts. Under a deterministic scheduler (tests, the simulator) every actor must run
// on the scheduler's one thread, so there it is spawned like any other.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <memory>

#include <map>
#include <string>

#include "actors/server/block_messages.hpp"
#include "model/block.hpp"
#include "model/lora.hpp"

namespace corolla {

// LoRA adapters a server loaded, by name.
using adapter_set = std::map<std::string, std::shared_ptr<const LoraAdapter>>;

// `backend`: the one `block` was loaded on; the actor keeps it alive, since a step may still run when the server
// that loaded the block lets go of it (shutting down, or failing). `cache_tokens`: the block's KV pool, in tokens
// (rounded up to whole pages: the server's budget counts the same pages, CacheBudget), its keys and values held in
// `kv_dtype` (Block::make_pool). `detached` false: on the
// scheduler (the deterministic simulator); true in servers. `adapters` (optional): what requests may name; the block
// applies its share of the one named.
block_actor_handle spawn_block_actor(caf::actor_system& sys, std::shared_ptr<Block> block,
                                     std::shared_ptr<Backend> backend, int64_t cache_tokens, DType kv_dtype,
                                     bool detached = true, std::shared_ptr<const adapter_set> adapters = nullptr);

}  // namespace corolla
