#include "actors/server/gate_state.hpp"

#include "actors/protocol/block_span.hpp"
#include "actors/protocol/errors.hpp"

namespace corolla::gate {

std::string span_name(const gate_options& o) { return "blocks " + block_span(o.first_block, o.last_block); }

caf::error timeout_or(caf::error e, const std::string& what) {
  if (e == caf::sec::request_timeout) return make_error(errc::timeout, what + " timed out");
  return e;
}

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

CacheBudget span_budget(const gate_options& o) {
  std::vector<int64_t> windows;
  for (int64_t i = o.first_block; i < o.last_block; ++i)
    windows.push_back(static_cast<size_t>(i) < o.attention_windows.size() ? o.attention_windows[static_cast<size_t>(i)]
                                                                          : 0);
  return CacheBudget(o.cache_tokens, std::move(windows), o.max_position);
}

peer_quota quota_of(const gate_options& o) {
  int64_t cache = 0;
  if (__builtin_mul_overflow(o.per_peer.cache_tokens, o.last_block - o.first_block, &cache)) cache = INT64_MAX;
  return {o.per_peer.sessions, cache, o.per_peer.requests_per_second};
}

caf::error charge_request(gate_actor* self, const caf::node_id& peer) {
  if (peer == self->node()) return {};
  if (auto refusal = self->state.quotas.admit_request(peer, self->clock().now()))
    return make_busy_error(refusal->why, refusal->retry_after);
  return {};
}

caf::node_id sender_node(gate_actor* self) {
  const auto& sender = self->current_sender();
  return sender ? sender->node() : caf::node_id{};
}

}  // namespace corolla::gate
