#include "actors/server/span_gate.hpp"

#include <caf/all.hpp>
#include <utility>

#include "actors/dht/dht_messages.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/protocol/messages.hpp"
#include "actors/protocol/own_node.hpp"
#include "actors/server/gate_state.hpp"

namespace corolla {
namespace gate {
namespace {

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
  i.kv_dtype = s.opt.kv_dtype;
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
// The node sends them untyped (span_gate_control names no server types); they are block actors.
caf::result<ack> install_blocks(gate_actor* self, const std::vector<caf::actor>& blocks) {
  auto& s = self->state;
  if (!s.blocks.empty() || blocks.empty() ||
      static_cast<int64_t>(blocks.size()) != s.opt.last_block - s.opt.first_block)
    return make_error(errc::bad_request, "the gate's blocks are already installed or do not match its span");
  for (const auto& b : blocks) s.blocks.push_back(caf::actor_cast<block_actor_handle>(b));
  for (auto& b : s.blocks) self->link_to(b);  // a block actor that dies takes the gate down, and vice versa
  return ack{};
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

span_gate_impl::behavior_type span_gate(gate_actor* self, gate_options opt, std::shared_ptr<Backend> backend,
                                        caf::actor connector, dht_rpc_actor dht) {
  auto& st = self->state;
  st.opt = std::move(opt);
  st.backend = std::move(backend);
  st.connector = std::move(connector);
  st.dht = std::move(dht);
  st.budget = span_budget(st.opt);
  st.quotas = PeerQuotas<caf::node_id>(quota_of(st.opt));
  st.rng.seed(st.opt.seed);
  if (st.opt.faults.any()) st.faults = std::make_unique<FaultInjector>(st.opt.faults, st.opt.seed ^ 0x5eedfa17);
  st.inbound = inbound_streams(st.opt.streams);
  st.batcher = std::make_unique<StepBatcher>(st.opt.max_batch_tokens, *st.backend);

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
      [=](const info_request&) -> server_info { return describe_server(self); },
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
}  // namespace gate

span_gate_node spawn_span_gate(caf::actor_system& sys, gate_options options, std::shared_ptr<Backend> backend,
                               caf::actor connector, dht_rpc_actor dht) {
  return sys.spawn(gate::span_gate, std::move(options), std::move(backend), std::move(connector), std::move(dht));
}

}  // namespace corolla
