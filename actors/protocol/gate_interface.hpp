// A server's gate as typed actor interfaces (actors/server/span_gate.hpp implements them): what any peer may send
// it, and what only the server's own actors send it. Its DHT RPCs are the DHT's interface (dht_rpc_actor,
// actors/dht/dht_messages.hpp). And the server's announcer (actors/server/announcer.hpp), which its balancer and
// its supervisor drive.
#pragma once

#include <caf/typed_actor.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/protocol/atoms.hpp"
#include "actors/protocol/messages.hpp"

namespace corolla {

// What a server tells about itself (its span, model, load and identity).
using server_info_source = caf::typed_actor<caf::replies_to<info_request>::with<server_info>>;

// The session protocol and training's stateless forward and backward (large requests arrive in chunks first).
using gate_session_protocol = server_info_source::extend<
    caf::replies_to<bandwidth_probe>::with<ack>, caf::replies_to<open_session>::with<session_opened>,
    caf::replies_to<step_request>::with<step_reply>, caf::replies_to<close_session>::with<ack>,
    caf::replies_to<wire_chunk>::with<ack>, caf::replies_to<forward_request>::with<forward_reply>,
    caf::replies_to<backward_request>::with<backward_reply>>;

// What only the server's own actors send its gate (the gate refuses these from any other node): its block actors
// once loaded, a move to other blocks (the balancer), the address it was published at.
using span_gate_control = caf::typed_actor<caf::replies_to<blocks_atom, std::vector<caf::actor>>::with<ack>,
                                           caf::replies_to<span_atom, int64_t, int64_t>::with<ack>,
                                           caf::reacts_to<address_atom, std::string>>;

// A server's announcer: a state announced now ("online": the gate's own state, joining while it loads; "offline"
// overrides it), and the offline announcement before it stops.
using announcer_handle =
    caf::typed_actor<caf::replies_to<state_atom, std::string>::with<ack>, caf::replies_to<close_atom>::with<ack>>;

}  // namespace corolla
