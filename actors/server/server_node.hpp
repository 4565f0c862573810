// A server: loads its span of blocks, spawns one actor per block and the span gate in front of them.
// The caller publishes the gate (CAF's middleman) or registers it with an in-process connector.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/dht/dht_api.hpp"
#include "actors/server/span_gate.hpp"
#include "actors/server/throughput.hpp"
#include "actors/store/node_store.hpp"
#include "kernels/backend.hpp"
#include "model/weights/weight_source.hpp"

namespace corolla {

struct server_setup {
  std::string model;        // directory or .gguf (already resolved)
  int64_t first_block = 0;  // hosted span [first_block, last_block); 0, 0 = chosen later (the balancer)
  int64_t last_block = 0;
  std::optional<DType> dtype;  // serving dtype; nullopt = as stored
  std::string device = "cpu";
  int threads = 0;
  std::shared_ptr<Backend> backend;  // optional: the backend to use (made from device and threads otherwise)
  throughput_info throughput;        // announced rates
  std::string public_name;
  int64_t cache_tokens = 8192;
  DType kv_dtype = DType::f32;  // the blocks' KV caches: f32, or f16 (half the memory) where the backend reads it
  int64_t max_sessions = 64;
  int64_t max_batch_tokens = 256;         // continuous batching's budget (actors/server/step_batcher.hpp); 0: off
  peer_quota_options per_peer;            // what one remote peer may hold and send (peer_quotas.hpp)
  int64_t inject_step_errors_after = -1;  // chaos testing: every step after this many fails (-1: never)
  double inject_wrong_outputs = 0;        // chaos testing: this fraction of step outputs is made wrong
  caf::timespan step_timeout = std::chrono::seconds(30);
  caf::timespan session_timeout = std::chrono::seconds(300);
  uint64_t seed = 1;
  // Optional: the server's identity; with it the gate proves, to each client opening a session, that it holds
  // the key its DHT records name (the announcer signs them with the same key).
  std::shared_ptr<const SigningKey> identity;
  // Optional: the server's DHT node, to which the gate hands DHT RPCs.
  dht_node_actor dht;
  // Optional: converted block weights are cached here when the serving dtype differs from the stored one.
  NodeStore* store = nullptr;
  // LoRA adapter directories (PEFT format) to load for the span; requests name them by directory name.
  std::vector<std::string> adapters;
  stream_limits streams;  // large training requests and replies cross processes in chunks (wire_stream.hpp)
  // Optional: called for each block as it loads (index, loaded so far, total) — progress on stderr.
  std::function<void(int64_t, int64_t, int64_t)> progress;
  // Optional: where the block loader reads a span chosen at run time (by the balancer) from, instead of the
  // source it was given: a model fetched by name brings each span's tensors when the span is chosen. Called on the
  // loader's thread; may throw (the load then fails with its message).
  std::function<std::shared_ptr<WeightSource>(int64_t first, int64_t last)> fetch_span;
  // Block actors (and the block loader) get threads of their own. A deterministic scheduler (tests, the
  // simulator) runs every actor on its one thread: it sets this false.
  bool detached = true;
};

struct server_node {
  span_gate_node gate;
  std::vector<caf::actor> blocks;
  gate_options options;
  std::shared_ptr<Backend> backend;
  double load_seconds = 0;
};

// Spawns the gate and, with load_now, loads the blocks (only their tensors are read) and installs their actors.
// Without it the gate answers as "joining" (info works, sessions are refused) until load_server_blocks runs: a
// server publishes and announces itself before a long load. An empty span (0, 0) leaves the choice to a
// balancer (actors/balance/balancer.hpp), which needs load_now false. Throws std::runtime_error with a clear
// message on bad weights or a bad span.
server_node start_server_node(caf::actor_system& sys, const server_setup& setup, caf::actor connector,
                              std::shared_ptr<WeightSource> source = nullptr, bool load_now = true);
void load_server_blocks(caf::actor_system& sys, server_node& node, const server_setup& setup,
                        const WeightSource& source);

// Loads blocks [first, last) of `source` on `backend` (through the setup's weights cache where loading
// converts) and spawns their actors, in order (each keeps `backend` alive). Throws like load_block.
std::vector<caf::actor> load_block_actors(caf::actor_system& sys, const server_setup& setup, const WeightSource& source,
                                          const std::shared_ptr<Backend>& backend, int64_t first, int64_t last);

// The block loader: (load_atom, first, last) -> std::vector<caf::actor>, loading with load_block_actors (an
// error naming the problem when that throws). Detached when setup.detached: loading takes seconds to minutes.
caf::actor spawn_block_loader(caf::actor_system& sys, server_setup setup, std::shared_ptr<WeightSource> source,
                              std::shared_ptr<Backend> backend);

}  // namespace corolla
