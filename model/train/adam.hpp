// Adam, as torch.optim.Adam computes it (no weight decay, no amsgrad), over f32 host tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.hpp"

namespace corolla {

struct AdamOptions {
  float lr = 1e-2f;
  float beta1 = 0.9f, beta2 = 0.999f;
  float eps = 1e-8f;
};

class Adam {
 public:
  explicit Adam(AdamOptions options);
  // Registers a parameter and the tensor its gradient accumulates in (same shape, f32, host; both shared).
  void add(Tensor param, Tensor grad);
  // One update of every parameter from its gradient; the gradients are left as they are.
  void step();
  int64_t steps() const { return steps_; }
  const AdamOptions& options() const { return options_; }

 private:
  struct Slot {
    Tensor param, grad, m, v;
  };
  AdamOptions options_;
  std::vector<Slot> slots_;
  int64_t steps_ = 0;
};

}  // namespace corolla
