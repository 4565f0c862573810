// Proof that the server at an address holds the key its DHT records name: the client sends random bytes when it
// opens a session (open_session::challenge), the server signs them (session_opened::owner, ::proof), the client
// checks the signature against the key the record it routed by names. A record that names someone else's address
// fails there: the server at that address answers with its own key, or none. Plain C++.
#pragma once

#include <string>
#include <string_view>

#include "actors/trust/ed25519.hpp"

namespace corolla {

inline constexpr size_t kChallengeBytes = 32;
inline constexpr size_t kMaxChallengeBytes = 64;

// kChallengeBytes fresh random bytes (OpenSSL's generator).
std::string make_challenge();
// The server's signature of `challenge` (64 bytes, as a string).
std::string prove_identity(const SigningKey& key, std::string_view challenge);
// Whether `proof` is `owner_hex`'s signature of `challenge`. Never throws.
bool identity_proven(std::string_view owner_hex, std::string_view challenge, std::string_view proof);

}  // namespace corolla
