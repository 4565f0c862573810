#include "model/train/adam.hpp"

#include <cmath>
#include <stdexcept>

namespace corolla {

Adam::Adam(AdamOptions options) : options_(options) {
  if (!(options_.lr > 0)) throw std::invalid_argument("the learning rate must be positive");
  if (!(options_.beta1 >= 0 && options_.beta1 < 1 && options_.beta2 >= 0 && options_.beta2 < 1))
    throw std::invalid_argument("Adam's betas must lie in [0, 1)");
}

void Adam::add(Tensor param, Tensor grad) {
  if (param.dtype() != DType::f32 || grad.dtype() != DType::f32 || param.shape() != grad.shape() ||
      param.device() != Device::cpu || grad.device() != Device::cpu)
    throw std::invalid_argument("Adam: parameter " + param.describe() + " and gradient " + grad.describe() +
                                " must be host f32 tensors of one shape");
  slots_.push_back({param, grad, Tensor::empty(DType::f32, param.shape()), Tensor::empty(DType::f32, param.shape())});
}

void Adam::step() {
  ++steps_;
  const float b1 = options_.beta1, b2 = options_.beta2;
  const float bias1 = 1.f - std::pow(b1, static_cast<float>(steps_));
  const float bias2_sqrt = std::sqrt(1.f - std::pow(b2, static_cast<float>(steps_)));
  const float step_size = options_.lr / bias1;
  for (Slot& s : slots_) {
    float* p = s.param.data_as<float>();
    const float* g = s.grad.data_as<const float>();
    float* m = s.m.data_as<float>();
    float* v = s.v.data_as<float>();
    for (int64_t i = 0; i < s.param.numel(); ++i) {
      m[i] = b1 * m[i] + (1.f - b1) * g[i];
      v[i] = b2 * v[i] + (1.f - b2) * g[i] * g[i];
      const float denom = std::sqrt(v[i]) / bias2_sqrt + options_.eps;
      p[i] -= step_size * m[i] / denom;
    }
  }
}

}  // namespace corolla
