// Corolla's error codes: errors are values (caf::error in this category, with a message a human can act on).
// No exception crosses an actor boundary.
#pragma once

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/message.hpp>
#include <cstdint>
#include <string>

namespace corolla {

enum class errc : uint8_t {
  ok = 0,
  bad_request,          // malformed or inconsistent request (wrong shapes, wrong types)
  out_of_cache,         // the server cannot reserve the KV cache asked for
  max_length_exceeded,  // a step beyond the session's max_length
  unknown_session,
  unknown_block,
  peer_unavailable,     // a peer did not answer, or its connection was lost
  timeout,
  internal,             // a bug or an unexpected failure inside the server
  no_route,             // no chain of servers covers the blocks asked for
  unexpected_message,   // the peer does not speak this message's protocol (a DHT-only node asked to serve, a
                        // peer of another version): a client takes it for a failed server, not its own mistake
};

inline constexpr caf::atom_value kErrorCategory = caf::atom("corolla");

caf::error make_error(errc code, std::string message);
std::string errc_name(errc code);
// "out_of_cache: the server has 100 cache tokens left, 512 asked" for Corolla errors, CAF's rendering otherwise.
std::string describe(const caf::error& e);
// True when `e` is a Corolla error with this code.
bool is(const caf::error& e, errc code);

// Renderer to register with actor_system_config::add_error_category(kErrorCategory, render_error).
std::string render_error(uint8_t code, caf::atom_value category, const caf::message& context);

}  // namespace corolla
