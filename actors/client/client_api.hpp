// The CAF actor API that users script against (see docs/client-api.md), as typed actors (swarm_client_actor,
// inference_session_actor below; training_api.hpp for training): the compiler checks every request and reply.
//
//   swarm_client_actor client = spawn_swarm_client(sys, options, head);
//   self->request(client, timeout, open_session_request{512}).receive([&](inference_session_actor session) { ... });
//   self->request(session, timeout, generate_request{prompt, params, printer}).receive(
//       [&](const generate_result& r) { ... });   // printer receives (token_atom, id) as tokens are chosen
//   self->request(session, timeout, step_input{hidden, positions}) -> Tensor   // raw hidden states in/out
//   self->request(session, timeout, stats_atom::value) -> session_stats   // failures and recoveries so far
//   self->send(session, close_atom::value);
//   self->request(client, timeout, open_training_request{}) -> training_session_actor   // see training_api.hpp
//
// A session survives the failure of its servers (a crash, a freeze, error replies): it bans the server, finds
// replacements for that server's blocks in the swarm, replays the blocks' history to them and goes on with the
// same output.
#pragma once

#include <caf/actor.hpp>
#include <array>
#include <caf/actor_system.hpp>
#include <caf/typed_actor.hpp>
#include <memory>
#include <string>
#include <vector>

#include "actors/protocol/unix_clock.hpp"
#include "actors/client/reputation_book.hpp"
#include "actors/client/spot_check.hpp"
#include "actors/client/training_api.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/messages.hpp"
#include "actors/protocol/wire_stream.hpp"
#include "model/client_head.hpp"
#include "model/local_model.hpp"

