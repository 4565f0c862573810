// Reading a swarm's servers from the DHT: every key of its blocks (announcer.hpp), one server per key and address
// (a record naming someone else's address stands beside that server's own; the client's identity check at
// connect tells them apart).
// A server is listed under each group of blocks it serves, and after moving also (as "offline") under its old
// groups until those entries expire: the entry announced last stands for it (keep_standing, announcer.hpp).
// Servers whose standing entry is "offline" are left out.
#pragma once

#include <caf/actor.hpp>
#include <caf/event_based_actor.hpp>
#include <functional>
#include <string>
#include <vector>

#include "actors/protocol/messages.hpp"

namespace corolla {

// Asks `dht` from `self`; calls done with the servers found, in address order. Keys that fail to read are
// skipped (a DHT that answers nothing gives an empty swarm).
void read_swarm(caf::event_based_actor* self, const caf::actor& dht, const std::string& model_prefix,
                int64_t total_blocks, caf::timespan timeout, std::function<void(std::vector<server_info>)> done);

}  // namespace corolla
