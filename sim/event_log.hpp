// The simulator's event log: one line per event, in the order the single-threaded simulation produced them,
// stamped with virtual time ("123.456789 crash server=srv-7"). The same seed gives the same bytes.
#pragma once

#include <caf/actor_clock.hpp>
#include <sstream>
#include <string>

namespace corolla::sim {

class EventLog {
 public:
  explicit EventLog(caf::actor_clock::time_point origin = {}) : origin_(origin) {}
  void set_origin(caf::actor_clock::time_point origin) { origin_ = origin; }
  // Seconds of virtual time since the simulation began.
  double seconds(caf::actor_clock::time_point t) const;
  // Appends "SECONDS KIND DETAILS\n".
  void add(caf::actor_clock::time_point t, const std::string& kind, const std::string& details);
  std::string text() const { return out_.str(); }
  size_t lines() const { return lines_; }

 private:
  caf::actor_clock::time_point origin_;
  std::ostringstream out_;
  size_t lines_ = 0;
};

}  // namespace corolla::sim
