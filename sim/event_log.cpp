#include "sim/event_log.hpp"

#include <cstdio>

namespace corolla::sim {

double EventLog::seconds(caf::actor_clock::time_point t) const {
  return std::chrono::duration<double>(t - origin_).count();
}

void EventLog::add(caf::actor_clock::time_point t, const std::string& kind, const std::string& details) {
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%.6f", seconds(t));
  out_ << stamp << ' ' << kind;
  if (!details.empty()) out_ << ' ' << details;
  out_ << '\n';
  ++lines_;
}

}  // namespace corolla::sim
