#include "actors/trust/ed25519.hpp"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <stdexcept>

namespace corolla {
namespace {

struct md_ctx_free {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
struct pkey_free {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

[[noreturn]] void openssl_failed(const char* what) {
  ERR_clear_error();
  throw std::runtime_error(std::string("Ed25519: ") + what + " failed in OpenSSL");
}

}  // namespace

SigningKey SigningKey::generate() {
  KeySeed seed;
  if (RAND_bytes(seed.data(), static_cast<int>(seed.size())) != 1) openssl_failed("drawing a random key");
  return from_seed(seed);
}

SigningKey SigningKey::from_seed(const KeySeed& seed) {
  SigningKey k;
  k.seed_ = seed;
  EVP_PKEY* raw = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, seed.data(), seed.size());
  if (!raw) openssl_failed("loading a private key");
  k.key_ = std::shared_ptr<void>(raw, [](void* p) { EVP_PKEY_free(static_cast<EVP_PKEY*>(p)); });
  size_t len = k.public_key_.size();
  if (EVP_PKEY_get_raw_public_key(raw, k.public_key_.data(), &len) != 1 || len != k.public_key_.size())
    openssl_failed("deriving the public key");
  return k;
}

Signature SigningKey::sign(std::string_view message) const {
  std::unique_ptr<EVP_MD_CTX, md_ctx_free> ctx(EVP_MD_CTX_new());
  Signature sig{};
  size_t len = sig.size();
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, static_cast<EVP_PKEY*>(key_.get())) != 1 ||
      EVP_DigestSign(ctx.get(), sig.data(), &len, reinterpret_cast<const unsigned char*>(message.data()),
                     message.size()) != 1 ||
      len != sig.size())
    openssl_failed("signing");
  return sig;
}

bool verify_signature(const PublicKey& key, std::string_view message, const Signature& signature) {
  std::unique_ptr<EVP_PKEY, pkey_free> pkey(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, key.data(), key.size()));
  std::unique_ptr<EVP_MD_CTX, md_ctx_free> ctx(EVP_MD_CTX_new());
  const bool ok = pkey && ctx && EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, pkey.get()) == 1 &&
                  EVP_DigestVerify(ctx.get(), signature.data(), signature.size(),
                                   reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
  ERR_clear_error();  // a bad key or signature leaves errors on this thread's queue
  return ok;
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
