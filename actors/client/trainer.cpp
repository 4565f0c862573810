// The training loop's actor: one train_step is inputs -> blocks forward -> loss -> blocks backward -> Adam.
#include <caf/all.hpp>

#include "actors/client/training_api.hpp"
#include "actors/protocol/errors.hpp"

namespace corolla {
namespace {

struct trainer_state {
  std::unique_ptr<PromptTuning> tuning;
  block_runner_actor blocks;
  caf::timespan timeout;
  bool busy = false;
  static inline const char* name = "trainer";
};

using trainer_self = trainer_actor::stateful_pointer<trainer_state>;

// Runs `fn`, turning exceptions into errors (bad input is bad_request).
template <class F>
caf::error guarded(F&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return make_error(errc::bad_request, e.what());
  } catch (const std::exception& e) {
    return make_error(errc::internal, e.what());
  }
  return caf::error{};
}

trainer_actor::behavior_type trainer(trainer_self self, std::shared_ptr<const ClientHead> head,
                                     block_runner_actor blocks, TuningOptions options, caf::timespan timeout) {
  self->state.tuning = std::make_unique<PromptTuning>(std::move(head), options);
  self->state.blocks = std::move(blocks);
  self->state.timeout = timeout;
  return {
      [=](train_step& req) -> caf::result<train_step_result> {
        auto& st = self->state;
        if (st.busy) return make_error(errc::bad_request, "a training step is already running");
        auto batch = std::make_shared<const TrainingBatch>(std::move(req.batch));
        BlockInputs in;
        if (auto e = guarded([&] { in = st.tuning->inputs(*batch); })) return e;
        auto rp = self->make_response_promise<train_step_result>();
        st.busy = true;
        const auto start = self->clock().now();
        auto fail = [=](caf::error e) mutable {
          self->state.busy = false;
          rp.deliver(std::move(e));
        };
        self->request(st.blocks, st.timeout, blocks_forward{in.hidden, in.positions, in.prompts})
            .then(
                [=](blocks_forward_result& fwd) mutable {
                  auto& st = self->state;
                  HeadLoss loss;
                  if (auto e = guarded([&] { loss = st.tuning->loss(*batch, fwd.hidden); })) return fail(e);
                  self->request(st.blocks, st.timeout, blocks_backward{fwd.pass, loss.grad})
                      .then(
                          [=](blocks_backward_result& back) mutable {
                            auto& st = self->state;
                            if (auto e = guarded([&] {
                                  st.tuning->accumulate(*batch, back.grad_input, back.grad_prompts);
                                  st.tuning->apply();
                                }))
                              return fail(e);
                            st.busy = false;
                            const double secs = std::chrono::duration<double>(self->clock().now() - start).count();
                            rp.deliver(train_step_result{st.tuning->steps(), loss.loss, batch->tokens(), secs});
                          },
                          fail);
                },
                fail);
        return rp;
      },
      [=](save_atom, const std::string& path) -> caf::result<ack> {
        if (auto e = guarded([&] { self->state.tuning->save(path); })) return e;
        return ack{};
      },
      [=](params_atom) -> trained_parameters {
        trained_parameters out;
        for (auto& [name, value] : self->state.tuning->parameters()) out.tensors.emplace_back(name, value.clone());
        return out;
      },
  };
}

}  // namespace

trainer_actor spawn_trainer(caf::actor_system& sys, std::shared_ptr<const ClientHead> head, block_runner_actor blocks,
                            TuningOptions options, caf::timespan step_timeout) {
  return sys.spawn<caf::detached>(trainer, std::move(head), std::move(blocks), options, step_timeout);
}

}  // namespace corolla
