// Per-hop overhead of the swarm and the wire's throughput, each measured side by side with its baseline:
//  1. single-token steps through 3 loopback servers (tiny blocks), push and relay, against the same blocks in
//     this process: (swarm median - local median) / 3 hops;
//  2. 8 KiB and 1 MiB activations to an echo actor in another process (Cap'n Proto over CAF) through the peer
//     gateway (as every node connects), through it with a private swarm's mutual TLS on both ends, straight to
//     CAF's middleman, and to a plain TCP echo, in turn;
//  3. large activations (16-256 MiB) to an echo in another process as one message each way, against the same as
//     streams of chunks (actors/protocol/wire_stream.hpp): round-trip throughput and the echo's peak memory.
//
//   bench_hops [MODEL_DIR] [STEPS]        (default: tests/data/models/llama, 300 steps)
//   bench_hops --wire [ROUNDS]            (part 2 only; default 100 rounds)
//   bench_hops --large [MiB ...]          (part 3 only; default 16 64 256 MiB)
//   environment for part 3: BENCH_STREAMED_ONLY=1 (skip the one-message runs), BENCH_WINDOW_MIB, BENCH_CHUNK_KIB
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <limits>
#include <numeric>

#include "actors/client/client_api.hpp"
#include "actors/net/connector.hpp"
#include "actors/net/peer_gateway.hpp"
#include "actors/net/peer_tls.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/system/system_config.hpp"
#include "actors/protocol/wire_stream.hpp"
#include "actors/trust/swarm_certificates.hpp"

using namespace corolla;
using clk = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Starts `corolla serve` and returns (pid, address) once it prints where it serves.
std::pair<pid_t, std::string> start_server(const std::string& model, const std::string& span, int n) {
  int fd[2];
  if (pipe(fd) != 0) throw std::runtime_error("pipe");
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 1);
    close(fd[0]);
    const std::string bin = std::string(COROLLA_BIN_DIR) + "/corolla";
    const std::string dir = "/tmp/corolla-bench-hops-" + std::to_string(getppid()) + "-" + std::to_string(n);
    execl(bin.c_str(), bin.c_str(), "serve", "--model", model.c_str(), "--block_indices", span.c_str(), "--port", "0",
          "--threads", "1", "--data_dir", dir.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fd[1]);
  FILE* out = fdopen(fd[0], "r");
  char line[512] = {0};
  if (!fgets(line, sizeof line, out)) throw std::runtime_error("server did not start");
  std::string s(line);
  s.erase(s.find_last_not_of("\n") + 1);
  return {pid, s.substr(s.rfind(' ') + 1)};
}

void stop(pid_t pid) {
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
}

// --- 1. per-hop overhead -------------------------------------------------------------------------------------
void per_hop(const std::string& model, int steps) {
  std::vector<std::pair<pid_t, std::string>> servers = {start_server(model, "0:2", 0), start_server(model, "2:3", 1),
                                                        start_server(model, "3:4", 2)};
  std::vector<std::string> peers;
  for (auto& s : servers) peers.push_back(s.second);
  auto backend = make_cpu_backend(1);
  auto source = open_weights(model);
  auto head = std::make_shared<const ClientHead>(*source, *backend);
  LocalModel local(source, *backend);

  corolla_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto time_steps = [&](route_mode mode) {
    auto client = spawn_swarm_client(
        sys, {.initial_peers = peers, .mode = mode, .request_timeout = std::chrono::seconds(10)}, head);
    inference_session_actor session;
    self->request(client, caf::infinite, open_session_request{steps + 8, 1})
        .receive([&](inference_session_actor s) { session = s; },
                 [&](caf::error& e) { throw std::runtime_error(describe(e)); });
    std::vector<double> ms;
    for (int i = 0; i < steps; ++i) {
      Tensor h = head->embed(std::vector<int32_t>{static_cast<int32_t>(3 + i % 200)}, 1);
      const auto t0 = clk::now();
      self->request(session, caf::infinite, step_input{h, {i}})
          .receive([](Tensor&) {}, [&](caf::error& e) { throw std::runtime_error(describe(e)); });
      ms.push_back(std::chrono::duration<double, std::milli>(clk::now() - t0).count());
    }
    self->send(session, close_atom::value);
    self->send_exit(client, caf::exit_reason::user_shutdown);
    return median(ms);
  };
  local.reset(1, steps + 8);
  std::vector<double> local_ms;
  for (int i = 0; i < steps; ++i) {
    const int32_t id = 3 + i % 200, pos = i;
    const auto t0 = clk::now();
    // The same blocks as the swarm runs (the head's embedding and logits are outside both timings' difference).
    local.forward({&id, 1}, {&pos, 1}, true);
    local_ms.push_back(std::chrono::duration<double, std::milli>(clk::now() - t0).count());
  }
  const double local_med = median(local_ms);
  const double push = time_steps(route_mode::push), relay = time_steps(route_mode::relay);
  for (auto& s : servers) stop(s.first);
  std::printf("per-hop overhead, 3 loopback servers, %d single-token steps (medians)\n", steps);
  std::printf("  local (same blocks + head, one process): %.3f ms\n", local_med);
  std::printf("  push : %.3f ms/step -> %.3f ms per hop\n", push, (push - local_med) / 3);
  std::printf("  relay: %.3f ms/step -> %.3f ms per hop\n", relay, (relay - local_med) / 3);
  std::printf("  relay / push: %.2f\n", relay / push);
}

