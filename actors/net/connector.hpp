// The connector: the one place where a peer's address ("HOST:PORT") becomes an actor handle. Production uses
// CAF's middleman (with a cache; a lost connection drops the entry so the next resolve reconnects). Actors that
// live in this process can be registered under an address, so in-process swarms use the same code path, and the
// simulator can register proxies that model the network. Once a registered actor stops, its address fails to
// resolve at once (it is this process's own port: dialling it would reach this node itself) until it is registered
// again.
//
//   request(connector, timeout, resolve_atom::value, "127.0.0.1:31331") -> caf::actor
//   request(connector, timeout, relay_atom::value, "127.0.0.1:31331", caf::make_message(request)) -> its reply
//   send(connector, register_atom::value, "inproc:server-1", actor)
//
// A relay hands the message to the actor at the address as its sender's own request (the reply goes straight
// back to the sender; an address that cannot be resolved gets the resolve's error): one request where a
// resolve and a request were two, for the RPCs that need no handle afterwards (the DHT's).
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <string>

namespace corolla {

caf::actor spawn_connector(caf::actor_system& sys);

// Splits "HOST:PORT"; returns false when it is not one (the port must be 1..65535).
bool parse_address(const std::string& address, std::string& host, uint16_t& port);

}  // namespace corolla
