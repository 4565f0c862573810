// The span gate's insides (actors/server/span_gate.hpp is its interface), shared by the files that make it up, one
// concern each:
//   span_gate.cpp        the behavior (its handler table), what the server tells about itself, the node's control
//   gate_sessions.cpp    opening, closing and sweeping sessions: the KV-cache budget and the peers' quotas
//   gate_steps.cpp       inference steps: dedupe, the batcher, the block actors, push routes
//   gate_training.cpp    stateless forward and backward requests (training, spot checks)
#pragma once

#include <caf/all.hpp>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "actors/server/block_messages.hpp"
#include "actors/protocol/messages.hpp"
#include "actors/server/cache_budget.hpp"
#include "actors/server/fault_injection.hpp"
#include "actors/server/peer_quotas.hpp"
#include "actors/server/span_gate.hpp"
#include "actors/server/step_batcher.hpp"

namespace corolla::gate {

using clock_type = caf::actor_clock::clock_type;

struct gate_session {
  uint64_t id = 0;
  std::string adapter;  // LoRA adapter applied to every step ("" = none)
  caf::actor_addr owner;
  bool quota_charged = false;  // counted in its owner's quota (a remote peer's session)
  int64_t batch = 1, max_length = 0;
  size_t first = 0, last = 0;   // indices into the gate's block actors
  int64_t reserved = 0;         // token·blocks charged to the owner's quota
  std::vector<int64_t> length;  // tokens cached so far, per sequence
  caf::actor_clock::time_point last_active;
  // The most recent step, kept so that a repeated step id is answered again instead of applied twice: its id, its
  // input (the request without its route) and its output.
  uint64_t last_step = 0;
  bool has_output = false;
  step_request last_request;
  Tensor last_output;
  bool running = false;
  uint64_t running_step = 0;
  // Repeats of the running step (a client that gave up on a server further along resends the step it had sent
  // here): answered from its output once it ends, or applied then if their input is another.
  struct repeat {
    caf::typed_response_promise<step_reply> rp;
    step_request req;
    caf::actor requester;
  };
  std::vector<repeat> repeats;
};

struct gate_state {
  gate_options opt;
  std::vector<block_actor_handle> blocks;
  std::shared_ptr<Backend> backend;
  caf::actor connector;
  dht_rpc_actor dht;
  CacheBudget budget{0, {}, 0};
  std::unique_ptr<StepBatcher> batcher;                    // sessions' steps waiting for the blocks, run in batches
  std::optional<caf::actor_clock::time_point> held_timer;  // when the batch_atom sent for held steps comes
  PeerQuotas<caf::node_id> quotas;
  std::map<uint64_t, gate_session> sessions;
  std::map<caf::actor_addr, int> owners;        // monitored session owners, with their session counts
  std::map<std::string, caf::actor> next_hops;  // servers that push routes continue to (monitored)
  std::mt19937_64 rng;
  std::unique_ptr<FaultInjector> faults;  // chaos testing only (fault_injection.hpp); none in service
  inbound_streams inbound;                // large requests arriving in chunks
  uint64_t next_stream = 1;               // numbers the large replies sent in chunks
  static inline const char* name = "span_gate";
};

using batch_atom = caf::atom_constant<caf::atom("batch")>;

// The gate's whole interface: its node's (span_gate_node) and its own timers.
using span_gate_impl =
    span_gate_node::extend<caf::reacts_to<batch_atom>, caf::reacts_to<sweep_atom>, caf::reacts_to<stream_sweep_atom>>;
using gate_actor = span_gate_impl::stateful_base<gate_state>;

// --- shared (gate_state.cpp) -------------------------------------------------------------------------------------

std::string span_name(const gate_options& o);
// A request timeout as errc::timeout naming `what`; any other error as it is.
caf::error timeout_or(caf::error e, const std::string& what);
// Checks hidden [B, T, D] and positions against the server ("" when they fit).
std::string check_hidden(const gate_options& o, const Tensor& hidden, const std::vector<int32_t>& positions);
// The KV-cache budget of a gate over its hosted blocks [first_block, last_block), with their attention windows.
CacheBudget span_budget(const gate_options& o);
// The quotas of a gate over its hosted blocks.
peer_quota quota_of(const gate_options& o);
// Charges one request to the remote node `peer` (a node's own actors are not limited); a too_busy error when it
// is over its rate.
caf::error charge_request(gate_actor* self, const caf::node_id& peer);
// The node of the current message's sender (none for an anonymous one: all of those share one quota).
caf::node_id sender_node(gate_actor* self);

// --- sessions (gate_sessions.cpp) --------------------------------------------------------------------------------

// Opens a session on blocks of the span: checks it, charges its cache and its owner's quota, opens it in every
// block.
caf::result<session_opened> open_on_blocks(gate_actor* self, const open_session& req);
caf::result<ack> close_one_session(gate_actor* self, const close_session& req);
// Ends a session: its block caches, its budget and quota, its owner's monitor, its waiting steps.
void release_session(gate_actor* self, uint64_t id);
// Ends the sessions idle past the session timeout and forgets the quotas' old requests; again after `period`.
void sweep_idle_sessions(gate_actor* self, caf::timespan period);

// --- steps (gate_steps.cpp) --------------------------------------------------------------------------------------

// One inference step of a session: a repeat (its step id and input) is answered again; a new step joins the batcher
// and runs through the blocks with the other sessions' steps that are ready at the same time.
caf::result<step_reply> run_step(gate_actor* self, step_request& req);
// Starts the held steps whose hold has ended (the batch_atom timer).
void start_held_batches(gate_actor* self);

// --- training (gate_training.cpp) --------------------------------------------------------------------------------

// Training's forward (stateless, Petals' rpc_forward): block actors chained by block_train_msg.
caf::result<forward_reply> run_forward(gate_actor* self, forward_request& req);
// Training's backward (Petals' rpc_backward): the gradient back through the same chain.
caf::result<backward_reply> run_backward(gate_actor* self, backward_request& req);

}  // namespace corolla::gate