// --- 2. 1 MB activations vs a plain TCP echo -----------------------------------------------------------------
caf::behavior echo_actor(caf::event_based_actor*) {
  return {[](forward_request& r) { return forward_reply{std::move(r.hidden), 0, {}, {}, {}}; }};
}

int caf_echo_child(int ready_fd) {
  corolla_config cfg;
  caf::actor_system sys{cfg};
  auto echo = sys.spawn(echo_actor);
  auto port = sys.middleman().publish(echo, 0, "127.0.0.1");
  uint16_t p = port ? *port : 0;
  (void)!write(ready_fd, &p, sizeof p);
  pause();
  return 0;
}

// Credentials of one private swarm, written once before the children fork: the echo's and the client's.
SwarmCredentials g_echo_credentials, g_client_credentials;

void make_swarm_files() {
  const std::string dir = "/tmp/corolla-bench-hops-tls-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const PemPair authority = make_swarm_authority("bench-swarm", 1);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  const std::string ca = write("authority.crt", authority.certificate);
  for (auto* c : {&g_echo_credentials, &g_client_credentials}) {
    const std::string name = c == &g_echo_credentials ? "echo" : "client";
    const PemPair node = issue_node_certificate(authority, name, 1);
    *c = SwarmCredentials{false, ca, write(name + ".crt", node.certificate), write(name + ".key", node.private_key)};
  }
}

// The echo behind the peer gateway, with the private swarm's TLS or without.
int gateway_echo(int ready_fd, bool tls) {
  corolla_config cfg;
  if (tls) cfg.tls = PeerTls::make(g_echo_credentials);
  caf::actor_system sys{cfg};
  auto echo = sys.spawn(echo_actor);
  auto port = publish_to_peers(sys, echo, "127.0.0.1", 0);
  uint16_t p = port ? *port : 0;
  (void)!write(ready_fd, &p, sizeof p);
  pause();
  return 0;
}

int gateway_echo_child(int ready_fd) { return gateway_echo(ready_fd, false); }
int gateway_tls_echo_child(int ready_fd) { return gateway_echo(ready_fd, true); }

int tcp_echo_child(int ready_fd) {
  const int srv = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(srv, reinterpret_cast<sockaddr*>(&a), sizeof a);
  listen(srv, 1);
  socklen_t len = sizeof a;
  getsockname(srv, reinterpret_cast<sockaddr*>(&a), &len);
  uint16_t p = ntohs(a.sin_port);
  (void)!write(ready_fd, &p, sizeof p);
  const int c = accept(srv, nullptr, nullptr);
  int one = 1;
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::vector<char> buf(1 << 20);
  for (;;) {  // length-prefixed messages, echoed back whole
    uint32_t n;
    if (recv(c, &n, 4, MSG_WAITALL) != 4) return 0;
    buf.resize(n);
    if (recv(c, buf.data(), n, MSG_WAITALL) != static_cast<ssize_t>(n)) return 0;
    send(c, &n, 4, 0);
    send(c, buf.data(), n, 0);
  }
}

pid_t spawn_child(int (*body)(int), uint16_t& port) {
  int fd[2];
  if (pipe(fd) != 0) throw std::runtime_error("pipe");
  const pid_t pid = fork();
  if (pid == 0) _exit(body(fd[1]));
  (void)!read(fd[0], &port, sizeof port);
  close(fd[0]);
  close(fd[1]);
  return pid;
}

