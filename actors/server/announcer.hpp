// The announcer: keeps a server's ServerInfo in the DHT under "{model_prefix}.{block}" for each hosted block.
// Every record is signed by the server's identity (actors/dht/signed_record.hpp). It announces at once, then every
// `period` (entries expire after 2 × period unless refreshed), and at once on a state change. (close_atom) announces
// "offline" and replies when that is stored, so a graceful shutdown is visible to clients before the server goes.
//
//   request(announcer, t, state_atom::value, "online") -> ack   announces now; "online" means the gate's own state
//                                                                (joining while it loads), "offline" overrides it
//   request(announcer, t, close_atom::value) -> ack              "offline", then the announcer exits
// A server moving to other blocks announces "offline" (under its old blocks), moves the gate, then "online"
// (joining under the new blocks while they load, online once they are installed).
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/typed_actor.hpp>
#include <memory>
#include <string>

#include "actors/protocol/unix_clock.hpp"
#include "actors/dht/dht_api.hpp"
#include "actors/protocol/gate_interface.hpp"
#include "actors/trust/ed25519.hpp"

namespace corolla {

struct announcer_options {
  std::shared_ptr<const SigningKey> identity;  // signs every record (required)
  std::string model_prefix;
  caf::timespan period = std::chrono::seconds(60);
  std::string state = "online";
  wall_clock wall;  // what the records' expiries are signed in (the process's; a simulated server's own)
};

// Before each announcement it pings (an info request) the servers announced for the block after its span and
// announces their smoothed round-trip times, which clients use to route.
announcer_handle spawn_announcer(caf::actor_system& sys, announcer_options options, server_info_source gate,
                                 dht_node_actor dht, caf::actor connector);

}  // namespace corolla
