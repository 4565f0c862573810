// Continuous batching of sessions' steps in a server (the span gate's queue). Steps of different sessions that
// wait at the same time run through the blocks as one batch, so each block's weights are read once for all of
// them: a decode step costs about as much for 32 sessions as for one while reading weights is the limit.
//
// Steps join a group (the blocks they run through: one batch runs one chain of block actors; sessions with
// different LoRA adapters share it, each block adding each session's adapter to its own rows). A group runs one batch
// at a time; while it runs, new steps wait, and the next batch takes them under a token budget (`max_batch_tokens`
// rows): first every waiting step that fits whole, oldest first, then a chunk of the oldest step that did not fit (at
// least one token of each of its sequences), so a long prompt is prefilled a chunk per batch and never holds up the
// others' decoding for more than one chunk, and every step moves on in every batch it waits for. A budget of 0 turns
// batching off: each step runs alone, at once, as it arrives.
//
// The sessions of a group send their next steps at different times (each samples its token first, a few hundred
// microseconds apiece on a busy client), so an idle group that started at the first arrival would run that step
// alone and the others a batch later, each batch reading the weights; and a batch split that way stays split, each
// part coming back around on its own. An idle group therefore holds its oldest waiting step until every session
// that ran here since that step's session last did has sent its next one (the sessions of its last batch, and those
// of the batches right after it: they are on their way), or until its hold ends: half the session's round trip
// (the time since its last batch here started), at most the group's last batch's duration (a hold is worth no more
// than the batch it saves: across a continent, half a round trip would add to every step) and kMaxHold. Only sessions
// that ran within the hold after it are waited for, so the parts of a split batch merge again (the part ahead waits for
// the part behind, once) and parts far apart never hold each other (on a ring each is behind the other). A session
// alone, a session's first step and a prompt's next chunk never wait; a session that ends without saying costs one
// hold, once.
#pragma once

#include <caf/actor_clock.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <compare>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/protocol/atoms.hpp"
#include "actors/server/block_messages.hpp"
#include "kernels/backend.hpp"
#include "kernels/tensor.hpp"

namespace corolla {

// Steps that may share a batch: through the gate's block actors [first, last).
struct step_group {
  size_t first = 0, last = 0;
  auto operator<=>(const step_group&) const = default;
};

class StepBatcher {
 public:
  using time_point = caf::actor_clock::time_point;
  static constexpr caf::timespan kMaxHold = std::chrono::milliseconds(40);

  // The step's output [B, T, D] (host), or why it failed.
  using done_fn = std::function<void(caf::expected<Tensor>)>;

  // `host` gives the memory batches are assembled in and chunked prompts' outputs gathered in; it outlives this.
  StepBatcher(int64_t max_batch_tokens, Backend& host) : max_batch_tokens_(max_batch_tokens), host_(host) {}

  // Queues a session's step, arrived at `now`: hidden [B, T, D] f32 (host; read, not changed) at positions [B·T],
  // with the session's adapter ("" = none) and its beam reordering (hypo_ids, empty for none: the blocks apply
  // it before the step's first chunk).
  void push(const step_group& group, uint64_t session, std::string adapter, Tensor hidden,
            std::vector<int32_t> positions, done_fn done, time_point now, std::vector<int32_t> hypo_ids = {});

  struct started {
    uint64_t id = 0;
    step_group group;
    block_batch_msg msg;  // hidden [M, D] on the host, the items; `then` is the gate's to fill
  };
  // The next batch of `group`, if steps wait and the group may start one at `now` (none running and the sessions
  // it waits for in, or its hold over, or batching is off).
  std::optional<started> start(const step_group& group, time_point now);
  // The groups whose waiting steps may start at `now`, and the earliest time a held group's hold ends (nullopt:
  // none is held).
  std::vector<step_group> due(time_point now) const;
  bool has_waiting(const step_group& g) const {
    auto it = groups_.find(g);
    return it != groups_.end() && !it->second.queue.empty();
  }
  std::optional<time_point> next_hold_end() const;
  // Batch `id` came back: `result` is the last block's message with its hidden states on the host, or the error
  // of the whole batch. Completes the steps whose last tokens it ran, fails the steps it failed.
  void finish(uint64_t id, caf::expected<block_batch_msg> result, time_point now);
  // Fails every waiting and running step with `error` (the gate changes its span); replies to running batches
  // that arrive later are ignored.
  void fail_all(const caf::error& error);
  // The session ended: no batch waits for it any more.
  void forget(uint64_t session);

  size_t waiting() const;
  int64_t max_batch_tokens() const { return max_batch_tokens_; }

 private:
  struct step {
    uint64_t session = 0;
    std::string adapter;
    Tensor hidden;  // [B, T, D] host
    std::vector<int32_t> positions;
    std::vector<int32_t> hypo_ids;
    int64_t done_tokens = 0;  // tokens of each sequence already taken into batches
    Tensor out;               // [B, T, D] host, the outputs of its chunks (a step run in one piece needs none)
    done_fn done;
    bool ended = false;
  };
  // A step's share of a batch: tokens [from, from + count) of each of its sequences, at `row` of the batch.
  struct part {
    std::shared_ptr<step> s;
    int64_t from = 0, count = 0, row = 0;
  };
  struct group_state {
    std::deque<std::shared_ptr<step>> queue;
    bool running = false;
    caf::timespan hold{0};                  // how long the oldest waiting step waits for the sessions behind it
    time_point hold_until{};                // until when
    std::map<uint64_t, time_point> ran_at;  // when each of its sessions' last batch started
    caf::timespan last_duration{0};         // of its last batch
  };
  struct running_batch {
    step_group group;
    std::vector<part> parts;
    time_point started_at{};
  };

  std::vector<part> plan(std::deque<std::shared_ptr<step>>& queue) const;
  bool may_start(const group_state& g, time_point now) const;
  // How long a step of `session` that is first in line at `now` waits for the sessions behind it.
  static caf::timespan hold_for(const group_state& g, uint64_t session, time_point now);
  static void end(step& s, caf::expected<Tensor> result);

  void copy_tokens(const Tensor& hidden, int64_t from, int64_t count, Tensor& batch, int64_t row) const;
  void place_tokens(const Tensor& rows, int64_t row, int64_t from, int64_t count, Tensor& out) const;

  int64_t max_batch_tokens_;
  Backend& host_;
  std::map<step_group, group_state> groups_;
  std::map<uint64_t, running_batch> running_;
  uint64_t next_id_ = 1;
};

}  // namespace corolla
