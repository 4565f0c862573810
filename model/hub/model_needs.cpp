#include "model/hub/model_needs.hpp"

#include "model/weights/weight_source.hpp"

namespace corolla::hub {

bool ModelNeeds::wants(std::string_view tensor_name) const {
  if (!weights) return false;
  const auto block = checkpoint_block_of(tensor_name);
  if (!block) return head;
  return *block >= first_block && (last_block < 0 || *block < last_block);
}

std::string ModelNeeds::label() const {
  if (!weights) return "tokenizer";
  const bool all_blocks = first_block == 0 && last_block < 0;
  const bool no_blocks = last_block >= 0 && last_block <= first_block;
  if (head && all_blocks) return "all";
  std::string blocks = all_blocks ? "blocks"
                                  : "blocks-" + std::to_string(first_block) + "-" +
                                        (last_block < 0 ? "end" : std::to_string(last_block));
  if (no_blocks) return head ? "head" : "none";
  return head ? "head+" + blocks : blocks;
}

}  // namespace corolla::hub
