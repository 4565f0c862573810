// X.509 certificates of private swarms (OpenSSL 3): a swarm authority, and the node certificates it issues. Every
// connection of a private swarm is mutual TLS (actors/net/peer_tls.hpp): a peer gets in only with a certificate
// the swarm's authority signed. `corolla keys` writes these as PEM files a user can copy. Plain C++.
//
//   PemPair authority = make_swarm_authority("my-swarm", 3650);
//   PemPair node = issue_node_certificate(authority, "server-1", 365);
//
// Keys are Ed25519 (TLS 1.3 signs with them directly); serial numbers are 128 random bits.
#pragma once

#include <string>

namespace corolla {

struct PemPair {
  std::string private_key;  // PKCS#8 PEM
  std::string certificate;  // X.509 PEM
};

// A new swarm authority: a key and a self-signed CA certificate with common name `name`, valid for `days` days.
// Throws std::invalid_argument for an empty name or days outside 1..36500, std::runtime_error when OpenSSL fails.
PemPair make_swarm_authority(const std::string& name, int days);

// A certificate for one node (server, DHT node or client) with common name `node_name`, signed by `authority`
// (both PEM, as make_swarm_authority wrote them), usable by either end of a TLS connection. Throws
// std::invalid_argument when the authority does not parse, its key does not match its certificate, or it is
// not a certificate authority.
PemPair issue_node_certificate(const PemPair& authority, const std::string& node_name, int days);

// A node certificate signed by its own key: what a node of a public swarm with TLS presents (encryption without
// membership), drawn afresh at each start.
PemPair make_self_signed_certificate(const std::string& name, int days);

// "CN=NAME, issued by CN=ISSUER, valid until YYYY-MM-DD" for a PEM certificate (for `corolla keys` and logs), or
// the reason it does not parse.
std::string describe_certificate(const std::string& certificate_pem);

}  // namespace corolla
