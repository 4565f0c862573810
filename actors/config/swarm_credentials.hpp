// What a node or client presents to its peers: nothing (a public swarm without TLS), TLS alone (a public swarm
// whose links are encrypted), or a private swarm's credentials (mutual TLS: only certificates issued by the
// swarm's authority get in; `corolla keys` makes them). The same keys in every TOML file and as flags:
//
//   swarm_authority = "swarm/authority.crt"   # the private swarm's authority certificate
//   certificate = "swarm/server-1.crt"        # this node's certificate, issued by that authority
//   private_key = "swarm/server-1.key"        # its key
//   tls = true                                # without the three above: encrypt only (a public swarm)
//
// A private swarm is always encrypted. Every node of a swarm must use the same setting: a node with TLS and one
// without cannot talk. Plain C++.
#pragma once

#include <optional>
#include <string>

namespace corolla {

class TableReader;

struct SwarmCredentials {
  bool tls = false;         // encrypt every peer link; implied by a private swarm's credentials
  std::string authority;    // PEM file: the private swarm's authority certificate (empty: a public swarm)
  std::string certificate;  // PEM file: this node's certificate, issued by that authority
  std::string private_key;  // PEM file: its private key

  bool private_swarm() const { return !authority.empty(); }
  bool encrypted() const { return tls || private_swarm(); }
  bool operator==(const SwarmCredentials&) const = default;
};

// Reads the four keys of a table into `c` (each read key counts as known to `r`); a bad value fails at its line.
void read_credential_keys(TableReader& r, SwarmCredentials& c);

struct CredentialProblem {
  std::string key;      // the key at fault ("certificate")
  std::string problem;  // in words, to follow the key's name
};
// What is wrong with a whole set of credentials (the three files go together), or nullopt. The files themselves
// are read when the node starts (actors/net/peer_tls.hpp).
std::optional<CredentialProblem> check_credentials(const SwarmCredentials& c);

// The keys as TOML lines, only those set.
std::string credential_toml(const SwarmCredentials& c);

}  // namespace corolla
