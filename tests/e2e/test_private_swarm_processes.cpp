// Private swarms and TLS across real processes on 127.0.0.1: certificates from `corolla keys`, a DHT node and
// servers of a private swarm, and clients (`corolla generate`) inside and outside it. A member generates exactly
// the tokens of the whole model in one process; an outsider with no certificate, a self-signed one or another
// swarm's is refused at the DHT port and at a server's port, with an error that says why. A relay on the path to
// a server records every byte: without TLS it holds the prompt's activations in the clear (the check can fail);
// with TLS none of them.
#define BOOST_TEST_MODULE private_swarm_processes
#include <boost/test/unit_test.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <fstream>

#include "actors/trust/swarm_certificates.hpp"
#include "model/client_head.hpp"
#include "model/local_model.hpp"
#include "support/golden.hpp"
#include "support/process.hpp"
#include "support/raw_socket.hpp"
#include "support/recording_proxy.hpp"
#include "support/temp_dir.hpp"

using namespace corolla;
using namespace corolla::test;
using namespace std::chrono_literals;

namespace {

constexpr int64_t kNewTokens = 12;

const std::vector<int32_t>& prompt() {
  static const std::vector<int32_t> p{5, 17, 42, 99, 3, 64, 11};
  return p;
}

std::string ids_text(const std::vector<int32_t>& ids, const char* sep) {
  std::string out;
  for (int32_t id : ids) out += (out.empty() ? "" : sep) + std::to_string(id);
  return out;
}

// The greedy continuation by the whole model in this process: what a member must print.
std::string fault_free() {
  auto backend = make_cpu_backend(1);
  LocalModel local(open_weights(model_dir("llama")), *backend);
  GenerationParams p;
  p.max_new_tokens = kNewTokens;
  p.stop_at_eos = false;
  return ids_text(generate(local, prompt(), p), " ");
}

// The bytes the client sends the first server for each prompt token: its embedding row (f32, as the model is).
std::vector<std::string> prompt_activations() {
  auto backend = make_cpu_backend(1);
  ClientHead head(*open_weights(model_dir("llama")), *backend);
  const Tensor h = head.embed(prompt(), 1);
  const size_t row = static_cast<size_t>(h.nbytes()) / prompt().size();
  std::vector<std::string> rows;
  for (size_t i = 0; i < prompt().size(); ++i) rows.emplace_back(static_cast<const char*>(h.data()) + i * row, row);
  return rows;
}

size_t rows_in(const std::string& capture, const std::vector<std::string>& rows) {
  size_t n = 0;
  for (const auto& r : rows) n += capture.find(r) != std::string::npos;
  return n;
}

// The `corolla generate` runs keep their client database (server reputations) under ${COROLLA_CACHE}/client: this
// suite's own directory, not the user's cache, whose database another test's client may hold locked meanwhile
// (the warning it then prints came first in the output these tests read).
struct own_cache_dir {
  TempDir dir;
  own_cache_dir() { setenv("COROLLA_CACHE", dir.str().c_str(), 1); }
};

// Runs a command to its end; its exit status and everything it printed (stdout and stderr).
std::pair<int, std::string> run_to_end(std::vector<std::string> args, std::chrono::seconds limit = 120s) {
  ChildProcess p(corolla_cli(), args, true);
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  try {
    while (std::chrono::steady_clock::now() < deadline) out += p.read_line(limit) + "\n";
  } catch (const std::runtime_error&) {  // it closed its output: it exited
  }
  const int status = p.stop();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// The credentials flags of member `name` of the swarm whose files are in `dir`.
std::vector<std::string> member(const std::string& dir, const std::string& name) {
  return {"--swarm_authority",       dir + "/authority.crt", "--certificate",
          dir + "/" + name + ".crt", "--private_key",        dir + "/" + name + ".key"};
}

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A swarm of the golden llama model: a DHT node and two servers (blocks 0:2 and 2:4), every node with `creds`;
// the first server is reached through a recording proxy (it announces the proxy's address).
struct swarm {
  std::string id;
  std::unique_ptr<DhtProcess> boot;
  std::unique_ptr<RecordingProxy> proxy;
  std::vector<std::unique_ptr<ServerProcess>> servers;

  swarm(const TempDir& dir, const std::string& name, const std::function<std::vector<std::string>(const char*)>& creds)
      : id("private-" + std::to_string(getpid()) + "-" + name) {
    boot = std::make_unique<DhtProcess>(std::vector<std::string>{"--port", "0"} + creds("boot"));
    const uint16_t port = free_port();
    proxy = std::make_unique<RecordingProxy>(port);
    const char* spans[] = {"0:2", "2:4"};
    for (int i = 0; i < 2; ++i) {
      std::vector<std::string> args{"--model",         model_dir("llama"),
                                    "--block_indices", spans[i],
                                    "--initial_peers", boot->address(),
                                    "--swarm_id",      id,
                                    "--data_dir",      dir.str() + "/" + name + "-s" + std::to_string(i),
                                    "--threads",       "1",
                                    "--update_period", "0.5",
                                    "--cache_tokens",  "1024"};
      if (i == 0)
        args = args + std::vector<std::string>{"--port", std::to_string(port), "--announce_address", proxy->address()};
      servers.push_back(std::make_unique<ServerProcess>(args + creds(i == 0 ? "s0" : "s1")));
    }
  }

  // `corolla generate` of the prompt through this swarm with `extra` flags: exit status and output.
  std::pair<int, std::string> generate(const std::vector<std::string>& extra, const std::string& peer = "") const {
    return run_to_end(std::vector<std::string>{"generate", "--model", model_dir("llama"), "--prompt-ids",
                                               ids_text(prompt(), ","), "--max-new-tokens", std::to_string(kNewTokens),
                                               "--ignore-eos", "--threads", "1", "--initial_peers",
                                               peer.empty() ? boot->address() : peer, "--swarm_id", id} +
                      extra);
  }
};

// A TLS 1.3 client that presents no certificate at all (no Corolla node does: a hand-made one): the reason the
// node at 127.0.0.1:`port` ends the connection, or "" when it lets the client in.
std::string tls_without_certificate(uint16_t port) {
  RawSocket socket(port);
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, socket.fd());
  std::string reason;
  char byte = 0;
  // TLS 1.3: the client's handshake completes before the server has judged it; the verdict comes with the read.
  if (SSL_connect(ssl) != 1 || SSL_read(ssl, &byte, 1) != 1) {
    char text[256] = "closed without a reason";
    if (const unsigned long e = ERR_peek_last_error()) ERR_error_string_n(e, text, sizeof text);
    reason = text;
  }
  ERR_clear_error();
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return reason;
}

uint16_t port_of(const std::string& address) {
  return static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

struct certificates {
  TempDir dir;
  std::string swarm = dir.str() + "/swarm", other = dir.str() + "/other";
  certificates() {
    auto keys = [](std::vector<std::string> args) {
      auto [rc, out] = run_to_end(std::vector<std::string>{"keys"} + args, 60s);
      BOOST_REQUIRE_MESSAGE(rc == 0, "corolla keys failed: " << out);
    };
    keys({"authority", "--out", swarm, "--name", "test-swarm"});
    for (const char* n : {"boot", "s0", "s1", "client"}) keys({"issue", "--authority", swarm, "--name", n});
    keys({"authority", "--out", other, "--name", "other-swarm"});
    keys({"issue", "--authority", other, "--name", "intruder"});
    // A certificate nobody issued: what someone who made their own would hold.
    const PemPair self = make_self_signed_certificate("self-made", 30);
    write_file(dir.str() + "/self.crt", self.certificate);
    write_file(dir.str() + "/self.key", self.private_key);
  }
};

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(own_cache_dir);

BOOST_AUTO_TEST_CASE(without_tls_a_relay_on_the_path_reads_the_activations) {
  // The control: the same capture as below, on a public swarm without TLS, does find the prompt's activations.
  TempDir dir;
  swarm s(dir, "plain", [](const char*) { return std::vector<std::string>{}; });
  auto [rc, out] = s.generate({});
  BOOST_TEST_REQUIRE(rc == 0, out);
  BOOST_TEST(out.substr(0, out.find('\n')) == fault_free());
  BOOST_TEST(rows_in(s.proxy->captured(), prompt_activations()) == prompt().size());
}

BOOST_AUTO_TEST_CASE(a_private_swarm_serves_its_members_over_tls_and_refuses_outsiders) {
  certificates certs;
  swarm s(certs.dir, "tls", [&](const char* name) { return member(certs.swarm, name); });

  // A member generates exactly what the model computes, over encrypted links only.
  auto [rc, out] = s.generate(member(certs.swarm, "client"));
  BOOST_TEST_REQUIRE(rc == 0, out);
  BOOST_TEST(out.substr(0, out.find('\n')) == fault_free());
  const std::string capture = s.proxy->captured();
  BOOST_TEST(capture.size() > 4096u, "the relay carried " << capture.size() << " bytes");
  BOOST_TEST(rows_in(capture, prompt_activations()) == 0u);

  // Outsiders, at the DHT node's port and at a server's. A node with --tls alone presents a self-signed
  // certificate (drawn at start); a node that names a self-made certificate as its swarm's authority is stopped
  // by its own start-up check, which says so.
  struct outsider {
    const char* who;
    std::vector<std::string> flags;
    const char* says;
  };
  const std::vector<outsider> outsiders{
      {"no certificate, no TLS", {}, "closed the connection at once"},
      {"a self-signed certificate", {"--tls"}, "refused this node's certificate"},
      {"another swarm's certificate", member(certs.other, "intruder"), "not issued by this swarm's authority"},
  };
  for (const auto& o : outsiders) {
    for (const std::string& peer : {s.boot->address(), s.servers[1]->address()}) {
      BOOST_TEST_CONTEXT(o.who << " at " << peer) {
        auto [orc, oout] = s.generate(o.flags, peer);
        BOOST_TEST(orc != 0, oout);
        BOOST_TEST(oout.find(o.says) != std::string::npos, oout);
        BOOST_TEST(oout.find(fault_free()) == std::string::npos);
      }
    }
  }

  for (const std::string& peer : {s.boot->address(), s.servers[1]->address()}) {
    BOOST_TEST_CONTEXT("TLS without any certificate at " << peer) {
      BOOST_TEST(tls_without_certificate(port_of(peer)).find("certificate required") != std::string::npos);
    }
  }
  const std::string self_made = certs.dir.str() + "/self";
  auto [mrc, mout] = s.generate({"--swarm_authority", self_made + ".crt", "--certificate", self_made + ".crt",
                                 "--private_key", self_made + ".key"});
  BOOST_TEST(mrc != 0, mout);
  BOOST_TEST(mout.find("is not a certificate authority's certificate") != std::string::npos, mout);

  // A server of another swarm cannot join: its bootstrap is refused, so it never appears to members.
  auto [src, sout] =
      run_to_end(std::vector<std::string>{"serve", "--model", model_dir("llama"), "--block_indices", "0:4",
                                          "--initial_peers", s.boot->address(), "--swarm_id", s.id, "--data_dir",
                                          certs.dir.str() + "/intruder", "--threads", "1"} +
                     member(certs.other, "intruder"),
                 60s);
  BOOST_TEST(src != 0, sout);
  BOOST_TEST(sout.find("not issued by this swarm's authority") != std::string::npos, sout);

  // The members are still served.
  auto [rc2, out2] = s.generate(member(certs.swarm, "client"));
  BOOST_TEST_REQUIRE(rc2 == 0, out2);
  BOOST_TEST(out2.substr(0, out2.find('\n')) == fault_free());
}

BOOST_AUTO_TEST_CASE(a_public_swarm_with_tls_encrypts_without_checking_membership) {
  TempDir dir;
  swarm s(dir, "public-tls", [](const char*) { return std::vector<std::string>{"--tls"}; });
  auto [rc, out] = s.generate({"--tls"});
  BOOST_TEST_REQUIRE(rc == 0, out);
  BOOST_TEST(out.substr(0, out.find('\n')) == fault_free());
  BOOST_TEST(rows_in(s.proxy->captured(), prompt_activations()) == 0u);
  // A node without TLS cannot talk to it (nor it to one without).
  auto [prc, pout] = s.generate({});
  BOOST_TEST(prc != 0, pout);
  BOOST_TEST(pout.find("closed the connection at once") != std::string::npos, pout);
}
