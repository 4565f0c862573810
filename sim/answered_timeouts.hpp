// Request timeouts of requests whose answer is already on its way, taken off the virtual clock.
//
// CAF 0.17 never cancels a request's timeout when the response comes: the clock keeps it until it falls due, then
// the actor gets a `request_timeout` error for an id it no longer waits for, and drops it. Real time pays little
// for that; the simulator keeps every such timeout of its whole swarm in the clock's two trees (by time and by
// actor) for 5-60 virtual seconds, most of them dead: at 10,000 servers those trees' operations were 14% of the
// run, and each dead timeout still costs two events when it fires.
#pragma once

#include <caf/actor_clock.hpp>
#include <caf/fwd.hpp>
#include <caf/message_id.hpp>

namespace corolla::sim {

// A response to `requester`'s request `response_id` will reach it at `arrives` (a link scheduled it on the
// clock). When the request's timeout falls due later than that, removes it: the response is handled first, so
// the actor would have dropped the timeout. Exact, not a guess: a timeout due at or before `arrives` stays (the
// clock fires it first, and the response then finds no handler), as does anything not a request timeout.
void drop_timeout_answered_in_time(caf::actor_clock& clock, const caf::strong_actor_ptr& requester,
                                   caf::message_id response_id, caf::actor_clock::time_point arrives);

}  // namespace corolla::sim
