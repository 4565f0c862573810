// Atoms of the runtime, and CAF told that a Tensor never crosses processes as itself (messages that do are in
// messages.hpp, with Cap'n Proto encodings).
#pragma once

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"

namespace corolla {

using resolve_atom = caf::atom_constant<caf::atom("resolve")>;
using relay_atom = caf::atom_constant<caf::atom("relay")>;
using connected_atom = caf::atom_constant<caf::atom("connected")>;
using register_atom = caf::atom_constant<caf::atom("register")>;
using sweep_atom = caf::atom_constant<caf::atom("sweep")>;
using refresh_atom = caf::atom_constant<caf::atom("refresh")>;
using token_atom = caf::atom_constant<caf::atom("token")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using step_atom = caf::atom_constant<caf::atom("step")>;
using generate_atom = caf::atom_constant<caf::atom("generate")>;
using close_atom = caf::atom_constant<caf::atom("close")>;
using route_atom = caf::atom_constant<caf::atom("route")>;
// A swarm client's standing of the servers it has used (std::vector<peer_standing>).
using reputation_atom = caf::atom_constant<caf::atom("reputation")>;
using open_atom = caf::atom_constant<caf::atom("open")>;
using address_atom = caf::atom_constant<caf::atom("address")>;
using state_atom = caf::atom_constant<caf::atom("state")>;
using blocks_atom = caf::atom_constant<caf::atom("blocks")>;
using span_atom = caf::atom_constant<caf::atom("span")>;
using load_atom = caf::atom_constant<caf::atom("load")>;
using balance_atom = caf::atom_constant<caf::atom("balance")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;

}  // namespace corolla

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::Tensor)
