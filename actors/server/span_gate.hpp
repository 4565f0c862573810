// The span gate: the one actor a server publishes. It owns the sessions and the KV-cache budget, validates
// every request, runs hidden states through its block actors in order, and replies (or, in server-to-server
// mode, passes the result on to the next server of the route, whose last server replies to the client).
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/timespan.hpp>
#include <memory>
#include <string>
#include <vector>

#include <caf/typed_actor.hpp>

#include "actors/dht/dht_messages.hpp"
#include "actors/protocol/gate_interface.hpp"
#include "actors/protocol/wire_stream.hpp"
#include "actors/server/fault_injection.hpp"
#include "actors/server/peer_quotas.hpp"
#include "actors/trust/ed25519.hpp"
#include "kernels/backend.hpp"

namespace corolla {

struct gate_options {
  std::string version, model_name, public_name, address, dtype, device;
  std::string kv_dtype = "f32";  // the blocks' KV caches' dtype (announced: spot checks allow for an f16 cache)
  int64_t first_block = 0, last_block = 0, total_blocks = 0;  // hosted span [first, last); empty until chosen
  int64_t hidden_size = 0;
  int64_t max_position = 0;                // the model's context length
  int64_t cache_tokens = 8192;             // KV-cache tokens per hosted block
  std::vector<int64_t> attention_windows;  // per model block, how far its attention sees (0: all; empty: all)
  int64_t max_sessions = 64;
  // Sessions' steps that wait at the same time run through the blocks as one batch of up to this many tokens
  // (actors/server/step_batcher.hpp); 0: each step runs alone as it arrives.
  int64_t max_batch_tokens = 256;
  // What one remote peer (a client or server process) may hold and send (actors/server/peer_quotas.hpp); a
  // node's own actors are not limited.
  peer_quota_options per_peer;
  fault_options faults;  // chaos testing: a server that fails or lies on purpose (fault_injection.hpp)
  caf::timespan step_timeout = std::chrono::seconds(30);
  caf::timespan session_timeout = std::chrono::seconds(300);
  double throughput = 0;                                       // announced for balancing (actors/server/throughput.hpp)
  double inference_rps = 0, forward_rps = 0, network_rps = 0;  // measured rates; 0 = unknown
  uint64_t seed = 1;                                           // session ids are drawn from an RNG seeded with this
  std::shared_ptr<const SigningKey> identity;  // signs open_session challenges (none: sessions open unproven)
  std::vector<std::string> adapters;           // LoRA adapters the block actors hold, by name
  stream_limits streams;                       // large training requests and replies cross processes in chunks
};

// What any peer may send a server's gate (the peer protocol): the session protocol and training
// (actors/protocol/gate_interface.hpp), and DHT RPCs, which the gate hands to the server's DHT node.
using span_gate_actor = gate_session_protocol::extend_with<dht_rpc_actor>;

// The gate as its node holds it: the peer protocol and the node's control (span_gate_control).
using span_gate_node = span_gate_actor::extend_with<span_gate_control>;

// (address_atom, "HOST:PORT") tells the gate where it was published (announced in its info).
// (span_atom, first, last) -> ack moves the gate to another span: its sessions end (their next step gets
// unknown_session), its block actors stop, and it is "joining" until (blocks_atom, actors) installs the new ones.
// A gate spawned with an empty span is joining until a span is set and its blocks installed.
// `blocks` are the block actors of the span in order; `connector` resolves addresses of further servers.
// `dht` (optional) is the server's DHT node: the gate is the server's one published actor, so it hands DHT RPCs
// (ping, find_node, find_value, store) to it.
span_gate_node spawn_span_gate(caf::actor_system& sys, gate_options options, std::shared_ptr<Backend> backend,
                               caf::actor connector, dht_rpc_actor dht = {});

}  // namespace corolla
