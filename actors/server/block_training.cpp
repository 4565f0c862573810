#include "actors/server/block_training.hpp"

#include <caf/all.hpp>

#include "actors/protocol/errors.hpp"
#include "model/train/span_training.hpp"

namespace corolla {

caf::result<block_train_result> block_train_step(caf::local_actor* self, Block& block, const BlockLora* lora,
                                                 block_train_msg& m) {
  Backend& be = block.backend();
  const int64_t i = static_cast<int64_t>(m.index);
  try {
    if (!m.going_back) {
      if (has_prompts(m.prompts)) add_block_prompts(be, m.hidden, m.prompts, i);
      const bool last = m.index + 1 == m.chain.size();
      if (!m.backward) {
        block.forward(m.hidden, m.positions, nullptr, lora);
        if (last) return block_train_result{be.download(m.hidden), {}, {}};
      } else if (!last) {
        m.inputs.push_back(device_copy(be, m.hidden));
        block.forward(m.hidden, m.positions, nullptr, lora);
      } else {  // the last block's input is all it needs: turn around
        m.inputs.push_back(std::move(m.hidden));
        m.hidden = Tensor{};
        m.going_back = true;
      }
    }
    if (m.going_back) {
      block.backward(m.inputs[m.index], m.positions, m.grad, lora);
      m.inputs[m.index] = Tensor{};  // done with it
      if (has_prompts(m.prompts)) store_prompt_grad(be, m.grad, m.grad_prompts, i);
      if (m.index == 0) return block_train_result{{}, be.download(m.grad), std::move(m.grad_prompts)};
      --m.index;
    } else {
      ++m.index;
    }
  } catch (const std::invalid_argument& e) {
    return make_error(errc::bad_request, e.what());
  } catch (const std::exception& e) {
    return make_error(errc::internal, "block " + std::to_string(block.index()) + ": " + e.what());
  }
  block_actor_handle next = m.chain[m.index];
  self->delegate(next, std::move(m));
  return caf::delegated<block_train_result>{};
}

}  // namespace corolla
