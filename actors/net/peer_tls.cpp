#include "actors/net/peer_tls.hpp"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <boost/asio/ssl/context.hpp>
#include <fstream>
#include <sstream>

#include "actors/config/config_error.hpp"
#include "actors/trust/swarm_certificates.hpp"

namespace corolla {
namespace {

namespace ssl = boost::asio::ssl;

constexpr size_t kMaxPemBytes = 1u << 20;

std::string read_pem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(std::string(what) + " '" + path + "' cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  if (s.size() > kMaxPemBytes) throw ConfigError(std::string(what) + " '" + path + "' is larger than 1 MiB: not PEM");
  return s;
}

std::string openssl_reason() {
  char reason[256] = "no reason given";
  if (const unsigned long e = ERR_peek_last_error()) ERR_error_string_n(e, reason, sizeof reason);
  ERR_clear_error();
  return reason;
}

template <auto Free>
struct freer {
  template <class T>
  void operator()(T* p) const {
    Free(p);
  }
};

X509* parse_x509(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* cert = bio ? PEM_read_bio_X509(bio, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(bio);
  ERR_clear_error();
  return cert;
}

// That `node` was issued by `authority` and is valid now (the same check every peer will make).
void check_issued(const std::string& node_pem, const std::string& authority_pem, const SwarmCredentials& c) {
  std::unique_ptr<X509, freer<X509_free>> node(parse_x509(node_pem)), ca(parse_x509(authority_pem));
  if (!ca) throw ConfigError("swarm_authority '" + c.authority + "' is not a PEM X.509 certificate");
  if (!node) throw ConfigError("certificate '" + c.certificate + "' is not a PEM X.509 certificate");
  if (X509_check_ca(ca.get()) == 0)
    throw ConfigError("swarm_authority '" + c.authority + "' is not a certificate authority's certificate (" +
                      describe_certificate(authority_pem) + ")");
  std::unique_ptr<X509_STORE, freer<X509_STORE_free>> store(X509_STORE_new());
  std::unique_ptr<X509_STORE_CTX, freer<X509_STORE_CTX_free>> ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), node.get(), nullptr) != 1)
    throw ConfigError("cannot check certificate '" + c.certificate + "': " + openssl_reason());
  if (X509_verify_cert(ctx.get()) != 1) {
    const int err = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    throw ConfigError("certificate '" + c.certificate + "' (" + describe_certificate(node_pem) +
                      ") does not check against swarm_authority '" + c.authority + "' (" +
                      describe_certificate(authority_pem) + "): " + X509_verify_cert_error_string(err));
  }
}

std::unique_ptr<ssl::context> tls13_context() {
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls);
  SSL_CTX* raw = ctx->native_handle();
  // Every node runs this code: TLS 1.3 only, and no session tickets (connections live long; resumption would only
  // add state).
  SSL_CTX_set_min_proto_version(raw, TLS1_3_VERSION);
  SSL_CTX_set_num_tickets(raw, 0);
  return ctx;
}

void use_identity(ssl::context& ctx, const std::string& cert_pem, const std::string& key_pem,
                  const std::string& cert_name, const std::string& key_name) {
  boost::system::error_code ec;
  ctx.use_certificate(boost::asio::buffer(cert_pem), ssl::context::pem, ec);
  if (ec) throw ConfigError("certificate " + cert_name + " cannot be used: " + ec.message());
  ctx.use_private_key(boost::asio::buffer(key_pem), ssl::context::pem, ec);
  if (ec && ec.message().find("mismatch") != std::string::npos)
    throw ConfigError("private_key " + key_name + " does not belong to certificate " + cert_name);
  if (ec)
    throw ConfigError("private_key " + key_name + " cannot be used (encrypted keys are not read): " + ec.message());
  if (SSL_CTX_check_private_key(ctx.native_handle()) != 1) {
    ERR_clear_error();
    throw ConfigError("private_key " + key_name + " does not belong to certificate " + cert_name);
  }
}

}  // namespace

PeerTls::~PeerTls() = default;

std::shared_ptr<PeerTls> PeerTls::make(const SwarmCredentials& c) {
  if (!c.encrypted()) return nullptr;
  if (auto p = check_credentials(c)) throw ConfigError("'" + p->key + "' " + p->problem);
  std::shared_ptr<PeerTls> tls(new PeerTls);
  tls->context_ = tls13_context();
  auto& ctx = *tls->context_;
  if (c.private_swarm()) {
    const std::string authority = read_pem(c.authority, "swarm_authority");
    const std::string cert = read_pem(c.certificate, "certificate");
    const std::string key = read_pem(c.private_key, "private_key");
    check_issued(cert, authority, c);
    use_identity(ctx, cert, key, "'" + c.certificate + "'", "'" + c.private_key + "'");
    boost::system::error_code ec;
    ctx.add_certificate_authority(boost::asio::buffer(authority), ec);
    if (ec) throw ConfigError("swarm_authority '" + c.authority + "' cannot be used: " + ec.message());
    // Both ends present a certificate and check the other's against the authority: membership, not host names.
    ctx.set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
    tls->members_only_ = true;
    tls->description_ =
        "private swarm of " + describe_certificate(authority) + "; this node is " + describe_certificate(cert);
  } else {
    const PemPair drawn = make_self_signed_certificate("corolla node", 30);
    use_identity(ctx, drawn.certificate, drawn.private_key, "(drawn at start)", "(drawn at start)");
    ctx.set_verify_mode(ssl::verify_none);
    tls->description_ = "public swarm, links encrypted (no membership check)";
  }
  return tls;
}

}  // namespace corolla
