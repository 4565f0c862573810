#include "actors/client/session_state.hpp"

#include <algorithm>

#include "actors/client/session_messages.hpp"
#include "actors/protocol/block_span.hpp"
#include "actors/protocol/errors.hpp"

namespace corolla::session {

namespace {
constexpr auto kFirstRetry = std::chrono::milliseconds(50);
constexpr auto kLongestRetry = std::chrono::seconds(1);
}  // namespace

void after(session_actor* self, caf::timespan delay, std::function<void()> fn) {
  const uint64_t id = self->state.next_timer++;
  self->state.timers[id] = std::move(fn);
  self->delayed_send(self, delay, retry_atom::value, id);
}

double ms_since(session_actor* self, caf::actor_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(self->clock().now() - t0).count();
}

bool is_server_failure(const caf::error& e) { return !(is(e, errc::bad_request) || is(e, errc::max_length_exceeded)); }

std::string blocks_name(const planned_hop& h) { return "blocks " + block_span(h.first, h.last); }

void report(session_actor* self, const planned_hop& hop, bool ok, double latency_ms) {
  if (self->state.client) self->send(self->state.client, peer_report{peer_id(hop), ok, latency_ms, {}, false, 0});
}
void report_failure(session_actor* self, const planned_hop& hop, const caf::error& e) {
  if (self->state.client) self->send(self->state.client, failure_report(peer_id(hop), e));
}

caf::timespan retry_delay(int round) {
  return std::min<caf::timespan>(kFirstRetry * (int64_t{1} << std::min(round, 10)), kLongestRetry);
}

error_done settle_once_or_on_down(session_actor* self, const caf::actor& gate, const std::string& address,
                                  error_done done) {
  auto settled = std::make_shared<bool>(false);
  const uint64_t id = self->state.next_watch++;
  auto once = [self, id, settled, done = std::move(done)](caf::error e) {
    if (*settled) return;
    *settled = true;
    self->state.watches.erase(id);
    done(std::move(e));
  };
  self->state.watches[id] = {gate.address(), [once, address] {
                               once(make_error(errc::peer_unavailable, "server " + address + " went down"));
                             }};
  return once;
}

void close_hop(session_actor* self, const session_hop& h) {
  if (!h.gate) return;
  if (h.session_id) caf::anon_send(h.gate, close_session{h.session_id, {}});  // its ack is of no use
  self->demonitor(h.gate);
}

}  // namespace corolla::session
