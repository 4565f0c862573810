#include "actors/trust/swarm_certificates.hpp"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <ctime>
#include <memory>
#include <stdexcept>

namespace corolla {
namespace {

template <auto Free>
struct freer {
  template <class T>
  void operator()(T* p) const {
    Free(p);
  }
};
using pkey_ptr = std::unique_ptr<EVP_PKEY, freer<EVP_PKEY_free>>;
using x509_ptr = std::unique_ptr<X509, freer<X509_free>>;
using bio_ptr = std::unique_ptr<BIO, freer<BIO_free>>;
using bn_ptr = std::unique_ptr<BIGNUM, freer<BN_free>>;
using ext_ptr = std::unique_ptr<X509_EXTENSION, freer<X509_EXTENSION_free>>;

// The reason OpenSSL gives for the last failure (its error queue emptied), after `what`.
[[noreturn]] void failed(const std::string& what) {
  char reason[256] = "no reason given";
  if (const unsigned long e = ERR_peek_last_error()) ERR_error_string_n(e, reason, sizeof reason);
  ERR_clear_error();
  throw std::runtime_error("certificate: " + what + " failed in OpenSSL (" + reason + ")");
}

void check_request(const std::string& name, int days) {
  // X.509 bounds a common name to 64 characters.
  if (name.empty() || name.size() > 64)
    throw std::invalid_argument("a certificate's name must have 1 to 64 characters");
  for (unsigned char c : name)
    if (c < 0x20 || c == 0x7f) throw std::invalid_argument("a certificate's name must not hold control characters");
  if (days < 1 || days > 36500) throw std::invalid_argument("a certificate's validity must be 1 to 36500 days");
}

pkey_ptr new_key() {
  pkey_ptr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"));
  if (!key) failed("drawing an Ed25519 key");
  return key;
}

void add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  ext_ptr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) failed(std::string("adding extension ") + OBJ_nid2sn(nid));
}

// A version-3 certificate for `key` named `name`, valid from an hour ago (clocks differ) for `days` days, issued
// (and to be signed) by `issuer` (itself when null).
x509_ptr new_certificate(EVP_PKEY* key, const std::string& name, int days, X509* issuer) {
  x509_ptr cert(X509_new());
  if (!cert || X509_set_version(cert.get(), 2) != 1) failed("creating a certificate");
  bn_ptr serial(BN_new());
  if (!serial || BN_rand(serial.get(), 128, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      !BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())))
    failed("drawing a serial number");
  if (!X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) ||
      !X509_time_adj_ex(X509_getm_notAfter(cert.get()), days, 0, nullptr))
    failed("setting the validity");
  X509_NAME* subject = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(name.data()),
                                 static_cast<int>(name.size()), -1, 0) != 1)
    failed("naming the certificate");
  if (X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : subject) != 1 ||
      X509_set_pubkey(cert.get(), key) != 1)
    failed("setting the issuer and key");
  return cert;
}

// What a node's certificate says, issued or self-signed: not an authority, usable by either end of a connection
// (a node accepts peers and connects to them).
void add_node_extensions(X509* cert, X509* issuer) {
  add_extension(cert, issuer, NID_basic_constraints, "critical,CA:FALSE");
  add_extension(cert, issuer, NID_key_usage, "critical,digitalSignature");
  add_extension(cert, issuer, NID_ext_key_usage, "serverAuth,clientAuth");
}

void sign(X509* cert, EVP_PKEY* issuer_key) {
  if (X509_sign(cert, issuer_key, nullptr) <= 0) failed("signing the certificate");  // Ed25519: no digest
}

std::string pem_of(EVP_PKEY* key) {
  bio_ptr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    failed("writing a key");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string pem_of(X509* cert) {
  bio_ptr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) failed("writing a certificate");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

bio_ptr read_only(const std::string& pem) {
  if (pem.size() > (1u << 20)) throw std::invalid_argument("a PEM file larger than 1 MiB is not a key or certificate");
  bio_ptr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) failed("reading PEM text");
  return bio;
}

x509_ptr parse_certificate(const std::string& pem) {
  auto bio = read_only(pem);
  x509_ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  return cert;
}

std::string name_of(const X509_NAME* name) {
  bio_ptr bio(BIO_new(BIO_s_mem()));
  if (!bio || X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_ONELINE & ~ASN1_STRFLGS_ESC_MSB) < 0) return "?";
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

}  // namespace

PemPair make_swarm_authority(const std::string& name, int days) {
  check_request(name, days);
  auto key = new_key();
  auto cert = new_certificate(key.get(), name, days, nullptr);
  // A CA that signs node certificates only, never another CA.
  add_extension(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
  add_extension(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
  add_extension(cert.get(), cert.get(), NID_subject_key_identifier, "hash");
  sign(cert.get(), key.get());
  return {pem_of(key.get()), pem_of(cert.get())};
}

PemPair issue_node_certificate(const PemPair& authority, const std::string& node_name, int days) {
  check_request(node_name, days);
  auto ca_cert = parse_certificate(authority.certificate);
  if (!ca_cert) throw std::invalid_argument("the authority's certificate is not a PEM X.509 certificate");
  pkey_ptr ca_key;
  {
    auto bio = read_only(authority.private_key);
    ca_key.reset(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
    ERR_clear_error();
  }
  if (!ca_key) throw std::invalid_argument("the authority's key is not a PEM private key (or it is encrypted)");
  if (X509_check_private_key(ca_cert.get(), ca_key.get()) != 1) {
    ERR_clear_error();
    throw std::invalid_argument("the authority's key does not belong to its certificate");
  }
  if (X509_check_ca(ca_cert.get()) == 0)
    throw std::invalid_argument("the authority's certificate is not a certificate authority's");
  auto key = new_key();
  auto cert = new_certificate(key.get(), node_name, days, ca_cert.get());
  add_node_extensions(cert.get(), ca_cert.get());
  add_extension(cert.get(), ca_cert.get(), NID_subject_key_identifier, "hash");
  add_extension(cert.get(), ca_cert.get(), NID_authority_key_identifier, "keyid:always");
  sign(cert.get(), ca_key.get());
  return {pem_of(key.get()), pem_of(cert.get())};
}

PemPair make_self_signed_certificate(const std::string& name, int days) {
  check_request(name, days);
  auto key = new_key();
  auto cert = new_certificate(key.get(), name, days, nullptr);
  add_node_extensions(cert.get(), cert.get());
  sign(cert.get(), key.get());
  return {pem_of(key.get()), pem_of(cert.get())};
}

std::string describe_certificate(const std::string& certificate_pem) {
  x509_ptr cert;
  try {
    cert = parse_certificate(certificate_pem);
  } catch (const std::exception& e) {
    return e.what();
  }
  if (!cert) return "not a PEM X.509 certificate";
  std::string text =
      name_of(X509_get_subject_name(cert.get())) + ", issued by " + name_of(X509_get_issuer_name(cert.get()));
  std::tm until{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert.get()), &until) == 1) {
    char day[32];
    std::strftime(day, sizeof day, "%Y-%m-%d", &until);
    text += std::string(", valid until ") + day;
  }
  if (X509_check_ca(cert.get()) != 0) text += " (a certificate authority)";
  ERR_clear_error();
  return text;
}

}  // namespace corolla
