// Recovery time of an inference session after a server failure: fault to next token.
//
// A loopback swarm (a DHT bootstrap node, two servers for blocks 0..1 and two for blocks 2..3 of the golden
// llama model, each a `corolla serve` process) and a client in this process. Each trial opens a session,
// generates 32 greedy tokens and, right after the 10th token, kills (SIGKILL) or freezes (SIGSTOP) the server of
// the session's second hop; the time from the fault to the arrival of the next token is the recovery time. The
// faulted server is restarted (same port, same identity) before the next trial. Prints p50 / p90 / p99 / max per
// kind of fault; every output is checked against the fault-free generation.
//   bench_failover [trials=20]
#include <signal.h>

#include <algorithm>
#include <caf/all.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include "actors/client/client_api.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/system/system_config.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

using namespace corolla;
using namespace corolla::test;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

const std::string kModel = std::string(COROLLA_SOURCE_DIR_STR) + "/tests/data/models/llama";

struct swarm {
  TempDir dir;
  DhtProcess boot{{"--port", "0", "--data_dir", dir.str() + "/boot"}};
  std::vector<std::string> spans{"0:2", "0:2", "2:4", "2:4"};
  std::vector<std::string> ports{"0", "0", "0", "0"};
  std::vector<std::unique_ptr<ServerProcess>> servers{4};

  swarm() {
    for (size_t i = 0; i < spans.size(); ++i) start(i);
  }
  void start(size_t i) {
    servers[i] = std::make_unique<ServerProcess>(
        std::vector<std::string>{"--model", kModel, "--block_indices", spans[i], "--port", ports[i], "--initial_peers",
                                 boot.address(), "--data_dir", dir.str() + "/s" + std::to_string(i), "--swarm_id",
                                 "bench-failover", "--update_period", "0.5", "--threads", "1"});
    ports[i] = servers[i]->address().substr(servers[i]->address().rfind(':') + 1);
  }
  size_t slot_of(const std::string& address) const {
    for (size_t i = 0; i < servers.size(); ++i)
      if (servers[i]->address() == address) return i;
    throw std::runtime_error("no server at " + address);
  }
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

}  // namespace

int run(int trials) {
  swarm s;
  corolla_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto backend = make_cpu_backend(1);
  auto head = std::make_shared<const ClientHead>(*open_weights(kModel), *backend);
  swarm_client_options o;
  o.initial_peers = {s.boot.address()};
  o.model_prefix = "bench-failover";
  o.request_timeout = 10s;
  o.bans.base = 100ms;  // each trial restarts the faulted server; a long ban would only shift the load
  auto client = spawn_swarm_client(sys, o, head);
  // The client ends before the actor system is destroyed, also when a trial throws.
  std::shared_ptr<void> end_client(nullptr,
                                   [&](void*) { caf::anon_send_exit(client, caf::exit_reason::user_shutdown); });
  for (size_t seen = 0; seen < s.servers.size();) {  // until every server has announced itself
    self->request(client, 10s, refresh_atom::value)
        .receive([&](std::vector<server_info>& v) { seen = v.size(); }, [&](caf::error&) {});
    std::this_thread::sleep_for(100ms);
  }

  LocalModel local(open_weights(kModel), *backend);
  const std::vector<int32_t> prompt{1, 5, 9, 13, 17, 21, 25, 29};
  GenerationParams gp;
  gp.max_new_tokens = 32;
  gp.stop_at_eos = false;
  const auto want = generate(local, prompt, gp);

  struct kind {
    const char* name;
    int signal;
    std::vector<double> ms;
    std::vector<double> after_detection_ms;  // the session's own measure: from detecting the fault to the step's end
  };
  std::vector<kind> kinds{{"SIGKILL (crash)", SIGKILL, {}, {}}, {"SIGSTOP (freeze)", SIGSTOP, {}, {}}};
  int wrong = 0;
  for (auto& k : kinds)
    for (int t = 0; t < trials; ++t) {
      inference_session_actor session;
      std::string open_error;
      for (int attempt = 0; attempt < 20 && !session; ++attempt) {  // the DHT view may lag behind a restart
        if (attempt > 0) std::this_thread::sleep_for(250ms);
        self->request(client, 60s, open_session_request{64, 1})
            .receive([&](inference_session_actor a) { session = a; }, [&](caf::error& e) { open_error = describe(e); });
      }
      if (!session) throw std::runtime_error("open: " + open_error);
      std::vector<std::string> route;
      self->request(session, 10s, route_atom::value)
          .receive([&](std::vector<std::string>& r) { route = r; }, [&](caf::error&) {});
      const size_t victim = s.slot_of(route.at(1).substr(0, route.at(1).find(' ')));
      auto fault_at = std::make_shared<steady::time_point>();
      auto recovered_at = std::make_shared<steady::time_point>();
      auto count = std::make_shared<int>(0);
      ChildProcess* p = &s.servers[victim]->process();
      const int sig = k.signal;
      auto watcher = sys.spawn([=](caf::event_based_actor*) -> caf::behavior {
        return {[=](token_atom, int32_t) {
          const int n = ++*count;
          if (n == 10) {
            *fault_at = steady::now();
            if (sig == SIGKILL)
              p->kill_hard();
            else
              p->signal(SIGSTOP);
          } else if (n == 11) {
            *recovered_at = steady::now();
          }
        }};
      });
      generate_request req{prompt, gp, watcher};
      self->request(session, 120s, req)
          .receive([&](const generate_result& r) { wrong += r.tokens != want; },
                   [&](caf::error& e) { throw std::runtime_error("generate: " + describe(e)); });
      self->send_exit(watcher, caf::exit_reason::user_shutdown);
      self->request(session, 10s, stats_atom::value)
          .receive(
              [&](session_stats& st) {
                for (double r : st.recovery_seconds) k.after_detection_ms.push_back(r * 1000);
              },
              [&](caf::error&) {});
      self->send(session, close_atom::value);
      k.ms.push_back(std::chrono::duration<double, std::milli>(*recovered_at - *fault_at).count());
      s.servers[victim]->process().kill_hard();  // frozen or dead: no graceful stop to wait for
      s.start(victim);
    }
  std::printf("recovery time, fault to next token (%d trials each; tiny model, so replay compute is negligible)\n",
              trials);
  for (const auto& k : kinds)
    std::printf("  %-18s p50 %7.1f ms   p90 %7.1f ms   p99 %7.1f ms   max %7.1f ms\n", k.name, percentile(k.ms, 0.5),
                percentile(k.ms, 0.9), percentile(k.ms, 0.99), *std::max_element(k.ms.begin(), k.ms.end()));
  std::printf("of which re-routing and replay, from the session's detection of the fault to the step's end:\n");
  for (const auto& k : kinds)
    std::printf("  %-18s p50 %7.1f ms   p99 %7.1f ms\n", k.name, percentile(k.after_detection_ms, 0.5),
                percentile(k.after_detection_ms, 0.99));
  std::printf("outputs different from the fault-free run: %d\n", wrong);
  return wrong == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  try {
    return run(argc > 1 ? std::atoi(argv[1]) : 20);
  } catch (const std::exception& e) {  // the servers are stopped on the way out
    std::fprintf(stderr, "bench_failover: %s\n", e.what());
    return 1;
  }
}
