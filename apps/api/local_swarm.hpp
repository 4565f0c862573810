// A swarm in this process, for `corolla run` and tests: a DHT node and N servers splitting a model's blocks,
// each server a real server node (span gate, block actors, its own DHT node, announcer, supervisor), found by the
// client through the DHT exactly as across machines. With `publish` the DHT node and the servers also listen on
// loopback ports, so other processes (`corolla serve --initial_peers`, `corolla generate`) can join or use it;
// in this process the connector hands out the actors directly.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <functional>
#include <string>
#include <vector>

#include "actors/dht/dht_api.hpp"

namespace corolla::api {

struct LocalSwarmOptions {
  std::string model;  // directory or .gguf (resolved)
  int servers = 3;    // the blocks are split evenly between them
  std::string host = "127.0.0.1";
  bool publish = true;  // listen on loopback ports too (else in-process names only)
  int64_t cache_tokens = 8192;
  DType kv_dtype = DType::f32;     // the servers' KV caches (f16: half the memory)
  int max_sessions = 64;           // per server
  int64_t max_batch_tokens = 256;  // continuous batching's budget per server (0: each step alone)
  int threads = 0;                 // CPU threads per server (0: all cores)
  double announce_period_s = 10;
  // Called as each server's blocks load: (server, first_block, last_block).
  std::function<void(int, int64_t, int64_t)> progress;
};

class LocalSwarm {
 public:
  // Starts everything and returns once every block is announced online in the DHT. Throws std::runtime_error.
  LocalSwarm(caf::actor_system& sys, caf::actor connector, LocalSwarmOptions options);
  ~LocalSwarm();
  LocalSwarm(const LocalSwarm&) = delete;
  LocalSwarm& operator=(const LocalSwarm&) = delete;

  const std::string& dht_address() const { return dht_address_; }
  const std::string& swarm_id() const { return swarm_id_; }
  const std::vector<std::string>& server_addresses() const { return addresses_; }
  // Announces every server offline and stops them (the destructor does it too).
  void stop();

 private:
  caf::actor_system& sys_;
  caf::actor connector_;
  dht_node_actor dht_;
  std::string dht_address_, swarm_id_;
  std::vector<std::string> addresses_;
  std::vector<caf::actor> supervisors_;
  std::vector<uint16_t> ports_;  // published ports (gates), to unpublish
  std::vector<caf::actor> gates_;
  uint16_t dht_port_ = 0;
};

}  // namespace corolla::api
