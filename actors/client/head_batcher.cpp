#include "actors/client/head_batcher.hpp"

#include <caf/all.hpp>
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"

namespace corolla {
namespace {

using flush_atom = caf::atom_constant<caf::atom("flush")>;

// How long the first request of a round waits for the rest of the last product's sessions (see head_batcher.hpp).
constexpr caf::timespan kHold = std::chrono::milliseconds(2);

struct head_state {
  std::shared_ptr<const ClientHead> head;
  struct waiting {
    Tensor hidden;
    caf::typed_response_promise<Tensor> rp;
    caf::actor_addr session;
  };
  std::vector<waiting> pending;
  uint64_t round = 0;           // numbers the products; a flush names the one it is for
  bool flush_now_sent = false;  // an immediate flush of this round is in the mailbox
  // The product each session was last in, and the sessions each such product still has (its cohort). Sessions
  // are monitored and forgotten when they end.
  std::map<caf::actor_addr, uint64_t> last_round;
  std::map<uint64_t, std::set<caf::actor_addr>> cohorts;
  void join(const caf::actor_addr& session, uint64_t r) {
    auto [it, fresh] = last_round.try_emplace(session, r);
    if (!fresh) leave(it->second, session), it->second = r;
    cohorts[r].insert(session);
  }
  void leave(uint64_t r, const caf::actor_addr& session) {
    auto c = cohorts.find(r);
    if (c == cohorts.end()) return;
    c->second.erase(session);
    if (c->second.empty()) cohorts.erase(c);
  }
  // Whether the first waiting request's cohort has all its sessions waiting.
  bool cohort_in() const {
    auto r = last_round.find(pending.front().session);
    if (r == last_round.end()) return true;
    for (const auto& a : cohorts.at(r->second))
      if (std::none_of(pending.begin(), pending.end(), [&](const auto& w) { return w.session == a; })) return false;
    return true;
  }
  static inline const char* name = "head_batcher";
};

using head_actor = caf::stateful_actor<head_state>;

// The rows of every waiting request through the head at once; each request gets its share of the logits.
void flush(head_actor* self) {
  auto& st = self->state;
  const uint64_t round = st.round++;
  st.flush_now_sent = false;
  std::vector<head_state::waiting> batch = std::exchange(st.pending, {});
  for (const auto& w : batch)
    if (w.session) st.join(w.session, round);
  if (batch.empty()) return;
  const int64_t d = st.head->config().hidden_size;
  int64_t rows = 0;
  for (const auto& w : batch) rows += w.hidden.dim(0);
  try {
    Tensor all = batch.size() == 1 ? batch.front().hidden : Tensor::empty(DType::f32, {rows, d});
    if (batch.size() > 1) {
      int64_t row = 0;
      for (const auto& w : batch) {
        std::memcpy(all.data_as<float>() + row * d, w.hidden.data(), static_cast<size_t>(w.hidden.nbytes()));
        row += w.hidden.dim(0);
      }
    }
    const Tensor logits = st.head->logits(all);
    int64_t row = 0;
    for (auto& w : batch) {
      const int64_t r = w.hidden.dim(0);
      w.rp.deliver(logits.slice_rows(row, row + r));
      row += r;
    }
  } catch (const std::exception& e) {
    for (auto& w : batch) w.rp.deliver(make_error(errc::internal, std::string("the LM head: ") + e.what()));
  }
}

caf::behavior head_batcher(head_actor* self, std::shared_ptr<const ClientHead> head) {
  self->state.head = std::move(head);
  self->set_down_handler([=](caf::down_msg& m) {
    auto& st = self->state;
    if (auto it = st.last_round.find(m.source); it != st.last_round.end()) {
      st.leave(it->second, m.source);
      st.last_round.erase(it);
    }
  });
  return {
      [=](head_rows& req) -> caf::result<Tensor> {
        auto& st = self->state;
        const int64_t d = st.head->config().hidden_size;
        if (req.hidden.dtype() != DType::f32 || req.hidden.rank() != 2 || req.hidden.dim(1) != d ||
            req.hidden.dim(0) < 1 || req.hidden.device() != Device::cpu)
          return make_error(errc::bad_request, "the LM head takes f32[rows, " + std::to_string(d) +
                                                   "] on the host, got " + req.hidden.describe());
        auto rp = self->make_response_promise<Tensor>();
        const auto session = caf::actor_cast<caf::actor_addr>(self->current_sender());
        if (session && !st.last_round.count(session)) self->monitor(session);
        st.pending.push_back({std::move(req.hidden), rp, session});
        // The product runs behind the requests already in the mailbox, once the first waiting request's cohort
        // (the sessions of the product it was last in) is all in, or kHold after it came.
        if (st.flush_now_sent) return rp;
        if (st.cohort_in()) {
          st.flush_now_sent = true;
          self->send(self, flush_atom::value, st.round);
        } else if (st.pending.size() == 1) {
          self->delayed_send(self, kHold, flush_atom::value, st.round);
        }
        return rp;
      },
      [=](flush_atom, uint64_t round) {
        if (round == self->state.round) flush(self);
      },
  };
}

}  // namespace

caf::actor spawn_head_batcher(caf::actor_system& sys, std::shared_ptr<const ClientHead> head) {
  return sys.spawn(head_batcher, std::move(head));
}

}  // namespace corolla
