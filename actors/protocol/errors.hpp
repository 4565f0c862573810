// Corolla's error codes: errors are values (caf::error in this category, with a message a human can act on).
// No exception crosses an actor boundary.
#pragma once

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/message.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace corolla {

enum class errc : uint8_t {
  ok = 0,
  bad_request,          // malformed or inconsistent request (wrong shapes, wrong types)
  out_of_cache,         // the server cannot reserve the KV cache asked for
  max_length_exceeded,  // a step beyond the session's max_length
  unknown_session,
  unknown_block,
  peer_unavailable,  // a peer did not answer, or its connection was lost
  timeout,
  internal,            // a bug or an unexpected failure inside the server
  no_route,            // no chain of servers covers the blocks asked for
  unexpected_message,  // the peer does not speak this message's protocol (a DHT-only node asked to serve, a
                       // peer of another version): a client takes it for a failed server, not its own mistake
  wrong_output,        // a server's output was malformed, or disagreed with a recomputation elsewhere (a spot check)
  too_busy,            // the client is at one of its quotas on this server (actors/server/peer_quotas.hpp); the
                       // error carries when to try again (retry_after), and the client routes elsewhere meanwhile
};

inline constexpr caf::atom_value kErrorCategory = caf::atom("corolla");

caf::error make_error(errc code, std::string message);
// A too_busy error: the message, and after how long trying again may succeed (its context holds both).
caf::error make_busy_error(std::string message, std::chrono::milliseconds retry_after);
// The retry hint of a too_busy error (nullopt for any other error).
std::optional<std::chrono::milliseconds> retry_after(const caf::error& e);
std::string errc_name(errc code);
// "out_of_cache: the server has 100 cache tokens left, 512 asked" for Corolla errors, CAF's rendering otherwise.
std::string describe(const caf::error& e);
// True when `e` is a Corolla error with this code.
bool is(const caf::error& e, errc code);

// Renderer to register with actor_system_config::add_error_category(kErrorCategory, render_error).
std::string render_error(uint8_t code, caf::atom_value category, const caf::message& context);

}  // namespace corolla
