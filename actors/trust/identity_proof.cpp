#include "actors/trust/identity_proof.hpp"

#include <openssl/rand.h>

#include <cstring>
#include <stdexcept>

namespace corolla {
namespace {

constexpr std::string_view kContext = "corolla identity proof v1";

std::string message(std::string_view challenge) {
  std::string m(kContext);
  m += '\0';
  m.append(challenge);
  return m;
}

}  // namespace

std::string make_challenge() {
  std::string c(kChallengeBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(c.data()), static_cast<int>(c.size())) != 1)
    throw std::runtime_error("OpenSSL's random generator failed");
  return c;
}

std::string prove_identity(const SigningKey& key, std::string_view challenge) {
  const Signature sig = key.sign(message(challenge));
  return std::string(reinterpret_cast<const char*>(sig.data()), sig.size());
}

bool identity_proven(std::string_view owner_hex, std::string_view challenge, std::string_view proof) {
  const auto owner = public_key_from_hex(owner_hex);
  Signature sig{};
  if (!owner || proof.size() != sig.size() || challenge.empty()) return false;
  std::memcpy(sig.data(), proof.data(), sig.size());
  return verify_signature(*owner, message(challenge), sig);
}

}  // namespace corolla
