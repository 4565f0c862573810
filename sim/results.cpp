#include "sim/results.hpp"

namespace corolla::sim {

double session_record::steps_per_s() const {
  if (token_s.size() < 2) return 0;
  const double span = token_s.back() - token_s.front();
  return span > 0 ? static_cast<double>(token_s.size() - 1) / span : 0;
}

}  // namespace corolla::sim
