// Modelled time: what a backend that does no arithmetic reports instead of spending it. The simulator's cost model
// (sim/cost_backend.hpp) implements Backend and this interface; its operations only account the time the work
// would take on the modelled device. The caller of a block's forward then lets that time pass: the block actors
// of a server queue their work on the device (all of them share its backend) and the last block of a step delays
// its reply until the step's work ends. For the real backends, which spent the time for real, it is zero: one rule for
// all, and no actor asks whether it is simulated.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>

#include "kernels/backend.hpp"

namespace corolla {

class ModelledTime {
 public:
  using time_point = std::chrono::steady_clock::time_point;  // the actor clock's
  virtual ~ModelledTime() = default;
  // The time of the work done since the last call, which is reset.
  virtual std::chrono::nanoseconds take_modelled_time() = 0;
  // Queues the work done since the last call on the modelled device, one thing at a time: it starts at `earliest`
  // or when the work queued before it ends, whichever is later. Returns when it ends.
  time_point queue_work(time_point earliest) {
    busy_until_ = std::max(earliest, busy_until_) + take_modelled_time();
    return busy_until_;
  }

 private:
  time_point busy_until_{};
};

// The modelled time of the work `backend` did since the last call: zero unless it models its time.
inline std::chrono::nanoseconds take_modelled_time(Backend& backend) {
  ModelledTime* m = backend.modelled_time();
  return m ? m->take_modelled_time() : std::chrono::nanoseconds{0};
}

// When the work `backend` did since the last call ends, queued on its device no earlier than `earliest`
// (ModelledTime::queue_work); nullopt for a backend that spent the time for real.
inline std::optional<ModelledTime::time_point> modelled_end(Backend& backend, ModelledTime::time_point earliest) {
  ModelledTime* m = backend.modelled_time();
  if (!m) return std::nullopt;
  return m->queue_work(earliest);
}

}  // namespace corolla
