// corolla keys: a private swarm's certificates, as PEM files a user copies to the nodes.
//
//   corolla keys authority --out swarm --name my-swarm       swarm/authority.key (keep it safe), authority.crt
//   corolla keys issue --authority swarm --name server-1     swarm/server-1.key and server-1.crt
//   corolla keys show swarm/server-1.crt                     whose it is, who issued it, until when
//
// A member needs three files: the authority's certificate, its own certificate and its key (node TOML keys
// swarm_authority, certificate, private_key; or the flags of the same names). The authority's key only issues.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "actors/trust/swarm_certificates.hpp"
#include "apps/corolla/commands.hpp"

namespace corolla::cli {
namespace {

namespace fs = std::filesystem;

struct KeysOptions {
  std::string out = ".";
  std::string authority_dir;
  std::string name;
  int days = 0;
  std::string show;
};

// Names become file names: letters, digits, '.', '_' and '-' only.
void check_name(const std::string& name) {
  if (name.empty() || name.size() > 64 || name.front() == '.')
    throw std::invalid_argument("--name must have 1 to 64 characters and not start with '.'");
  for (unsigned char c : name)
    if (!std::isalnum(c) && c != '.' && c != '_' && c != '-')
      throw std::invalid_argument("--name may hold letters, digits, '.', '_' and '-' only (it names the files), got '" +
                                  name + "'");
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Writes a new file (never over an existing one: a key overwritten by mistake is a swarm lost); keys are readable
// by their owner only.
void write_new(const fs::path& path, const std::string& text, bool secret) {
  if (fs::exists(path)) throw std::runtime_error(path.string() + " exists already: remove it or choose another --out");
  const mode_t old = ::umask(secret ? 077 : 022);
  std::ofstream out(path, std::ios::binary);
  ::umask(old);
  if (!out || !(out << text) || !(out.flush()))
    throw std::runtime_error("cannot write " + path.string() + ": " + std::strerror(errno));
}

int make_authority(const KeysOptions& o) {
  check_name(o.name);
  fs::create_directories(o.out);
  const PemPair authority = make_swarm_authority(o.name, o.days);
  const fs::path key = fs::path(o.out) / "authority.key", cert = fs::path(o.out) / "authority.crt";
  write_new(key, authority.private_key, true);
  write_new(cert, authority.certificate, false);
  std::cout << "swarm authority: " << describe_certificate(authority.certificate) << "\n"
            << "wrote " << cert.string() << " (every member gets a copy) and " << key.string()
            << " (keep it where you issue certificates; it admits anyone it signs for)\n"
            << "next: corolla keys issue --authority " << o.out << " --name NODE\n";
  return 0;
}

int issue(const KeysOptions& o) {
  check_name(o.name);
  if (o.name == "authority") throw std::invalid_argument("--name 'authority' would overwrite the authority's files");
  const fs::path dir(o.authority_dir);
  PemPair authority{read_file(dir / "authority.key"), read_file(dir / "authority.crt")};
  const PemPair node = issue_node_certificate(authority, o.name, o.days);
  const fs::path out = o.out.empty() ? dir : fs::path(o.out);
  fs::create_directories(out);
  const fs::path key = out / (o.name + ".key"), cert = out / (o.name + ".crt");
  write_new(key, node.private_key, true);
  write_new(cert, node.certificate, false);
  const fs::path authority_copy = out / "authority.crt";
  if (!fs::exists(authority_copy)) write_new(authority_copy, authority.certificate, false);
  std::cout << "certificate: " << describe_certificate(node.certificate) << "\n"
            << "wrote " << cert.string() << " and " << key.string() << "\n"
            << "the node's TOML (or the flags of the same names):\n"
            << "  swarm_authority = \"" << authority_copy.string() << "\"\n"
            << "  certificate = \"" << cert.string() << "\"\n"
            << "  private_key = \"" << key.string() << "\"\n";
  return 0;
}

}  // namespace

Runner add_keys(CLI::App& app) {
  auto o = std::make_shared<KeysOptions>();
  auto* cmd = app.add_subcommand("keys", "Create a private swarm's authority and issue its members' certificates");
  cmd->require_subcommand(1);
  auto* authority = cmd->add_subcommand("authority", "Create a swarm authority: authority.key and authority.crt");
  authority->add_option("--out", o->out, "Directory to write them to (default: here)")->type_name("DIR");
  authority->add_option("--name", o->name, "The swarm's name, written in its certificates")->required();
  authority->add_option("--days", o->days, "Validity in days (default 3650)")->check(CLI::Range(1, 36500));
  auto* issue_cmd = cmd->add_subcommand("issue", "Issue a node's certificate and key, signed by the swarm authority");
  issue_cmd->add_option("--authority", o->authority_dir, "Directory holding authority.key and authority.crt")
      ->required()
      ->type_name("DIR");
  issue_cmd->add_option("--name", o->name, "The node's name: names its files NAME.crt and NAME.key")->required();
  issue_cmd
      ->add_option("--out", o->out,
                   "Directory to write them to, with a copy of authority.crt (default: "
                   "the authority's directory)")
      ->type_name("DIR");
  issue_cmd->add_option("--days", o->days, "Validity in days (default 365)")->check(CLI::Range(1, 36500));
  auto* show = cmd->add_subcommand("show", "Describe a certificate: its name, issuer and validity");
  show->add_option("file", o->show, "A PEM certificate")->required();
  return [o, authority, issue_cmd, show] {
    if (*authority) {
      if (o->days == 0) o->days = 3650;
      return make_authority(*o);
    }
    if (*issue_cmd) {
      if (o->days == 0) o->days = 365;
      if (!issue_cmd->count("--out")) o->out.clear();
      return issue(*o);
    }
    if (*show) {
      std::cout << describe_certificate(read_file(o->show)) << "\n";
      return 0;
    }
    return 2;
  };
}

}  // namespace corolla::cli