namespace corolla {

enum class route_mode { relay, push };

struct swarm_client_options {
  // HOST:PORT of DHT nodes (any server, or a `corolla dht` node) when model_prefix is set; otherwise of servers,
  // each asked directly for its info.
  std::vector<std::string> initial_peers;
  route_mode mode = route_mode::push;
  caf::timespan request_timeout = std::chrono::seconds(30);
  // The swarm to join through the DHT ("{model_prefix}.{block}" keys); empty: ask initial_peers directly.
  std::string model_prefix{};
  std::array<uint8_t, 20> dht_id{};  // the client's DHT node id (random per client)
  // Where the client keeps what it learned about servers (reputation, bans) across restarts; empty: in memory.
  std::string data_dir{};
  ban_policy bans{};
  // How long a session keeps trying to replace a failed server before it gives up on the step.
  caf::timespan recovery_timeout = std::chrono::seconds(60);
  // Training requests and replies above streams.threshold bytes cross processes in chunks (wire_stream.hpp).
  stream_limits streams{};
  // Spot checks of inference sessions: one step in `every` (and the first on each server not checked yet) is
  // recomputed on another server and compared; a server caught lying is banned (actors/client/spot_check.hpp).
  spot_check_options spot_checks{};
  // The client's wall clock, which its DHT node reads records' signed expiries with: the process's by default; a
  // simulated client's is off by the skew its world gives it (unix_clock.hpp).
  wall_clock wall{};
};

struct open_session_request {
  // A constructor rather than an aggregate: {max_length, batch} stays complete as fields are added.
  open_session_request(int64_t max_length = 2048, int64_t batch = 1, std::string adapter = {}, Tensor prompts = {})
      : max_length(max_length), batch(batch), adapter(std::move(adapter)), prompts(std::move(prompts)) {}
  int64_t max_length;
  int64_t batch;
  std::string adapter;  // LoRA adapter the servers apply ("" = none); only servers that hold it are used
  // Deep prompts (deep prompt tuning, `corolla finetune --mode deep_ptune`): [blocks, P, hidden] for batch 1, or
  // [blocks, batch, P, hidden]. Before each block, the tokens at positions < P get that block's prompts added (as
  // in training; put the tuned prompt embeddings first with generate_request::prefix). Undefined: none.
  Tensor prompts;
};

struct generate_request {
  // A constructor rather than an aggregate: {prompt, params, subscriber} stays complete as fields are added.
  generate_request(std::vector<int32_t> prompt = {}, GenerationParams params = {}, caf::actor subscriber = {},
                   Tensor prefix = {})
      : prompt(std::move(prompt)), params(params), subscriber(std::move(subscriber)), prefix(std::move(prefix)) {}
  std::vector<int32_t> prompt;  // appended to what the session already holds
  GenerationParams params;
  caf::actor subscriber;  // optional: receives (token_atom, int32_t id) for each new token
  // Optional: tuned prompt embeddings [P, hidden] (prompt tuning, `corolla finetune --mode ptune`) placed before
  // the prompt; only at the start of a session.
  Tensor prefix;
  // Optional, for a caller in this process: called on the session's thread with each new token (after the
  // subscriber's message); returning false ends the generation with that token (stop sequences, cancellation).
  TokenCallback on_token;
};

struct generate_result {
  std::vector<int32_t> tokens;                // the new tokens (the session holds all but the last)
  double seconds = 0;                         // wall time of the generation
  GenerationEnd end = GenerationEnd::length;  // why it ended
};

// What a session went through (stats_atom).
struct session_stats {
  int64_t steps = 0;                     // steps completed
  std::vector<double> recovery_seconds;  // per recovered step: from the fault's detection to the step's end
  std::vector<std::string> failures;     // "HOST:PORT: what went wrong", in order
  int64_t spot_checks = 0;               // steps of a server recomputed elsewhere that agreed
  int64_t wrong_outputs = 0;             // steps a spot check caught wrong (each replaced its server)
  int64_t unverified = 0;  // hops a spot check chose but could not recompute (nobody else covered their blocks, the
                           // verifier failed, the history did not join): taken on faith
};

// What a swarm client knows of a server it has used (reputation_atom).
struct peer_standing {
  std::string peer;  // peer_id: the server's key (hex), or its address when its record named none
  uint64_t successes = 0, failures = 0;
  int64_t banned_until_ms = 0;  // Unix milliseconds; in the past: not banned
  bool banned = false;          // now
  std::string last_failure;     // what its last failure was, since this client started ("" if none)
};

struct step_input {
  Tensor hidden;                   // [batch, tokens, hidden] f32 on the host
  std::vector<int32_t> positions;  // one per token
  // Beam search (Petals' hypo_ids): before this step, sequence b continues what sequence hypo_ids[b] held, on
  // every server of the route (sequences continuing the same one share its KV pages until they write), and in
  // the history the session replays after a failure. Empty: each continues its own.
  std::vector<int32_t> hypo_ids = {};
};

// An inference session, as its users see it (the swarm client's answer to open_session_request).
using inference_session_actor =
    caf::typed_actor<caf::replies_to<generate_request>::with<generate_result>,
                     caf::replies_to<step_input>::with<Tensor>,         // raw hidden states through the route
                     caf::replies_to<stats_atom>::with<session_stats>,  // failures and recoveries so far
                     caf::replies_to<route_atom>::with<std::vector<std::string>>,  // "HOST:PORT first:last" per hop
                     caf::reacts_to<close_atom>>;

// The swarm client, as its users see it.
using swarm_client_actor =
    caf::typed_actor<caf::replies_to<open_session_request>::with<inference_session_actor>,
                     caf::replies_to<open_training_request>::with<training_session_actor>,
                     caf::replies_to<refresh_atom>::with<std::vector<server_info>>,  // the swarm's servers now
                     caf::replies_to<reputation_atom>::with<std::vector<peer_standing>>>;

// The client: its own copy of the head (embeddings, final norm, LM head) and a view of the swarm.
swarm_client_actor spawn_swarm_client(caf::actor_system& sys, swarm_client_options options,
                                      std::shared_ptr<const ClientHead> head, caf::actor connector = {});

}  // namespace corolla

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::open_session_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::generate_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::generate_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::step_input)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::session_stats)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<corolla::peer_standing>)
