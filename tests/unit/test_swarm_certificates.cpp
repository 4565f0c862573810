// A private swarm's certificates (actors/trust/swarm_certificates.hpp) and the TLS contexts built from them
// (actors/net/peer_tls.hpp): what `corolla keys` issues checks against its authority, and every file a node could
// be given by mistake, or by someone else, is refused at start with a message naming the file and the problem.
#define BOOST_TEST_MODULE swarm_certificates
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>

#include "actors/config/config_error.hpp"
#include "actors/net/peer_tls.hpp"
#include "actors/trust/swarm_certificates.hpp"
#include "support/temp_dir.hpp"

using namespace corolla;
using namespace corolla::test;

namespace {

struct swarm_files {
  TempDir dir;
  PemPair authority = make_swarm_authority("unit-swarm", 30);
  PemPair other = make_swarm_authority("other-swarm", 30);
  PemPair node = issue_node_certificate(authority, "node-1", 30);
  PemPair stranger = issue_node_certificate(other, "stranger", 30);

  std::string write(const std::string& name, const std::string& text) const {
    const std::string path = dir.str() + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  SwarmCredentials credentials(const std::string& ca, const std::string& cert, const std::string& key) const {
    return SwarmCredentials{false, write("ca.pem", ca), write("cert.pem", cert), write("key.pem", key)};
  }
};

std::string config_error(const SwarmCredentials& c) {
  try {
    PeerTls::make(c);
  } catch (const ConfigError& e) {
    return e.what();
  }
  BOOST_FAIL("PeerTls::make accepted what it should refuse");
  return "";
}

void check_contains(const std::string& message, std::initializer_list<std::string> parts) {
  for (const auto& part : parts)
    BOOST_TEST(message.find(part) != std::string::npos, "'" << part << "' is not in: " << message);
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_member_certificate_checks_against_its_authority, swarm_files) {
  auto tls = PeerTls::make(credentials(authority.certificate, node.certificate, node.private_key));
  BOOST_REQUIRE(tls);
  BOOST_TEST(tls->members_only());
  check_contains(tls->description(), {"CN = unit-swarm", "CN = node-1"});
  check_contains(describe_certificate(node.certificate), {"CN = node-1, issued by CN = unit-swarm", "valid until"});
  check_contains(describe_certificate(authority.certificate), {"(a certificate authority)"});
  BOOST_TEST(describe_certificate(node.certificate).find("authority)") == std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(no_credentials_mean_no_tls_and_tls_alone_encrypts_without_membership, swarm_files) {
  BOOST_TEST(!PeerTls::make(SwarmCredentials{}));
  auto tls = PeerTls::make(SwarmCredentials{true, "", "", ""});
  BOOST_REQUIRE(tls);
  BOOST_TEST(!tls->members_only());
}

BOOST_FIXTURE_TEST_CASE(files_that_do_not_make_a_member_are_refused_by_name, swarm_files) {
  // Another swarm's certificate.
  check_contains(config_error(credentials(authority.certificate, stranger.certificate, stranger.private_key)),
                 {"certificate '", "CN = stranger", "does not check against swarm_authority", "CN = unit-swarm"});
  // A key that is not the certificate's.
  check_contains(config_error(credentials(authority.certificate, node.certificate, stranger.private_key)),
                 {"private_key '", "does not belong to certificate"});
  // A node certificate named as the authority.
  check_contains(config_error(credentials(node.certificate, node.certificate, node.private_key)),
                 {"swarm_authority '", "is not a certificate authority's certificate"});
  // A self-made certificate: its own authority, but not one.
  const PemPair self = make_self_signed_certificate("self", 30);
  check_contains(config_error(credentials(self.certificate, self.certificate, self.private_key)),
                 {"is not a certificate authority's certificate"});
  // Not PEM at all, a file too large to be one, a file that is not there, a set with a file missing.
  check_contains(config_error(credentials("garbage", node.certificate, node.private_key)),
                 {"swarm_authority '", "is not a PEM X.509 certificate"});
  check_contains(config_error(credentials(authority.certificate, std::string(2 << 20, 'A'), node.private_key)),
                 {"certificate '", "larger than 1 MiB"});
  check_contains(config_error(SwarmCredentials{false, dir.str() + "/none.crt", write("c", node.certificate),
                                               write("k", node.private_key)}),
                 {"none.crt' cannot be read"});
  check_contains(config_error(SwarmCredentials{false, write("a", authority.certificate), "", ""}),
                 {"'certificate' is not set"});
}

BOOST_AUTO_TEST_CASE(issuing_needs_a_real_authority_and_a_usable_name) {
  const PemPair a = make_swarm_authority("a", 1), b = make_swarm_authority("b", 1);
  BOOST_CHECK_THROW(issue_node_certificate(PemPair{b.private_key, a.certificate}, "n", 1), std::invalid_argument);
  const PemPair leaf = issue_node_certificate(a, "leaf", 1);
  BOOST_CHECK_THROW(issue_node_certificate(leaf, "n", 1), std::invalid_argument);  // a leaf cannot issue
  BOOST_CHECK_THROW(issue_node_certificate(PemPair{"x", "y"}, "n", 1), std::invalid_argument);
  BOOST_CHECK_THROW(make_swarm_authority("", 1), std::invalid_argument);
  BOOST_CHECK_THROW(make_swarm_authority(std::string(65, 'x'), 1), std::invalid_argument);
  BOOST_CHECK_THROW(make_swarm_authority("tab\there", 1), std::invalid_argument);
  BOOST_CHECK_THROW(make_swarm_authority("a", 0), std::invalid_argument);
  BOOST_CHECK_THROW(make_swarm_authority("a", 36501), std::invalid_argument);
  // Two certificates never share a serial number or a key.
  const PemPair n1 = issue_node_certificate(a, "same", 1), n2 = issue_node_certificate(a, "same", 1);
  BOOST_TEST(n1.certificate != n2.certificate);
  BOOST_TEST(n1.private_key != n2.private_key);
  BOOST_TEST(describe_certificate("not a certificate") == "not a PEM X.509 certificate");
}
