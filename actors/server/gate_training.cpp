#include "actors/server/gate_training.hpp"

#include <algorithm>

#include "actors/protocol/block_span.hpp"
#include "actors/protocol/errors.hpp"
#include "model/train/span_training.hpp"

namespace corolla {

std::string check_adapter(const gate_options& opt, const std::string& adapter) {
  if (adapter.empty() || std::find(opt.adapters.begin(), opt.adapters.end(), adapter) != opt.adapters.end()) return {};
  std::string held;
  for (const auto& a : opt.adapters) held += (held.empty() ? "" : ", ") + a;
  return "unknown adapter '" + adapter + "' (this server holds " + (held.empty() ? std::string("none") : held) + ")";
}

caf::expected<std::vector<caf::actor>> training_chain(const gate_options& opt, const std::vector<caf::actor>& blocks,
                                                      int64_t first_block, int64_t last_block, const Tensor& hidden,
                                                      const Tensor& prompts, const std::string& adapter) {
  if (auto problem = check_adapter(opt, adapter); !problem.empty()) return make_error(errc::bad_request, problem);
  int64_t first = first_block, last = last_block;
  if (first == 0 && last == 0) first = opt.first_block, last = opt.last_block;
  if (first < opt.first_block || last > opt.last_block || first >= last)
    return make_error(errc::unknown_block, "blocks " + block_span(first, last) + " are not all served here (blocks " +
                                               block_span(opt.first_block, opt.last_block) + ")");
  if (auto problem = check_prompts(prompts, hidden, last - first); !problem.empty())
    return make_error(errc::bad_request, problem);
  return std::vector<caf::actor>(blocks.begin() + (first - opt.first_block), blocks.begin() + (last - opt.first_block));
}

block_train_msg training_message(Backend& backend, std::vector<caf::actor> chain, const Tensor& hidden,
                                 std::vector<int32_t> positions, const Tensor& prompts, std::string adapter,
                                 const Tensor* grad) {
  block_train_msg m;
  m.hidden = working_copy(backend, hidden);
  m.positions = std::move(positions);
  if (has_prompts(prompts)) m.prompts = prompts;
  m.adapter = std::move(adapter);
  m.chain = std::move(chain);
  if (grad) {
    m.backward = true;
    m.grad = working_copy(backend, *grad);
    if (has_prompts(prompts)) m.grad_prompts = Tensor::empty(DType::f32, prompts.shape());
  }
  return m;
}

}  // namespace corolla
