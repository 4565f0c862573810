// Spot checks: a client recomputes some steps of a server on another server that covers the same blocks, and
// compares. What a session needs for that, as plain functions (unit-tested without actors): when to check, what
// to send the verifier (the span's whole history as one stateless forward, since the verifier holds no cache of
// the session), and whether two outputs agree within the tolerance of the dtypes that computed them.
//
// A check catches a server that returns wrong activations on the steps it checks, before the session uses them:
// the session then fails over with identical output. Steps that are not checked are taken on faith, so a server
// that lies rarely may go unnoticed for a while (docs/SECURITY.md says what checks can and cannot catch).
#pragma once

#include <caf/expected.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "actors/client/route_planner.hpp"
#include "actors/client/session_history.hpp"

namespace corolla {

struct spot_check_options {
  int64_t every = 64;       // check one step in this many, at random; 0: no checks at all
  bool new_servers = true;  // also check the first step on each server this client has not checked yet
};

// The hops of a step to check, in order: each hop with probability 1 / every, and every hop whose server this
// client has not checked yet (`unchecked[k]`). Each check costs a recomputation of the hop's history elsewhere.
std::vector<size_t> hops_to_check(const spot_check_options& o, const std::vector<bool>& unchecked,
                                  std::mt19937_64& rng);

// Entries (a span's history, a replay's inputs or outputs) as one forward from position 0 of every sequence: what a
// verifier recomputes, or what it is compared with. nullopt when they do not join into one (the session went back
// and rewrote its cache).
std::optional<history_entry> as_one_forward(const std::vector<history_entry>& entries);
// The span's history and this step's input as one forward (as_one_forward).
std::optional<history_entry> verification_input(const std::vector<history_entry>& history, const history_entry& step);

// The last `tokens` tokens of every sequence of hidden [B, T, D] (the verifier's outputs of this step).
Tensor last_tokens(const Tensor& hidden, int64_t tokens);

// How far apart two servers' outputs may be (relative L2 error), by the coarser of their serving dtypes: f32
// servers differ by summation order only; 16-bit and quantized ones by their rounding.
double output_tolerance(const std::string& dtype_a, const std::string& dtype_b);

// The coarsest tolerance of the dtypes of `hop` and of a verifier chain, their KV caches' included.
double tolerance_for(const planned_hop& hop, const std::vector<planned_hop>& chain);

// "" when `got` and `want` (same shape, f32) agree: ||got - want|| <= tolerance * ||want|| (a relative L2 error),
// else what differs. NaN or infinity in `got` never agrees.
std::string compare_outputs(const Tensor& got, const Tensor& want, double tolerance);

// What a check of a server's output found.
struct check_result {
  enum { agreed, unverified, lied } verdict = agreed;
  std::string why;  // lied: how the outputs differ
};

// A hop's work done again on a chain of other servers: its output (a backward's: the gradient of its input, and of
// the prompts of its blocks when it had prompts) and the chain.
struct recomputation {
  Tensor hidden;
  Tensor grad_prompts;
  std::vector<planned_hop> chain;
};
using recomputation_done = std::function<void(caf::expected<recomputation>)>;
// Recomputes the checked work on servers none of which is in `avoid` (the session's own way of asking them).
using recompute_fn = std::function<void(std::set<std::string> avoid, recomputation_done)>;

// The rule of a check, for inference steps and training forwards alike: the work is recomputed on servers not in
// `avoid`, and `differs` says how the recomputation's output differs from the claimed one ("" when they agree).
// When they disagree a second verifier, avoiding the first chain too, decides: a first verifier it outvotes goes
// to `outvoted` (a liar); with no second opinion, or a second that disagrees too, the checked server lied.
// unverified: nobody else covers the blocks now, or the first verifier failed.
void decide_check(std::set<std::string> avoid, recompute_fn recompute,
                  std::function<std::string(const recomputation&)> differs,
                  std::function<void(const planned_hop&)> outvoted, std::function<void(check_result)> done);

}  // namespace corolla
