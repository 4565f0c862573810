// Modelled time: what a backend that does no arithmetic reports instead of spending it. The simulator's cost model
// (sim/cost_backend.hpp) implements Backend and this interface; its operations only account the time the work
// would take on the modelled device. The caller of a block's forward then lets that time pass (the block actor
// delays its reply by it). For the real backends, which spent the time for real, it is zero: one rule for all,
// and no actor asks whether it is simulated.
#pragma once

#include <chrono>

#include "kernels/backend.hpp"

namespace corolla {

class ModelledTime {
 public:
  virtual ~ModelledTime() = default;
  // The time of the work done since the last call, which is reset.
  virtual std::chrono::nanoseconds take_modelled_time() = 0;
};

// The modelled time of the work `backend` did since the last call: zero unless it models its time.
inline std::chrono::nanoseconds take_modelled_time(Backend& backend) {
  auto* m = dynamic_cast<ModelledTime*>(&backend);
  return m ? m->take_modelled_time() : std::chrono::nanoseconds{0};
}

}  // namespace corolla
