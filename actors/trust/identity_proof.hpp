// Proof that the server at an address holds the key its DHT records name: the client sends random bytes when it
// opens a session (open_session::challenge) or sends a stateless forward (forward_request::challenge: training,
// spot checks), the server signs them (session_opened / forward_reply ::owner, ::proof), the client checks the
// signature against the key the record it routed by names. A record that names someone else's address
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
// Whether a reply from a server routed to by a record naming `expected_owner` ("" when it named none: nothing to
// prove) carries that key and its proof of `challenge`.
inline bool answered_by(std::string_view expected_owner, std::string_view challenge, std::string_view owner,
                        std::string_view proof) {
  return expected_owner.empty() || (owner == expected_owner && identity_proven(owner, challenge, proof));
}

}  // namespace corolla
