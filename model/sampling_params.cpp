#include <stdexcept>
#include <string>

#include "model/sampling.hpp"

namespace corolla {

void SamplingParams::validate() const {
  if (!(temperature > 0)) throw std::invalid_argument("temperature must be > 0, got " + std::to_string(temperature));
  if (top_k < 0) throw std::invalid_argument("top_k must be >= 0, got " + std::to_string(top_k));
  if (!(top_p > 0 && top_p <= 1)) throw std::invalid_argument("top_p must be in (0, 1], got " + std::to_string(top_p));
  if (!(repetition_penalty > 0))
    throw std::invalid_argument("repetition_penalty must be > 0, got " + std::to_string(repetition_penalty));
}

}  // namespace corolla
