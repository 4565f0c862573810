#include "actors/system/system_config.hpp"

#include <caf/io/middleman.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "actors/dht/dht_messages.hpp"
#include "actors/net/peer_gateway.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/protocol/messages.hpp"

namespace corolla {

void add_corolla_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<info_request>("corolla.info_request");
  cfg.add_message_type<server_info>("corolla.server_info");
  cfg.add_message_type<open_session>("corolla.open_session");
  cfg.add_message_type<session_opened>("corolla.session_opened");
  cfg.add_message_type<step_request>("corolla.step_request");
  cfg.add_message_type<step_reply>("corolla.step_reply");
  cfg.add_message_type<forward_request>("corolla.forward_request");
  cfg.add_message_type<forward_reply>("corolla.forward_reply");
  cfg.add_message_type<backward_request>("corolla.backward_request");
  cfg.add_message_type<backward_reply>("corolla.backward_reply");
  cfg.add_message_type<close_session>("corolla.close_session");
  cfg.add_message_type<ack>("corolla.ack");
  cfg.add_message_type<bandwidth_probe>("corolla.bandwidth_probe");
  cfg.add_message_type<wire_chunk>("corolla.wire_chunk");
  cfg.add_message_type<dht_ping_request>("corolla.dht_ping_request");
  cfg.add_message_type<dht_ping_reply>("corolla.dht_ping_reply");
  cfg.add_message_type<dht_find_node_request>("corolla.dht_find_node_request");
  cfg.add_message_type<dht_find_node_reply>("corolla.dht_find_node_reply");
  cfg.add_message_type<dht_find_value_request>("corolla.dht_find_value_request");
  cfg.add_message_type<dht_find_value_reply>("corolla.dht_find_value_reply");
  cfg.add_message_type<dht_store_request>("corolla.dht_store_request");
  cfg.add_message_type<dht_store_reply>("corolla.dht_store_reply");
  cfg.add_error_category(kErrorCategory, render_error);
  enable_peer_gateway(cfg);
}

size_t scheduler_threads() {
  const size_t machine = std::max<size_t>(2, std::thread::hardware_concurrency());
  const char* env = std::getenv("COROLLA_SCHEDULER_THREADS");
  if (!env || !*env) return machine;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (*end == '\0' && n >= 1 && n <= 1024) return static_cast<size_t>(n);
  std::fprintf(stderr, "COROLLA_SCHEDULER_THREADS='%s' is not a number of threads 1..1024: using %zu\n", env, machine);
  return machine;
}

corolla_config::corolla_config() {
  load<caf::io::middleman>();
  add_corolla_types(*this);
  // Detect a frozen (SIGSTOPped) peer: heartbeats every 200 ms, connection dropped after 1 s of silence.
  set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds(200)});
  set("middleman.connection-timeout", caf::timespan{std::chrono::seconds(1)});
  // No connection bypasses the peer gateway: CAF's automatic connections would open a listening port of their
  // own and connect to whatever address a peer names. A pushed step's reply reaches its client anyway: the
  // client connects to every server of its route itself.
  set("middleman.enable-automatic-connections", false);
  // As many as the machine runs at once: a local swarm's servers and client share them, a server on a large
  // machine gets them all.
  set("scheduler.max-threads", scheduler_threads());
  // A shared queue with blocking workers: work stealing polls, then sleeps between steals, which cost
  // milliseconds per step once several processes share two cores (docs/PERFORMANCE.md, "Swarm: per-hop overhead
  // and wire throughput").
  set("scheduler.policy", caf::atom("sharing"));
}

}  // namespace corolla
