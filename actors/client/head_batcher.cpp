#include "actors/client/head_batcher.hpp"

#include <caf/all.hpp>
#include <cstring>
#include <vector>

#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"

namespace corolla {
namespace {

using flush_atom = caf::atom_constant<caf::atom("flush")>;

struct head_state {
  std::shared_ptr<const ClientHead> head;
  struct waiting {
    Tensor hidden;
    caf::typed_response_promise<Tensor> rp;
  };
  std::vector<waiting> pending;
  bool flush_sent = false;  // a flush_atom is in the mailbox, behind the requests that came before it
  static inline const char* name = "head_batcher";
};

using head_actor = caf::stateful_actor<head_state>;

// The rows of every waiting request through the head at once; each request gets its share of the logits.
void flush(head_actor* self) {
  auto& st = self->state;
  st.flush_sent = false;
  std::vector<head_state::waiting> batch = std::exchange(st.pending, {});
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
  return {
      [=](head_rows& req) -> caf::result<Tensor> {
        auto& st = self->state;
        const int64_t d = st.head->config().hidden_size;
        if (req.hidden.dtype() != DType::f32 || req.hidden.rank() != 2 || req.hidden.dim(1) != d ||
            req.hidden.dim(0) < 1 || req.hidden.device() != Device::cpu)
          return make_error(errc::bad_request, "the LM head takes f32[rows, " + std::to_string(d) +
                                                   "] on the host, got " + req.hidden.describe());
        auto rp = self->make_response_promise<Tensor>();
        st.pending.push_back({std::move(req.hidden), rp});
        if (!st.flush_sent) {
          st.flush_sent = true;
          self->send(self, flush_atom::value);
        }
        return rp;
      },
      [=](flush_atom) { flush(self); },
  };
}

}  // namespace

caf::actor spawn_head_batcher(caf::actor_system& sys, std::shared_ptr<const ClientHead> head) {
  return sys.spawn(head_batcher, std::move(head));
}

}  // namespace corolla
