// Ed25519 through OpenSSL: RFC 8032's test vectors, and that verification refuses what it must without throwing.
#define BOOST_TEST_MODULE ed25519
#include <boost/test/unit_test.hpp>

#include "actors/trust/ed25519.hpp"

using namespace corolla;

namespace {

template <size_t N>
std::array<uint8_t, N> from_hex(const std::string& hex) {
  std::array<uint8_t, N> out{};
  BOOST_REQUIRE(hex.size() == 2 * N);
  for (size_t i = 0; i < N; ++i) out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

std::string bytes_of(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

}  // namespace

// RFC 8032, section 7.1: TEST 1 (the empty message) and TEST 3 (two bytes).
BOOST_AUTO_TEST_CASE(rfc8032_vectors) {
  struct vector {
    std::string seed, public_key, message, signature;
  };
  const vector vectors[] = {
      {"9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
       "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
       "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe2"
       "4655141438e7a100b"},
      {"c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
       "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
       "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28"
       "dc027beceea1ec40a"},
  };
  for (const auto& v : vectors) {
    const SigningKey key = SigningKey::from_seed(from_hex<32>(v.seed));
    BOOST_TEST(to_hex(key.public_key()) == v.public_key);
    const std::string message = bytes_of(v.message);
    const Signature sig = key.sign(message);
    BOOST_TEST((sig == from_hex<64>(v.signature)));
    BOOST_TEST(verify_signature(key.public_key(), message, sig));
  }
}

BOOST_AUTO_TEST_CASE(verification_refuses_other_messages_keys_and_garbage) {
  const SigningKey alice = SigningKey::generate(), bob = SigningKey::generate();
  BOOST_TEST(to_hex(alice.public_key()) != to_hex(bob.public_key()));
  const Signature sig = alice.sign("block 12 of llama");
  BOOST_TEST(verify_signature(alice.public_key(), "block 12 of llama", sig));
  BOOST_TEST(!verify_signature(alice.public_key(), "block 13 of llama", sig));
  BOOST_TEST(!verify_signature(bob.public_key(), "block 12 of llama", sig));
  Signature flipped = sig;
  flipped[10] ^= 1;
  BOOST_TEST(!verify_signature(alice.public_key(), "block 12 of llama", flipped));
  // A key that is not a point of the curve, and an all-ones signature: false, never an exception. (A key of small
  // order, such as all zeros, verifies some signatures nobody made; it gains its holder nothing, for a key is
  // only ever believed for the records under its own subkey, which nobody honest holds.)
  PublicKey junk;
  junk.fill(0xff);
  BOOST_TEST(!verify_signature(junk, "x", sig));
  BOOST_TEST(!verify_signature(junk, "x", Signature{}));
  Signature ones;
  ones.fill(0xff);
  BOOST_TEST(!verify_signature(alice.public_key(), "x", ones));
}

BOOST_AUTO_TEST_CASE(a_seed_makes_the_same_key) {
  const SigningKey a = SigningKey::generate();
  const SigningKey b = SigningKey::from_seed(a.seed());
  BOOST_TEST(to_hex(a.public_key()) == to_hex(b.public_key()));
  BOOST_TEST(verify_signature(b.public_key(), "m", a.sign("m")));
}

BOOST_AUTO_TEST_CASE(hex_round_trip_and_refusals) {
  const SigningKey a = SigningKey::generate();
  const auto back = public_key_from_hex(to_hex(a.public_key()));
  BOOST_REQUIRE(back.has_value());
  BOOST_TEST((*back == a.public_key()));
  BOOST_TEST(!public_key_from_hex("").has_value());
  BOOST_TEST(!public_key_from_hex(to_hex(a.public_key()).substr(1)).has_value());
  BOOST_TEST(!public_key_from_hex(std::string(64, 'g')).has_value());
}
