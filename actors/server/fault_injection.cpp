#include "actors/server/fault_injection.hpp"

#include <string>

#include "actors/protocol/errors.hpp"

namespace corolla {

FaultInjector::FaultInjector(fault_options options, uint64_t seed)
    : opt_(options), rng_(seed), shift_(1.0f + static_cast<float>(rng_() >> 41) * 0x1.0p-23f) {}

caf::error FaultInjector::refuse_step() const {
  if (opt_.step_errors_after < 0 || served_ < opt_.step_errors_after) return {};
  return make_error(errc::internal, "injected fault: this server fails every step after its first " +
                                        std::to_string(opt_.step_errors_after));
}

void FaultInjector::served(Tensor& output) {
  ++served_;
  if (opt_.wrong_outputs <= 0 || !std::bernoulli_distribution(opt_.wrong_outputs)(rng_)) return;
  output = output.clone();
  float* v = output.data_as<float>();
  for (int64_t i = 0; i < output.numel(); ++i) v[i] += shift_;
}

}  // namespace corolla
