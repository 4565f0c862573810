// The inference session's insides (actors/client/inference_session.hpp is its interface), shared by the files
// that make it up, one concern each:
//   inference_session.cpp        the behavior: messages in, the down handler
//   session_steps.cpp            a step through the route (relay or push), its failure and its commit
//   session_recovery.cpp         opening the route, and the failover of one hop (a state machine)
//   session_spot_checks.cpp      recomputing some steps elsewhere before they commit
//   session_generation.cpp       generation (model/generation.hpp) and beam search over the steps
// A step's life (docs/ARCHITECTURE.md draws it with the failover's states):
//   attempt ──hops answer──> complete (spot checks) ──agree──> commit
//      ▲          │ a hop fails                │ a hop lied
//      └── recover_hop (session_recovery) <────┘
#pragma once

#include <caf/all.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "actors/client/inference_session.hpp"
#include "actors/client/session_history.hpp"
#include "actors/protocol/messages.hpp"

namespace corolla::session {

using tensor_done = std::function<void(caf::expected<Tensor>)>;
using error_done = std::function<void(caf::error)>;

struct session_hop {
  planned_hop plan;
  caf::actor gate;
  uint64_t session_id = 0;
  bool down = false;                   // its node went down while no step was running
  std::vector<history_entry> history;  // every input this hop has taken, in order
};

// The step in flight.
struct step_run {
  uint64_t step = 0;
  Tensor input;
  std::shared_ptr<const std::vector<int32_t>> positions;
  std::vector<int32_t> hypo_ids;  // beam search: the sequences this step's continue (empty: their own)
  tensor_done done;
  uint64_t attempt = 0;                       // replies to older attempts are ignored
  std::vector<std::optional<Tensor>> inputs;  // per hop: what it took in this attempt
  std::optional<Tensor> output;               // the last hop's output (push: it may come before the copies)
  bool fetching = false;                      // missing copies are being asked for
  bool recovering = false;
  std::optional<caf::actor_clock::time_point> fault;  // the step's first fault
  int faults = 0;
};

struct session_state {
  std::shared_ptr<const ClientHead> head;
  caf::actor head_batcher;  // the logits of generation steps (actors/client/head_batcher.hpp)
  caf::actor connector;
  swarm_client_internal client;
  session_options opt;
  std::vector<session_hop> hops;
  uint64_t next_step = 1;
  uint64_t attempts = 0;
  std::shared_ptr<step_run> current;
  uint64_t next_timer = 1;
  std::map<uint64_t, std::function<void()>> timers;
  // Requests pending at gates that are not (yet) in the chain: opening a hop, replaying to a replacement. CAF
  // does not fail requests pending at a node that is gone, so the down handler fails them.
  struct down_watch {
    caf::actor_addr gate;
    std::function<void()> on_down;
  };
  uint64_t next_watch = 1;
  std::map<uint64_t, down_watch> watches;
  int64_t length = 0;           // positions used so far (batch 1 generation)
  std::vector<int32_t> tokens;  // every id fed so far, for the repetition penalty
  bool busy = false;
  session_stats stats;
  std::mt19937_64 rng;       // which steps are spot-checked (seeded from the options)
  inbound_streams inbound;   // verifiers' large replies arriving in chunks
  uint64_t next_stream = 1;  // numbers large verification requests sent in chunks
  static inline const char* name = "inference_session";
};

using session_actor = inference_session_internal::stateful_base<session_state>;

// --- small helpers (session_state.cpp) ---------------------------------------------------------------------------

// Runs fn after delay (a retry_atom to itself; the behavior runs the timer).
void after(session_actor* self, caf::timespan delay, std::function<void()> fn);
// Latencies are measured on the actor clock (virtual time in the simulator), like every other time here.
double ms_since(session_actor* self, caf::actor_clock::time_point t0);
// Errors that say the request was wrong are the caller's; everything else is the server's (or the network's).
bool is_server_failure(const caf::error& e);
std::string blocks_name(const planned_hop& h);
// Tells the swarm client how a server did, by peer_id (its key, when its record named one).
void report(session_actor* self, const planned_hop& hop, bool ok, double latency_ms);
void report_failure(session_actor* self, const planned_hop& hop, const caf::error& e);
// A step that fails again waits before its next recovery, doubling from 50 ms up to 1 s: a swarm in turmoil is not
// hammered, and the step's time budget (recovery_timeout from its first fault) spans the turmoil rather than a
// count of failures.
caf::timespan retry_delay(int round);
// `done`, called once: with the first of what the caller reports and the gate's node going down.
error_done settle_once_or_on_down(session_actor* self, const caf::actor& gate, const std::string& address,
                                  error_done done);
void close_hop(session_actor* self, const session_hop& h);

// --- the route (session_recovery.cpp) ----------------------------------------------------------------------------

// Opens every hop that has no session yet, replacing those that fail to open.
void open_route(session_actor* self, error_done done);
// Replaces hop k (its server failed) before `deadline`: done with no error once replacements hold its blocks and
// its history.
void recover_hop(session_actor* self, size_t k, caf::actor_clock::time_point deadline, error_done done);

// --- steps (session_steps.cpp) -----------------------------------------------------------------------------------

// Runs one step through the route (recovering from failed hops); done with the last hop's output.
void run_route(session_actor* self, Tensor hidden, std::vector<int32_t> positions, tensor_done done,
               std::vector<int32_t> hypo_ids = {});
// Hop k failed this step: ban it, replace it, run the step again (the request's own errors end the step).
void fail(session_actor* self, std::shared_ptr<step_run> run, size_t k, caf::error e);
// Whether a reply to attempt `a` of `run` comes too late to matter.
bool stale(session_actor* self, const std::shared_ptr<step_run>& run, uint64_t a);
// A push step's output or an output copy came in: completes the step once every hop's input is known (after a
// grace period, asking the servers whose copies are missing).
void try_complete(session_actor* self, std::shared_ptr<step_run> run);
// The step went through (and passed its spot checks): each hop's input joins its history.
void commit(session_actor* self, std::shared_ptr<step_run> run, Tensor out);

// --- spot checks (session_spot_checks.cpp) -----------------------------------------------------------------------

// The step's hops are done: spot-check some of them (spot_check.hpp), one after the other, then commit.
void complete(session_actor* self, std::shared_ptr<step_run> run, Tensor out);

// Recomputes `input` over the blocks of `hop` on other servers (none in `avoid`) and compares the last `tokens`
// tokens of every sequence with `claimed`, the hop's output: when they disagree, a second verifier decides (a first
// verifier the second outvotes is reported); with none to ask, the checked server is wrong. unverified: nobody else
// covers the blocks now, or the verifier failed.
void verify(session_actor* self, const planned_hop& hop, history_entry input, Tensor claimed, int64_t tokens,
            std::set<std::string> avoid, std::function<void(check_result)> done);

// --- generation (session_generation.cpp) -------------------------------------------------------------------------

// Starts a generation (or a beam search) in the session, or refuses the request.
caf::result<generate_result> start_generation(session_actor* self, generate_request& req);

}  // namespace corolla::session
