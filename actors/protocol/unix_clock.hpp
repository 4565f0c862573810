// Unix time on an actor's clock: what signed records' expiries are written in, so that nodes on different
// machines agree on them (actor clocks are monotonic clocks whose zero differs between machines). It is the
// actor's clock plus the process's offset between the system clock and the monotonic clock, read once: in the
// simulator the actor clock is virtual, and so is this time, the same for every simulated node.
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

// Unix milliseconds at actor-clock time `t`.
inline int64_t unix_ms_at(caf::actor_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() + unix_offset_ms();
}

// The actor-clock time at Unix millisecond `ms`, exactly: the inverse of unix_ms_at on whole milliseconds. Not
// `now + (ms - unix_ms_at(now))`, which carries now's fraction of a millisecond: two records signed to expire in
// one millisecond would then expire at different moments depending on when each was read.
inline caf::actor_clock::time_point time_at_unix_ms(int64_t ms) {
  return caf::actor_clock::time_point{std::chrono::milliseconds(ms - unix_offset_ms())};
}

inline int64_t unix_ms(caf::local_actor* self) { return unix_ms_at(self->clock().now()); }

}  // namespace corolla
