// TLS for peer links (the peer gateway terminates it: peer_gateway.hpp). Built once per actor system from the
// node's SwarmCredentials, before the system starts (corolla_config::tls):
//   - a private swarm: mutual TLS 1.3; a peer gets in only with a certificate the swarm's authority issued, and
//     this node presents its own (both directions: servers, DHT nodes and clients alike);
//   - a public swarm with tls = true: TLS 1.3 with a certificate drawn at start and no membership check
//     (encryption without authentication; the DHT records' signatures and the identity proofs still say who is
//     who);
//   - neither: no PeerTls at all.
// Why not CAF's openssl module: the gateway must read what a peer sends before CAF's BASP broker does, so the
// bytes have to be clear where the gateway stands; CAF gets them over a local socket pair.
#pragma once

#include <memory>
#include <string>

#include "actors/config/swarm_credentials.hpp"

namespace boost::asio::ssl {
class context;
}

namespace corolla {

class PeerTls {
 public:
  // Nullptr when `c` asks for no encryption. Reads and checks the files (the key fits the certificate, the
  // authority issued it, it has not expired); throws ConfigError naming the file and the problem.
  static std::shared_ptr<PeerTls> make(const SwarmCredentials& c);
  ~PeerTls();

  boost::asio::ssl::context& context() { return *context_; }
  // Whether peers must hold a certificate of this node's swarm.
  bool members_only() const { return members_only_; }
  // "private swarm CN=..., member CN=..." or "public swarm, encrypted", for the node's start-up line.
  const std::string& description() const { return description_; }

 private:
  PeerTls() = default;
  std::unique_ptr<boost::asio::ssl::context> context_;
  bool members_only_ = false;
  std::string description_;
};

}  // namespace corolla
