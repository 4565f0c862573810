// A block runner over every block of a model in this process (training without a swarm, and the reference the
// swarm's training is checked against). It keeps each pass's input for the backward.
#include <caf/all.hpp>
#include <map>

#include "actors/client/training_api.hpp"
#include "actors/protocol/errors.hpp"
#include "model/train/local_training.hpp"
#include "model/train/span_training.hpp"

namespace corolla {
namespace {

// Passes kept for a backward; older ones are dropped (a forward that never gets its backward).
constexpr size_t kKeptPasses = 4;

struct local_runner_state {
  std::shared_ptr<Backend> backend;
  std::unique_ptr<LocalBlocks> blocks;
  std::map<uint64_t, blocks_forward> passes;
  uint64_t next_pass = 1;
  static inline const char* name = "local_block_runner";
};

block_runner_actor::behavior_type local_block_runner(block_runner_actor::stateful_pointer<local_runner_state> self,
                                                     std::shared_ptr<WeightSource> source,
                                                     std::shared_ptr<Backend> backend) {
  self->state.backend = std::move(backend);
  self->state.blocks = std::make_unique<LocalBlocks>(*source, *self->state.backend);
  return {
      [=](blocks_forward& req) -> caf::result<blocks_forward_result> {
        auto& st = self->state;
        try {
          Tensor out = span_forward(st.blocks->blocks(), req.hidden, req.positions, req.prompts, *st.backend);
          const uint64_t pass = st.next_pass++;
          st.passes[pass] = std::move(req);
          while (st.passes.size() > kKeptPasses) st.passes.erase(st.passes.begin());
          return blocks_forward_result{std::move(out), pass, 0};
        } catch (const std::invalid_argument& e) {
          return make_error(errc::bad_request, e.what());
        } catch (const std::exception& e) {
          return make_error(errc::internal, e.what());
        }
      },
      [=](blocks_backward& req) -> caf::result<blocks_backward_result> {
        auto& st = self->state;
        auto it = st.passes.find(req.pass);
        if (it == st.passes.end())
          return make_error(errc::bad_request, "no forward pass " + std::to_string(req.pass) + " to back up");
        const blocks_forward fwd = std::move(it->second);
        st.passes.erase(it);
        try {
          SpanGradients g =
              span_backward(st.blocks->blocks(), fwd.hidden, req.grad_output, fwd.positions, fwd.prompts, *st.backend);
          return blocks_backward_result{std::move(g.grad_in), std::move(g.grad_prompts), 0};
        } catch (const std::invalid_argument& e) {
          return make_error(errc::bad_request, e.what());
        } catch (const std::exception& e) {
          return make_error(errc::internal, e.what());
        }
      },
  };
}

}  // namespace

block_runner_actor spawn_local_block_runner(caf::actor_system& sys, std::shared_ptr<WeightSource> source,
                                            std::shared_ptr<Backend> backend) {
  return sys.spawn<caf::detached>(local_block_runner, std::move(source), std::move(backend));
}

}  // namespace corolla