void throughput(int rounds) {
  make_swarm_files();
  uint16_t caf_port = 0, gw_port = 0, tls_port = 0, tcp_port = 0;
  const pid_t caf_pid = spawn_child(caf_echo_child, caf_port);
  const pid_t gw_pid = spawn_child(gateway_echo_child, gw_port);
  const pid_t tls_pid = spawn_child(gateway_tls_echo_child, tls_port);
  const pid_t tcp_pid = spawn_child(tcp_echo_child, tcp_port);
  const int64_t sizes[] = {8 << 10, 1 << 20};
  std::vector<double> caf_ms[2], gw_ms[2], tls_ms[2], tcp_ms[2];
  {
    corolla_config cfg;
    caf::actor_system sys{cfg};
    caf::scoped_actor self{sys};
    // TLS is a setting of the whole actor system: the TLS client is a system of its own.
    corolla_config tls_cfg;
    tls_cfg.tls = PeerTls::make(g_client_credentials);
    caf::actor_system tls_sys{tls_cfg};
    caf::scoped_actor tls_self{tls_sys};
    auto straight = sys.middleman().remote_actor("127.0.0.1", caf_port);
    if (!straight) throw std::runtime_error("cannot reach the echo actor");
    auto connector = spawn_connector(sys);
    auto tls_connector = spawn_connector(tls_sys);
    caf::actor gated, secured;
    self->request(connector, std::chrono::seconds(10), resolve_atom::value, "127.0.0.1:" + std::to_string(gw_port))
        .receive([&](caf::actor a) { gated = a; }, [](caf::error&) {});
    if (!gated) throw std::runtime_error("cannot reach the echo actor through the gateway");
    std::string why;
    tls_self
        ->request(tls_connector, std::chrono::seconds(10), resolve_atom::value, "127.0.0.1:" + std::to_string(tls_port))
        .receive([&](caf::actor a) { secured = a; }, [&](caf::error& e) { why = describe(e); });
    if (!secured) throw std::runtime_error("cannot reach the echo actor over TLS: " + why);
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(tcp_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::vector<char> buf(1 << 20);
    auto time_caf = [&](caf::scoped_actor& from, const caf::actor& echo, const Tensor& t) {
      const auto t0 = clk::now();
      from->request(echo, std::chrono::seconds(10), forward_request{t, {}, {}, 0, 0, {}, 0, {}, {}})
          .receive([](forward_reply&) {}, [](caf::error& e) { throw std::runtime_error(describe(e)); });
      return std::chrono::duration<double, std::milli>(clk::now() - t0).count();
    };
    // Each round times the three in turn, so they share the machine's moods.
    for (int i = 0; i < rounds; ++i) {
      for (int k = 0; k < 2; ++k) {
        Tensor t = Tensor::empty(DType::f32, {1, sizes[k] / 4 / 512, 512});
        caf_ms[k].push_back(time_caf(self, *straight, t));
        gw_ms[k].push_back(time_caf(self, gated, t));
        tls_ms[k].push_back(time_caf(tls_self, secured, t));
        const auto t0 = clk::now();
        uint32_t n = static_cast<uint32_t>(sizes[k]);
        send(s, &n, 4, 0);
        send(s, buf.data(), n, 0);
        recv(s, &n, 4, MSG_WAITALL);
        recv(s, buf.data(), n, MSG_WAITALL);
        tcp_ms[k].push_back(std::chrono::duration<double, std::milli>(clk::now() - t0).count());
      }
    }
    close(s);
    self->send_exit(connector, caf::exit_reason::user_shutdown);
    tls_self->send_exit(tls_connector, caf::exit_reason::user_shutdown);
  }
  for (pid_t pid : {caf_pid, gw_pid, tls_pid, tcp_pid}) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  std::printf("activation round trips over loopback, %d rounds each, in turn (medians)\n", rounds);
  for (int k = 0; k < 2; ++k) {
    const double c = median(caf_ms[k]), g = median(gw_ms[k]), e = median(tls_ms[k]), t = median(tcp_ms[k]);
    const double mb = 2.0 * static_cast<double>(sizes[k]) / 1e6;
    const char* size = k == 0 ? "8 KiB" : "1 MiB";
    std::printf(
        "  %s: through the peer gateway %.3f ms (%.0f MB/s), with TLS %.3f ms (%.0f MB/s), straight to CAF "
        "%.3f ms (%.0f MB/s), plain TCP %.3f ms (%.0f MB/s)\n",
        size, g, mb / g * 1e3, e, mb / e * 1e3, c, mb / c * 1e3, t, mb / t * 1e3);
    std::printf("  %s: gateway / straight time %.2f, gateway / TCP throughput %.2f\n", size, g / c, t / g);
    // The pairwise difference of the rounds (each round timed both in turn) and its median.
    std::vector<double> added;
    for (size_t i = 0; i < tls_ms[k].size(); ++i) added.push_back(tls_ms[k][i] - gw_ms[k][i]);
    std::printf(
        "  %s: TLS / plain gateway time %.2f, TLS adds %.3f ms per round trip (median of the rounds' "
        "differences)\n",
        size, e / g, median(added));
  }
}

// --- 3. large activations: one message against a stream of chunks ---------------------------------------------
// Both ends use the same limits: `whole` sends every message in one piece, the default streams above 4 MiB.
stream_limits whole_messages() {
  stream_limits l;
  l.threshold = std::numeric_limits<size_t>::max();
  return l;
}

stream_limits g_echo_limits;  // set before the echo process forks

struct stream_peer_state {
  stream_limits limits;
  inbound_streams inbound;
  uint64_t next_stream = 1;
};

// Echoes forward_request's hidden states back, reassembling and streaming as its limits say.
caf::behavior stream_echo(caf::stateful_actor<stream_peer_state>* self, stream_limits limits) {
  self->state.limits = limits;
  self->state.inbound = inbound_streams(limits);
  return {
      [=](forward_request& r) -> caf::result<forward_reply> {
        auto& st = self->state;
        if (auto p = stream_in(st.inbound, caf::actor_cast<caf::actor_addr>(self->current_sender()), r); !p.empty())
          return make_error(errc::bad_request, p);
        auto rp = self->make_response_promise<forward_reply>();
        stream_out(self, caf::actor_cast<caf::actor>(self->current_sender()),
                   forward_reply{std::move(r.hidden), 0, {}, {}, {}}, st.limits, st.next_stream,
                   [=](caf::expected<forward_reply> out) mutable {
                     if (out)
                       rp.deliver(std::move(*out));
                     else
                       rp.deliver(std::move(out.error()));
                   });
        return rp;
      },
      [=](const wire_chunk& c) { return receive_chunk(self, self->state.inbound, c); },
      [=](stream_sweep_atom) { sweep_streams(self, self->state.inbound); },
  };
}

int stream_echo_child(int ready_fd) {
  corolla_config cfg;
  caf::actor_system sys{cfg};
  auto echo = sys.spawn(stream_echo, g_echo_limits);
  auto port = sys.middleman().publish(echo, 0, "127.0.0.1");
  uint16_t p = port ? *port : 0;
  (void)!write(ready_fd, &p, sizeof p);
  pause();
  return 0;
}

using run_atom = caf::atom_constant<caf::atom("run")>;

// Sends `rounds` round trips of `t` to `echo` one after the other; answers with their times in ms.
caf::behavior stream_client(caf::stateful_actor<stream_peer_state>* self, stream_limits limits, caf::actor echo) {
  self->state.limits = limits;
  self->state.inbound = inbound_streams(limits);
  return {
      [=](run_atom, Tensor t, int rounds) -> caf::result<std::vector<double>> {
        auto rp = self->make_response_promise<std::vector<double>>();
        auto times = std::make_shared<std::vector<double>>();
        auto once = std::make_shared<std::function<void()>>();
        // Ends the run: the loop holds itself, so it lets go of itself first.
        auto finish = [=](caf::expected<std::vector<double>> r) mutable {
          *once = nullptr;
          if (r)
            rp.deliver(std::move(*r));
          else
            rp.deliver(std::move(r.error()));
        };
        *once = [=]() mutable {
          const auto t0 = clk::now();
          auto& st = self->state;
          auto on_reply = [=](forward_reply& r) mutable {
            auto problem = stream_in(self->state.inbound, echo.address(), r) + r.wire_error;
            if (problem.empty() && r.hidden.nbytes() != t.nbytes()) problem = "short echo";
            if (!problem.empty()) return finish(make_error(errc::bad_request, problem));
            times->push_back(std::chrono::duration<double, std::milli>(clk::now() - t0).count());
            if (static_cast<int>(times->size()) == rounds) return finish(*times);
            (*once)();
          };
          stream_out(self, echo, forward_request{t, {}, {}, 0, 0, {}, 0, {}, {}}, st.limits, st.next_stream,
                     [=](caf::expected<forward_request> req) mutable {
                       if (!req) return finish(std::move(req.error()));
                       self->request(echo, std::chrono::seconds(120), std::move(*req))
                           .then(on_reply, [=](caf::error& e) mutable { finish(std::move(e)); });
                     });
        };
        (*once)();
        return rp;
      },
      [=](const wire_chunk& c) { return receive_chunk(self, self->state.inbound, c); },
      [=](stream_sweep_atom) { sweep_streams(self, self->state.inbound); },
  };
}

struct large_result {
  double ms = 0;         // median round trip; 0 when it failed
  long echo_rss_mb = 0;  // the echo process's peak resident memory
  std::string error;
};

large_result large_round_trips(stream_limits limits, int64_t bytes, int rounds) {
  g_echo_limits = limits;
  uint16_t port = 0;
  const pid_t pid = spawn_child(stream_echo_child, port);
  large_result out;
  {
    corolla_config cfg;
    caf::actor_system sys{cfg};
    caf::scoped_actor self{sys};
    auto echo = sys.middleman().remote_actor("127.0.0.1", port);
    if (!echo) throw std::runtime_error("cannot reach the echo actor");
    Tensor t = Tensor::empty(DType::f32, {1, bytes / 4 / 2048, 2048});
    auto client = sys.spawn(stream_client, limits, *echo);
    self->request(client, caf::infinite, run_atom::value, t, rounds)
        .receive([&](std::vector<double>& ms) { out.ms = median(ms); },
                 [&](caf::error& e) { out.error = describe(e); });
    self->send_exit(client, caf::exit_reason::user_shutdown);
  }
  kill(pid, SIGKILL);
  int status = 0;
  rusage ru{};
  wait4(pid, &status, 0, &ru);
  out.echo_rss_mb = ru.ru_maxrss / 1024;
  if (WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL)
    out.error += " (the echo process died of signal " + std::to_string(WTERMSIG(status)) + ")";
  else if (WIFEXITED(status))
    out.error += " (the echo process exited with " + std::to_string(WEXITSTATUS(status)) + ")";
  return out;
}

void large(int rounds, std::vector<int64_t> sizes_mib) {
  std::printf("large activation round trips over loopback, %d rounds each (medians; echo = the other process)\n",
              rounds);
  std::printf("  %8s | %-32s | %-32s | %s\n", "payload", "one message each way", "streams of 1 MiB chunks",
              "stream / one");
  for (int64_t mib : sizes_mib) {
    const int64_t bytes = mib << 20;
    const large_result one = std::getenv("BENCH_STREAMED_ONLY") ? large_result{0, 0, "skipped"}
                                                                : large_round_trips(whole_messages(), bytes, rounds);
    stream_limits streamed;
    if (const char* w = std::getenv("BENCH_WINDOW_MIB")) streamed.window_bytes = std::atoll(w) << 20;
    if (const char* c = std::getenv("BENCH_CHUNK_KIB")) streamed.chunk_bytes = std::atoll(c) << 10;
    const large_result chunked = large_round_trips(streamed, bytes, rounds);
    auto cell = [&](const large_result& r) {
      char buf[96];
      if (r.ms == 0)
        std::snprintf(buf, sizeof buf, "failed: %.24s", r.error.c_str());
      else
        std::snprintf(buf, sizeof buf, "%7.1f ms %5.0f MB/s echo %4ld MB", r.ms, 2.0 * bytes / 1e6 / r.ms * 1e3,
                      r.echo_rss_mb);
      return std::string(buf);
    };
    std::printf("  %4lld MiB | %-32s | %-32s | %.2f\n", static_cast<long long>(mib), cell(one).c_str(),
                cell(chunked).c_str(), chunked.ms > 0 && one.ms > 0 ? one.ms / chunked.ms : 0.0);
    if (!one.error.empty()) std::printf("    one message: %s\n", one.error.c_str());
    if (!chunked.error.empty()) std::printf("    streamed: %s\n", chunked.error.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--wire") {
    try {
      throughput(argc > 2 ? std::atoi(argv[2]) : 100);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "--large") {
    std::vector<int64_t> sizes;
    for (int i = 2; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
    if (sizes.empty()) sizes = {16, 64, 256};
    try {
      large(5, sizes);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  const std::string model = argc > 1 ? argv[1] : std::string(COROLLA_SOURCE_DIR_STR) + "/tests/data/models/llama";
  const int steps = argc > 2 ? std::atoi(argv[2]) : 300;
  try {
    per_hop(model, steps);
    throughput(100);
    large(5, {16, 64, 256});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
