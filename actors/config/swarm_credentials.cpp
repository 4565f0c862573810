#include "actors/config/swarm_credentials.hpp"

#include "actors/config/config_file.hpp"

namespace corolla {

void read_credential_keys(TableReader& r, SwarmCredentials& c) {
  bool tls = c.tls;
  const bool has_tls = r.get_bool("tls", tls);
  for (auto [key, out] : {std::pair<const char*, std::string*>{"swarm_authority", &c.authority},
                          {"certificate", &c.certificate},
                          {"private_key", &c.private_key}}) {
    if (r.get_string(key, *out) && out->empty())
      r.fail(key, "must not be empty: give a PEM file (`corolla keys` writes them)");
  }
  if (has_tls) c.tls = tls;
  if (auto p = check_credentials(c)) r.fail(p->key, p->problem);
}

std::optional<CredentialProblem> check_credentials(const SwarmCredentials& c) {
  const bool any = !c.authority.empty() || !c.certificate.empty() || !c.private_key.empty();
  if (!any) return std::nullopt;
  if (c.authority.empty())
    return CredentialProblem{"swarm_authority",
                             "is not set: a certificate belongs to a private swarm, give its authority's "
                             "certificate too (for encryption alone, give tls = true and no certificate)"};
  if (c.certificate.empty())
    return CredentialProblem{"certificate",
                             "is not set: a private swarm's members need their certificate (`corolla keys issue` "
                             "writes one)"};
  if (c.private_key.empty())
    return CredentialProblem{"private_key", "is not set: a private swarm's members need their certificate's key"};
  return std::nullopt;
}

std::string credential_toml(const SwarmCredentials& c) {
  std::string out;
  if (c.tls) out += "tls = true\n";
  if (!c.authority.empty()) out += "swarm_authority = " + toml_quote(c.authority) + "\n";
  if (!c.certificate.empty()) out += "certificate = " + toml_quote(c.certificate) + "\n";
  if (!c.private_key.empty()) out += "private_key = " + toml_quote(c.private_key) + "\n";
  return out;
}

}  // namespace corolla
