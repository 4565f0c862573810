#include "actors/trust/ed25519.hpp"

#include <sodium.h>

#include <stdexcept>

namespace corolla {
namespace {

// libsodium must be initialised once before use (it picks its implementations); idempotent and thread-safe.
void ensure_sodium() {
  static const bool ready = sodium_init() >= 0;
  if (!ready) throw std::runtime_error("Ed25519: libsodium failed to initialise");
}

}  // namespace

SigningKey SigningKey::generate() {
  ensure_sodium();
  KeySeed seed;
  randombytes_buf(seed.data(), seed.size());
  return from_seed(seed);
}

SigningKey SigningKey::from_seed(const KeySeed& seed) {
  ensure_sodium();
  SigningKey k;
  k.seed_ = seed;
  if (crypto_sign_seed_keypair(k.public_key_.data(), k.secret_.data(), seed.data()) != 0)
    throw std::runtime_error("Ed25519: deriving the key pair failed");
  return k;
}

Signature SigningKey::sign(std::string_view message) const {
  Signature sig{};
  if (crypto_sign_detached(sig.data(), nullptr, reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                           secret_.data()) != 0)
    throw std::runtime_error("Ed25519: signing failed");
  return sig;
}

bool verify_signature(const PublicKey& key, std::string_view message, const Signature& signature) {
  ensure_sodium();
  // libsodium refuses non-canonical signatures and small-order keys as well as wrong ones.
  return crypto_sign_verify_detached(signature.data(), reinterpret_cast<const unsigned char*>(message.data()),
                                     message.size(), key.data()) == 0;
}

std::string to_hex(const PublicKey& key) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(key.size() * 2);
  for (uint8_t b : key) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

std::optional<PublicKey> public_key_from_hex(std::string_view hex) {
  PublicKey key{};
  if (hex.size() != key.size() * 2) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < key.size(); ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    key[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return key;
}

}  // namespace corolla
