// Unix time on an actor's clock: what signed records' expiries are written in, so that nodes on different
// machines agree on them (actor clocks are monotonic clocks whose zero differs between machines). It is the
// actor's clock plus the node's offset (wall_clock), by default the process's offset between the system clock and
// the monotonic clock, read once: in the simulator the actor clock is virtual, and so is this time, each simulated
// node's off by the skew its world gives it.
#pragma once

#include <caf/local_actor.hpp>
#include <chrono>
#include <cstdint>

namespace corolla {

inline int64_t unix_offset_ms() {
  static const int64_t offset = [] {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count() -
           duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
  }();
  return offset;
}

// A node's wall clock: the Unix time it reads at actor-clock time t. By default the process's (its system clock
// read once against the actor clock); a simulated node's is off by the skew its world gives it, as machines'
// clocks are, so that signers, holders and readers of a record may disagree on when it expires.
struct wall_clock {
  int64_t offset_ms = unix_offset_ms();  // Unix milliseconds at actor-clock zero

  // Unix milliseconds at actor-clock time `t`.
  int64_t unix_ms_at(caf::actor_clock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() + offset_ms;
  }
  // The actor-clock time at Unix millisecond `ms`, exactly: the inverse of unix_ms_at on whole milliseconds. Not
  // `now + (ms - unix_ms_at(now))`, which carries now's fraction of a millisecond: two records signed to expire in
  // one millisecond would then expire at different moments depending on when each was read.
  caf::actor_clock::time_point time_at_unix_ms(int64_t ms) const {
    return caf::actor_clock::time_point{std::chrono::milliseconds(ms - offset_ms)};
  }
};

// The same on the process's wall clock.
inline int64_t unix_ms_at(caf::actor_clock::time_point t) { return wall_clock{}.unix_ms_at(t); }
inline caf::actor_clock::time_point time_at_unix_ms(int64_t ms) { return wall_clock{}.time_at_unix_ms(ms); }
inline int64_t unix_ms(caf::local_actor* self) { return unix_ms_at(self->clock().now()); }

}  // namespace corolla
