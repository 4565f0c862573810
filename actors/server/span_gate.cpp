#include "actors/server/span_gate.hpp"

#include <caf/all.hpp>
#include <map>
#include <random>
#include <utility>

#include "actors/dht/dht_messages.hpp"
#include "actors/log/node_log.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/block_span.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/protocol/messages.hpp"
#include "actors/protocol/own_node.hpp"
#include "actors/server/cache_budget.hpp"
#include "actors/server/gate_training.hpp"
#include "actors/server/peer_quotas.hpp"
#include "actors/server/step_batcher.hpp"
#include "actors/trust/identity_proof.hpp"

namespace corolla {
namespace {

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
  // The most recent step, kept so that a repeated step id is answered again instead of applied twice.
  uint64_t last_step = 0;
  bool has_output = false;
  Tensor last_output;
  bool running = false;
  uint64_t running_step = 0;
  // Repeats of the running step (a client that gave up on a server further along resends the step it had sent
  // here): answered from its output once it ends.
  struct repeat {
    caf::typed_response_promise<step_reply> rp;
    step_request req;
    caf::actor requester;
  };
  std::vector<repeat> repeats;
};

struct gate_state {
  gate_options opt;
  std::vector<caf::actor> blocks;
  std::shared_ptr<Backend> backend;
  caf::actor connector;
  caf::actor dht;
  CacheBudget budget{0, {}, 0};
  std::unique_ptr<StepBatcher> batcher;                    // sessions' steps waiting for the blocks, run in batches
  std::optional<caf::actor_clock::time_point> held_timer;  // when the batch_atom sent for held steps comes
  PeerQuotas<caf::node_id> quotas;
  std::map<uint64_t, gate_session> sessions;
  std::map<caf::actor_addr, int> owners;        // monitored session owners, with their session counts
  std::map<std::string, caf::actor> next_hops;  // servers that push routes continue to (monitored)
  std::mt19937_64 rng;
  int64_t steps_served = 0;
  inbound_streams inbound;   // large requests arriving in chunks
  uint64_t next_stream = 1;  // numbers the large replies sent in chunks
  static inline const char* name = "span_gate";
};

using gate_actor = caf::stateful_actor<gate_state>;

std::string span_name(const gate_options& o) { return "blocks " + block_span(o.first_block, o.last_block); }

caf::error timeout_or(caf::error e, const std::string& what) {
  if (e == caf::sec::request_timeout) return make_error(errc::timeout, what + " timed out");
  return e;
}

// Checks hidden [B, T, D] and positions against the server and, for a cached step, the session.
std::string check_hidden(const gate_options& o, const Tensor& hidden, const std::vector<int32_t>& positions) {
  if (hidden.dtype() != DType::f32 || hidden.rank() != 3 || hidden.dim(2) != o.hidden_size)
    return "hidden states must be f32[batch, tokens, " + std::to_string(o.hidden_size) + "], got " + hidden.describe();
  if (hidden.dim(0) < 1 || hidden.dim(1) < 1) return "hidden states are empty: " + hidden.describe();
  if (static_cast<int64_t>(positions.size()) != hidden.dim(0) * hidden.dim(1))
    return std::to_string(positions.size()) + " positions for " + std::to_string(hidden.dim(0) * hidden.dim(1)) +
           " tokens";
  for (int32_t p : positions)
    if (p < 0 || p >= o.max_position)
      return "position " + std::to_string(p) + " is outside the model's context of " + std::to_string(o.max_position);
  return {};
}

// The KV-cache budget of a gate over its hosted blocks [first_block, last_block), with their attention windows.
CacheBudget span_budget(const gate_options& o) {
  std::vector<int64_t> windows;
  for (int64_t i = o.first_block; i < o.last_block; ++i)
    windows.push_back(static_cast<size_t>(i) < o.attention_windows.size() ? o.attention_windows[static_cast<size_t>(i)]
                                                                          : 0);
  return CacheBudget(o.cache_tokens, std::move(windows), o.max_position);
}

// The quotas of a gate over blocks [first, last).
peer_quota quota_of(const gate_options& o) {
  int64_t cache = 0;
  if (__builtin_mul_overflow(o.per_peer.cache_tokens, o.last_block - o.first_block, &cache)) cache = INT64_MAX;
  return {o.per_peer.sessions, cache, o.per_peer.requests_per_second};
}

// Charges one request to the remote node `peer` (a node's own actors are not limited); a too_busy error when it
// is over its rate.
caf::error charge_request(gate_actor* self, const caf::node_id& peer) {
  if (peer == self->node()) return {};
  if (auto refusal = self->state.quotas.admit_request(peer, self->clock().now()))
    return make_busy_error(refusal->why, refusal->retry_after);
  return {};
}

// The node of the current message's sender (none for an anonymous one: all of those share one quota).
caf::node_id sender_node(gate_actor* self) {
  const auto& sender = self->current_sender();
  return sender ? sender->node() : caf::node_id{};
}

void release_session(gate_actor* self, uint64_t id) {
  auto& st = self->state;
  auto it = st.sessions.find(id);
  if (it == st.sessions.end()) return;
  log::info(log::Part::server, [&] { return "session closed: " + std::to_string(id); });
  for (auto& r : it->second.repeats)
    r.rp.deliver(make_error(errc::unknown_session, "the session closed during the step"));
  for (size_t i = it->second.first; i < it->second.last; ++i) self->send(st.blocks[i], block_close_msg{id});
  st.budget.release(it->second.first, it->second.last, it->second.batch, it->second.max_length);
  if (it->second.quota_charged) st.quotas.closed(it->second.owner.node(), it->second.reserved);
  if (auto o = st.owners.find(it->second.owner); o != st.owners.end() && --o->second <= 0) {
    self->demonitor(it->second.owner);
    st.owners.erase(o);
  }
  st.batcher->forget(id);
  st.sessions.erase(it);
}

using batch_atom = caf::atom_constant<caf::atom("batch")>;

void schedule_held_batches(gate_actor* self);

// Starts the batches of `group` that may start: each runs through block actors [first, last) of the span (they
// pass it along; the last replies), and when it is back the steps it ended are answered and the next batch of the
// group starts.
void run_batches(gate_actor* self, const step_group& group) {
  auto& st = self->state;
  while (auto batch = st.batcher->start(group, self->clock().now())) {
    const uint64_t id = batch->id;
    if (group.last > st.blocks.size() || group.first >= group.last) {
      st.batcher->finish(id, make_error(errc::unknown_session, "the server no longer hosts those blocks"),
                         self->clock().now());
      continue;
    }
    block_batch_msg msg = std::move(batch->msg);
    msg.hidden = st.backend->upload(msg.hidden);  // a tensor of the batch's own: the blocks may change it in place
    msg.then.assign(st.blocks.begin() + static_cast<std::ptrdiff_t>(group.first) + 1,
                    st.blocks.begin() + static_cast<std::ptrdiff_t>(group.last));
    self->request(st.blocks[group.first], st.opt.step_timeout, std::move(msg))
        .then(
            [=](block_batch_msg& done) {
              done.hidden = self->state.backend->download(done.hidden);
              self->state.batcher->finish(id, std::move(done), self->clock().now());
              run_batches(self, group);
            },
            [=](caf::error& e) {
              self->state.batcher->finish(
                  id, timeout_or(std::move(e), "the step through " + span_name(self->state.opt)), self->clock().now());
              run_batches(self, group);
            });
  }
  schedule_held_batches(self);
}

// Steps held for the rest of their cohort (step_batcher.hpp) start when the hold ends, if nothing started them
// before: one timer, at the earliest hold's end.
void schedule_held_batches(gate_actor* self) {
  auto& st = self->state;
  const auto end = st.batcher->next_hold_end();
  if (!end || (st.held_timer && *st.held_timer <= *end)) return;
  st.held_timer = *end;
  self->delayed_send(self, std::max(*end - self->clock().now(), caf::timespan{0}), batch_atom::value);
}

// "" when `prompts` (undefined: none) are deep prompts for a session of `batch` sequences of up to `max_length`
// tokens through `blocks` blocks, else what is wrong.
std::string check_session_prompts(const gate_options& o, const Tensor& prompts, int64_t blocks, int64_t batch,
                                  int64_t max_length) {
  if (!prompts.defined() || prompts.numel() == 0) return {};
  const std::string want = "f32[" + std::to_string(blocks) + ", " + std::to_string(batch) + ", prompt_len, " +
                           std::to_string(o.hidden_size) + "]";
  if (prompts.dtype() != DType::f32 || prompts.rank() != 4 || prompts.dim(0) != blocks || prompts.dim(1) != batch ||
      prompts.dim(3) != o.hidden_size)
    return "deep prompts must be " + want + " (blocks, batch, prompt length, hidden size), got " + prompts.describe();
  if (prompts.dim(2) > max_length)
    return "deep prompts of length " + std::to_string(prompts.dim(2)) + " exceed the session's max_length " +
           std::to_string(max_length);
  return {};
}

// Block i's deep prompts [B, P, D] of a session's [blocks, B, P, D], or undefined.
Tensor block_prompts(const Tensor& prompts, size_t i) {
  if (!prompts.defined() || prompts.numel() == 0) return {};
  const auto k = static_cast<int64_t>(i);
  return prompts.slice_rows(k, k + 1).reshaped({prompts.dim(1), prompts.dim(2), prompts.dim(3)});
}

// Replies with the step's output, or passes it to the next server of a push route. A forwarding server first
// sends the requester (the client's session) a copy of its output: the next server's input, which the client
// keeps to rebuild that server's cache elsewhere should it fail.
void finish_step(gate_actor* self, caf::response_promise rp, const step_request& req, Tensor out,
                 const caf::actor& requester) {
  if (req.next.empty()) {
    rp.deliver(step_reply{req.session_id, req.step_id, std::move(out), {}});
    return;
  }
  if (requester) self->send(requester, step_reply{req.session_id, req.step_id, out, {}});
  const route_hop hop = req.next.front();
  step_request fwd{hop.session_id,
                   req.step_id,
                   std::move(out),
                   req.positions,
                   std::vector<route_hop>(req.next.begin() + 1, req.next.end()),
                   {},
                   req.hypo_ids};
  if (auto it = self->state.next_hops.find(hop.address); it != self->state.next_hops.end()) {
    rp.delegate(it->second, std::move(fwd));
    return;
  }
  self->request(self->state.connector, std::chrono::seconds(10), resolve_atom::value, hop.address)
      .then(
          [=](caf::actor next) mutable {
            self->monitor(next);
            self->state.next_hops[hop.address] = next;
            rp.delegate(next, std::move(fwd));
          },
          [=](caf::error& e) mutable {
            rp.deliver(
                make_error(errc::peer_unavailable, "next server " + hop.address + " is unreachable: " + describe(e)));
          });
}

// Delivers a reply that was streamed to the requester (the message naming the stream), or says why its stream
// failed (the requester refused a chunk, or stopped answering).
template <class Reply>
void deliver_streamed(caf::typed_response_promise<Reply>& rp, caf::expected<Reply> out) {
  if (out)
    rp.deliver(std::move(*out));
  else
    rp.deliver(make_error(errc::bad_request, "the reply could not be streamed back: " + describe(out.error())));
}

// Hands a DHT RPC to the server's DHT node (which replies to the caller), or refuses it.
template <class Reply, class Request>
caf::result<Reply> to_dht(gate_actor* self, Request& req) {
  if (!self->state.dht) return make_error(errc::bad_request, "this server runs no DHT node");
  self->delegate(self->state.dht, std::move(req));
  return caf::delegated<Reply>{};
}

// What a client asks a server first: its span, model, load and identity (the DHT record says the same).
server_info describe_server(gate_actor* self) {
  const auto& s = self->state;
  server_info i;
  i.version = s.opt.version;
  i.model = s.opt.model_name;
  i.public_name = s.opt.public_name;
  i.address = s.opt.address;
  i.dtype = s.opt.dtype;
  i.device = s.opt.device;
  i.first_block = s.opt.first_block;
  i.last_block = s.opt.last_block;
  i.total_blocks = s.opt.total_blocks;
  i.cache_tokens_left = s.budget.tokens_left_per_block();
  i.hidden_size = s.opt.hidden_size;
  i.sessions = static_cast<int64_t>(s.sessions.size());
  i.throughput = s.opt.throughput;
  i.inference_rps = s.opt.inference_rps;
  i.forward_rps = s.opt.forward_rps;
  i.network_rps = s.opt.network_rps;
  i.state = s.blocks.empty() ? "joining" : "online";
  i.adapters = s.opt.adapters;
  if (s.opt.identity) i.owner = to_hex(s.opt.identity->public_key());
  return i;
}

// Installs the span's block actors once the node has loaded them (the gate answers "joining" until then).
caf::result<ack> install_blocks(gate_actor* self, const std::vector<caf::actor>& blocks) {
  auto& s = self->state;
  if (!s.blocks.empty() || blocks.empty() ||
      static_cast<int64_t>(blocks.size()) != s.opt.last_block - s.opt.first_block)
    return make_error(errc::bad_request, "the gate's blocks are already installed or do not match its span");
  s.blocks = blocks;
  for (auto& b : s.blocks) self->link_to(b);
  return ack{};
}

// Starts the held steps whose hold has ended (schedule_held_batches).
void start_held_batches(gate_actor* self) {
  self->state.held_timer.reset();
  for (const step_group& group : self->state.batcher->due(self->clock().now())) run_batches(self, group);
  schedule_held_batches(self);
}

// Moves the server to other blocks (the balancer's decision): every session ends and the old block actors stop.
caf::result<ack> move_to_span(gate_actor* self, int64_t first, int64_t last) {
  auto& s = self->state;
  if (first < 0 || last > s.opt.total_blocks || first >= last)
    return make_error(errc::bad_request, "blocks " + std::to_string(first) + ":" + std::to_string(last) +
                                             " are not a span of the model's " + std::to_string(s.opt.total_blocks) +
                                             " blocks");
  s.batcher->fail_all(make_error(errc::unknown_session, "the server moved to other blocks"));
  std::vector<uint64_t> ids;
  for (const auto& [id, session] : s.sessions) ids.push_back(id);
  for (uint64_t id : ids) release_session(self, id);
  for (auto& b : s.blocks) {  // unlinked first: their exit must not take the gate down
    self->unlink_from(b);
    self->send_exit(b, caf::exit_reason::user_shutdown);
  }
  s.blocks.clear();
  s.opt.first_block = first;
  s.opt.last_block = last;
  s.budget = span_budget(s.opt);
  s.quotas = PeerQuotas<caf::node_id>(quota_of(s.opt));
  return ack{};
}

// Opens a session on blocks of the span: checks it, charges its cache and its owner's quota, opens it in every
// block.
caf::result<session_opened> open_on_blocks(gate_actor* self, const open_session& req) {
  auto& s = self->state;
  if (!req.wire_error.empty()) return make_error(errc::bad_request, req.wire_error);
  if (s.blocks.empty()) return make_error(errc::peer_unavailable, "the server is still loading its blocks (joining)");
  if (req.max_length < 1 || req.max_length > s.opt.max_position)
    return make_error(errc::bad_request, "max_length " + std::to_string(req.max_length) + " is outside 1.." +
                                             std::to_string(s.opt.max_position));
  if (req.batch < 1 || req.batch > 64)
    return make_error(errc::bad_request, "batch " + std::to_string(req.batch) + " is outside 1..64");
  int64_t first = req.first_block, last = req.last_block;
  if (first == 0 && last == 0) first = s.opt.first_block, last = s.opt.last_block;
  if (first < s.opt.first_block || last > s.opt.last_block || first >= last)
    return make_error(errc::unknown_block,
                      "blocks " + block_span(first, last) + " are not all served here (" + span_name(s.opt) + ")");
  if (auto problem = check_adapter(s.opt, req.adapter); !problem.empty()) return make_error(errc::bad_request, problem);
  if (auto problem = check_session_prompts(s.opt, req.prompts, last - first, req.batch, req.max_length);
      !problem.empty())
    return make_error(errc::bad_request, problem);
  if (req.challenge.size() > kMaxChallengeBytes)
    return make_error(errc::bad_request, "a challenge of " + std::to_string(req.challenge.size()) + " bytes; at most " +
                                             std::to_string(kMaxChallengeBytes));
  const caf::node_id peer = sender_node(self);
  if (auto busy = charge_request(self, peer)) return busy;
  const int64_t need = req.batch * req.max_length * (last - first);
  const bool remote = peer != self->node();
  if (remote)
    if (auto refusal = s.quotas.admit_session(peer, need)) return make_busy_error(refusal->why, refusal->retry_after);
  if (static_cast<int64_t>(s.sessions.size()) >= s.opt.max_sessions)
    return make_error(errc::out_of_cache,
                      "the server already holds its maximum of " + std::to_string(s.opt.max_sessions) + " sessions");
  const size_t first_index = static_cast<size_t>(first - s.opt.first_block),
               last_index = static_cast<size_t>(last - s.opt.first_block);
  if (!s.budget.try_reserve(first_index, last_index, req.batch, req.max_length))
    return make_error(errc::out_of_cache, "the server has " + std::to_string(s.budget.tokens_left_per_block()) +
                                              " cache tokens left per block; the session needs " +
                                              std::to_string(req.batch * req.max_length));
  uint64_t id;
  do id = s.rng();
  while (id == 0 || s.sessions.count(id));
  gate_session session;
  session.id = id;
  session.adapter = req.adapter;
  session.owner = caf::actor_cast<caf::actor_addr>(self->current_sender());
  session.batch = req.batch;
  session.max_length = req.max_length;
  session.first = first_index;
  session.last = last_index;
  session.reserved = need;
  session.length.assign(static_cast<size_t>(req.batch), 0);
  session.last_active = self->clock().now();
  session.quota_charged = remote;
  if (remote) s.quotas.opened(peer, need);
  if (session.owner && s.owners[session.owner]++ == 0) self->monitor(session.owner);
  s.sessions[id] = session;
  auto rp = self->make_response_promise<session_opened>();
  session_opened opened{id, 0, {}, {}, {}};
  if (s.opt.identity) {
    opened.owner = to_hex(s.opt.identity->public_key());
    if (!req.challenge.empty()) opened.proof = prove_identity(*s.opt.identity, req.challenge);
  }
  auto pending = std::make_shared<size_t>(session.last - session.first);
  auto failed = std::make_shared<bool>(false);
  for (size_t i = session.first; i < session.last; ++i)
    self->request(s.blocks[i], s.opt.step_timeout,
                  block_open_msg{id, req.batch, req.max_length, block_prompts(req.prompts, i - session.first)})
        .then(
            [=]() mutable {
              if (--*pending == 0 && !*failed) {
                log::info(log::Part::server, [&] {
                  return "session opened: " + std::to_string(id) + "; blocks " +
                         block_span(session.first, session.last) + "; max_length " + std::to_string(req.max_length) +
                         "; batch " + std::to_string(req.batch) +
                         (remote ? "; from " + caf::to_string(peer) : std::string("; local"));
                });
                opened.cache_tokens_left = self->state.budget.tokens_left_per_block();
                rp.deliver(opened);
              }
            },
            [=](caf::error& e) mutable {
              if (*failed) return;
              *failed = true;
              release_session(self, id);
              rp.deliver(std::move(e));
            });
  return rp;
}

// One inference step of a session: a repeat is answered again; a new step joins the batcher and runs through the
// blocks with the other sessions' steps that are ready at the same time.
caf::result<step_reply> run_step(gate_actor* self, step_request& req) {
  auto& s = self->state;
  if (!req.wire_error.empty()) return make_error(errc::bad_request, req.wire_error);
  auto it = s.sessions.find(req.session_id);
  if (it == s.sessions.end())
    return make_error(errc::unknown_session, "no session " + std::to_string(req.session_id) + " on " +
                                                 span_name(s.opt) + " (closed, timed out, or never opened)");
  gate_session& session = it->second;
  session.last_active = self->clock().now();
  const auto requester = caf::actor_cast<caf::actor>(self->current_sender());
  // A response promise takes over the reply: create it only once no error is returned directly.
  if (session.has_output && req.step_id == session.last_step) {  // a retry: answer again, do not re-apply
    auto rp = self->make_response_promise<step_reply>();
    finish_step(self, rp, req, session.last_output, requester);
    return rp;
  }
  if (session.running && req.step_id == session.running_step) {
    auto rp = self->make_response_promise<step_reply>();
    session.repeats.push_back({rp, std::move(req), requester});
    return rp;
  }
  // Charged to the session's owner, not the sender: in a push route the previous server sends the step.
  if (session.quota_charged)
    if (auto busy = charge_request(self, session.owner.node())) return busy;
  if (s.opt.inject_step_errors_after >= 0 && s.steps_served >= s.opt.inject_step_errors_after)
    return make_error(errc::internal, "injected fault: this server fails every step after its first " +
                                          std::to_string(s.opt.inject_step_errors_after));
  if (session.running)
    return make_error(errc::bad_request,
                      "step " + std::to_string(session.running_step) + " of this session is still running");
  if (auto msg = check_hidden(s.opt, req.hidden, req.positions); !msg.empty())
    return make_error(errc::bad_request, msg);
  const int64_t b = req.hidden.dim(0), t = req.hidden.dim(1);
  if (b != session.batch)
    return make_error(errc::bad_request,
                      "batch of " + std::to_string(b) + " in a session opened for " + std::to_string(session.batch));
  // Beam search: the sequences continue the hypotheses named, with their lengths.
  std::vector<int64_t> length = session.length;
  if (!req.hypo_ids.empty()) {
    if (auto problem = hypothesis_ids_problem(req.hypo_ids, b); !problem.empty())
      return make_error(errc::bad_request, problem);
    for (size_t i = 0; i < req.hypo_ids.size(); ++i) length[i] = session.length[static_cast<size_t>(req.hypo_ids[i])];
  }
  for (int64_t i = 0; i < b; ++i) {
    const int32_t* p = req.positions.data() + i * t;
    if (p[t - 1] >= session.max_length)
      return make_error(errc::max_length_exceeded, "position " + std::to_string(p[t - 1]) +
                                                       " is beyond the session's max_length " +
                                                       std::to_string(session.max_length));
    if (p[0] > length[static_cast<size_t>(i)])
      return make_error(errc::bad_request, "sequence " + std::to_string(i) + " starts at position " +
                                               std::to_string(p[0]) + " but holds only " +
                                               std::to_string(length[static_cast<size_t>(i)]) +
                                               " tokens (positions must not leave gaps)");
    for (int64_t j = 1; j < t; ++j)
      if (p[j] != p[j - 1] + 1)
        return make_error(errc::bad_request, "positions of sequence " + std::to_string(i) + " are not consecutive");
  }
  auto rp = self->make_response_promise<step_reply>();
  session.running = true;
  session.running_step = req.step_id;
  const uint64_t id = session.id;
  const step_group group{session.first, session.last};
  Tensor hidden = req.hidden;
  std::vector<int32_t> positions = req.positions;
  std::vector<int32_t> hypo_ids = req.hypo_ids;
  s.batcher->push(
      group, id, session.adapter, std::move(hidden), std::move(positions),
      [=, req = std::move(req)](caf::expected<Tensor> out) mutable {
        auto it = self->state.sessions.find(id);
        if (it == self->state.sessions.end()) {
          rp.deliver(make_error(errc::unknown_session, "the session closed during the step"));
          return;
        }
        gate_session& sess = it->second;
        sess.running = false;
        auto repeats = std::exchange(sess.repeats, {});
        if (!out) {
          rp.deliver(out.error());
          for (auto& r : repeats) r.rp.deliver(out.error());
          return;
        }
        const int64_t tt = req.hidden.dim(1);
        sess.length = length;  // (reordered by the step's hypothesis ids, if any)
        for (size_t i = 0; i < sess.length.size(); ++i)
          sess.length[i] = std::max<int64_t>(sess.length[i], req.positions[(i + 1) * tt - 1] + 1);
        sess.last_step = req.step_id;
        sess.has_output = true;
        sess.last_output = std::move(*out);
        if (self->state.opt.inject_wrong_outputs > 0 &&
            std::bernoulli_distribution(self->state.opt.inject_wrong_outputs)(self->state.rng)) {
          sess.last_output = sess.last_output.clone();  // the blocks' buffer may be shared
          float* v = sess.last_output.data_as<float>();
          for (int64_t i = 0; i < sess.last_output.numel(); ++i) v[i] += 1.0f;
        }
        ++self->state.steps_served;
        finish_step(self, rp, req, sess.last_output, requester);
        for (auto& r : repeats) finish_step(self, r.rp, r.req, sess.last_output, r.requester);
      },
      self->clock().now(), std::move(hypo_ids));
  run_batches(self, group);
  return rp;
}

// What a forward and a backward request must pass before their chain runs: a request that decoded, within its
// sender's rate, whole (its streamed parts arrived: wire_stream.hpp), to a server whose blocks are loaded, with
// hidden states and positions this server takes.
template <class Request>
caf::error admit_training(gate_actor* self, Request& req) {
  auto& s = self->state;
  if (!req.wire_error.empty()) return make_error(errc::bad_request, req.wire_error);
  if (auto busy = charge_request(self, sender_node(self))) return busy;
  if (auto problem = stream_in(s.inbound, caf::actor_cast<caf::actor_addr>(self->current_sender()), req);
      !problem.empty())
    return make_error(errc::bad_request, problem);
  if (s.blocks.empty()) return make_error(errc::peer_unavailable, "the server is still loading its blocks (joining)");
  if (auto msg = check_hidden(s.opt, req.hidden, req.positions); !msg.empty())
    return make_error(errc::bad_request, msg);
  return {};
}

// Training's forward (stateless, Petals' rpc_forward): block actors chained by block_train_msg.
caf::result<forward_reply> run_forward(gate_actor* self, forward_request& req) {
  auto& s = self->state;
  if (auto refusal = admit_training(self, req)) return refusal;
  const auto requester = caf::actor_cast<caf::actor>(self->current_sender());
  if (req.challenge.size() > kMaxChallengeBytes)
    return make_error(errc::bad_request, "a challenge of " + std::to_string(req.challenge.size()) + " bytes; at most " +
                                             std::to_string(kMaxChallengeBytes));
  auto chain = training_chain(s.opt, s.blocks, req.first_block, req.last_block, req.hidden, req.prompts, req.adapter);
  if (!chain) return std::move(chain.error());
  // Who answers, and the proof of it the client asked for: a record naming this server's address under
  // another key is caught here, as at open_session.
  forward_reply signed_reply;
  if (s.opt.identity) {
    signed_reply.owner = to_hex(s.opt.identity->public_key());
    if (!req.challenge.empty()) signed_reply.proof = prove_identity(*s.opt.identity, req.challenge);
  }
  auto rp = self->make_response_promise<forward_reply>();
  auto msg = training_message(*s.backend, std::move(*chain), req.hidden, std::move(req.positions), req.prompts,
                              std::move(req.adapter));
  caf::actor first = msg.chain.front();
  self->request(first, s.opt.step_timeout, std::move(msg))
      .then(
          [=](block_train_result& r) mutable {
            auto& s = self->state;
            signed_reply.hidden = std::move(r.hidden);
            stream_out(self, requester, std::move(signed_reply), s.opt.streams, s.next_stream,
                       [=](caf::expected<forward_reply> out) mutable { deliver_streamed(rp, std::move(out)); });
          },
          [=](caf::error& e) mutable {
            rp.deliver(timeout_or(std::move(e), "the forward through " + span_name(self->state.opt)));
          });
  return rp;
}

// Training's backward (Petals' rpc_backward): the gradient back through the same chain.
caf::result<backward_reply> run_backward(gate_actor* self, backward_request& req) {
  auto& s = self->state;
  if (auto refusal = admit_training(self, req)) return refusal;
  const auto requester = caf::actor_cast<caf::actor>(self->current_sender());
  if (req.grad_output.dtype() != DType::f32 || req.grad_output.shape() != req.hidden.shape())
    return make_error(errc::bad_request, "the output gradient " + req.grad_output.describe() +
                                             " does not match the hidden states " + req.hidden.describe());
  auto chain = training_chain(s.opt, s.blocks, req.first_block, req.last_block, req.hidden, req.prompts, req.adapter);
  if (!chain) return std::move(chain.error());
  auto rp = self->make_response_promise<backward_reply>();
  auto msg = training_message(*s.backend, std::move(*chain), req.hidden, std::move(req.positions), req.prompts,
                              std::move(req.adapter), &req.grad_output);
  caf::actor first = msg.chain.front();
  self->request(first, s.opt.step_timeout, std::move(msg))
      .then(
          [=](block_train_result& r) mutable {
            auto& s = self->state;
            stream_out(self, requester, backward_reply{std::move(r.grad), std::move(r.grad_prompts), 0, {}},
                       s.opt.streams, s.next_stream,
                       [=](caf::expected<backward_reply> out) mutable { deliver_streamed(rp, std::move(out)); });
          },
          [=](caf::error& e) mutable {
            rp.deliver(timeout_or(std::move(e), "the backward through " + span_name(self->state.opt)));
          });
  return rp;
}

caf::result<ack> close_one_session(gate_actor* self, const close_session& req) {
  if (!req.wire_error.empty()) return make_error(errc::bad_request, req.wire_error);
  if (!self->state.sessions.count(req.session_id))
    return make_error(errc::unknown_session, "no session " + std::to_string(req.session_id));
  release_session(self, req.session_id);
  return ack{};
}

// Ends the sessions idle past the session timeout and forgets the quotas' old requests; again after `period`.
void sweep_idle_sessions(gate_actor* self, caf::timespan period) {
  auto& s = self->state;
  const auto now = self->clock().now();
  std::vector<uint64_t> idle;
  for (auto& [id, sess] : s.sessions)
    if (!sess.running && now - sess.last_active > s.opt.session_timeout) idle.push_back(id);
  for (uint64_t id : idle) release_session(self, id);
  s.quotas.sweep(now);
  self->delayed_send(self, period, sweep_atom::value);
}

caf::behavior span_gate(gate_actor* self, gate_options opt, std::vector<caf::actor> blocks,
                        std::shared_ptr<Backend> backend, caf::actor connector, caf::actor dht) {
  auto& st = self->state;
  st.opt = std::move(opt);
  st.blocks = std::move(blocks);
  st.backend = std::move(backend);
  st.connector = std::move(connector);
  st.dht = std::move(dht);
  st.budget = span_budget(st.opt);
  st.quotas = PeerQuotas<caf::node_id>(quota_of(st.opt));
  st.rng.seed(st.opt.seed);
  st.inbound = inbound_streams(st.opt.streams);
  st.batcher = std::make_unique<StepBatcher>(st.opt.max_batch_tokens);
  for (auto& b : st.blocks) self->link_to(b);  // a block actor that dies takes the gate down, and vice versa

  self->set_down_handler([=](caf::down_msg& m) {
    auto& hops = self->state.next_hops;
    for (auto it = hops.begin(); it != hops.end();)
      it = it->second.address() == m.source ? hops.erase(it) : std::next(it);
    std::vector<uint64_t> dead;
    for (auto& [id, s] : self->state.sessions)
      if (s.owner == m.source) dead.push_back(id);
    for (uint64_t id : dead) release_session(self, id);
  });
  self->set_default_handler([](caf::scheduled_actor*, caf::message_view& x) -> caf::result<caf::message> {
    return make_error(errc::unexpected_message, "unexpected message " + caf::to_string(x.content()));
  });
  const auto sweep_period = std::max<caf::timespan>(std::chrono::milliseconds(100), st.opt.session_timeout / 4);
  self->delayed_send(self, sweep_period, sweep_atom::value);

  return {
      // The session protocol (any peer).
      [=](const info_request&) { return describe_server(self); },
      [=](const bandwidth_probe& p) -> caf::result<ack> {
        if (!p.wire_error.empty()) return make_error(errc::bad_request, p.wire_error);
        return ack{};
      },
      [=](const open_session& req) { return open_on_blocks(self, req); },
      [=](step_request& req) { return run_step(self, req); },
      [=](const close_session& req) { return close_one_session(self, req); },
      // Training (any peer). Large requests arrive in chunks (actors/protocol/wire_stream.hpp) before the request
      // naming them.
      [=](const wire_chunk& chunk) { return receive_chunk(self, self->state.inbound, chunk); },
      [=](forward_request& req) { return run_forward(self, req); },
      [=](backward_request& req) { return run_backward(self, req); },
      // DHT RPCs on the server's port, answered by its DHT node.
      [=](dht_ping_request& r) { return to_dht<dht_ping_reply>(self, r); },
      [=](dht_find_node_request& r) { return to_dht<dht_find_node_reply>(self, r); },
      [=](dht_find_value_request& r) { return to_dht<dht_find_value_reply>(self, r); },
      [=](dht_store_request& r) { return to_dht<dht_store_reply>(self, r); },
      // Control (this node's own actors only).
      [=](blocks_atom, const std::vector<caf::actor>& blocks) -> caf::result<ack> {
        if (!from_own_node(self)) return make_error(errc::bad_request, "not accepted from another node");
        return install_blocks(self, blocks);
      },
      [=](span_atom, int64_t first, int64_t last) -> caf::result<ack> {
        if (!from_own_node(self)) return make_error(errc::bad_request, "not accepted from another node");
        return move_to_span(self, first, last);
      },
      [=](address_atom, const std::string& address) {
        if (from_own_node(self)) self->state.opt.address = address;
      },
      [=](batch_atom) {
        if (from_own_node(self)) start_held_batches(self);
      },
      [=](sweep_atom) {
        if (from_own_node(self)) sweep_idle_sessions(self, sweep_period);
      },
      [=](stream_sweep_atom) {
        if (from_own_node(self)) sweep_streams(self, self->state.inbound);
      },
  };
}

}  // namespace

caf::actor spawn_span_gate(caf::actor_system& sys, gate_options options, std::vector<caf::actor> blocks,
                           std::shared_ptr<Backend> backend, caf::actor connector, caf::actor dht) {
  return sys.spawn(span_gate, std::move(options), std::move(blocks), std::move(backend), std::move(connector),
                   std::move(dht));
}

}  // namespace corolla
