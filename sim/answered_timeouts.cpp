#include "sim/answered_timeouts.hpp"

#include <caf/all.hpp>
#include <caf/detail/simple_actor_clock.hpp>

namespace corolla::sim {
namespace {

using caf::detail::simple_actor_clock;

// The clock's schedule and its index by actor are protected: pointers to them taken through a subclass read them
// in any clock of that type.
struct clock_internals : simple_actor_clock {
  static schedule_map& schedule(simple_actor_clock& c) { return c.*(&clock_internals::schedule_); }
  static actor_lookup_map& by_actor(simple_actor_clock& c) { return c.*(&clock_internals::actor_lookup_); }
};

}  // namespace

void drop_timeout_answered_in_time(caf::actor_clock& clock, const caf::strong_actor_ptr& requester,
                                   caf::message_id response_id, caf::actor_clock::time_point arrives) {
  auto* c = dynamic_cast<simple_actor_clock*>(&clock);
  if (!c || !requester) return;
  auto& by_actor = clock_internals::by_actor(*c);
  auto [first, last] = by_actor.equal_range(requester->id());
  for (auto it = first; it != last; ++it) {
    auto& event = *it->second->second;
    if (event.subtype != simple_actor_clock::request_timeout_type ||
        static_cast<simple_actor_clock::request_timeout&>(event).id != response_id)
      continue;
    if (event.due > arrives) {
      clock_internals::schedule(*c).erase(it->second);
      by_actor.erase(it);
    }
    return;
  }
}

}  // namespace corolla::sim
