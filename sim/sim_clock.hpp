// The simulation's virtual clock: every timer of the swarm (network deliveries, delayed messages, request and
// receive timeouts) in one queue (sim/timer_queue.hpp), ordered by due time and then by when it was set.
//
// CAF's test clock keeps them in two multimaps (by time, and by actor for cancelling), three allocations and two
// tree insertions per timer; at 10,000 servers those trees hold hundreds of thousands of entries and their
// operations were the largest single cost of a run. Here a timer is a slot in a slab, a queue entry and, when it
// can be cancelled, a link in its actor's list; a cancelled timer leaves its queue entry behind, skipped when it
// comes up (and swept when such entries outnumber the live ones).
//
// Semantics are those of CAF 0.17's simple_actor_clock: a new ordinary timeout of a type replaces the actor's
// previous one, a request timeout replaces one of the same id, timers due at the same time fire in the order they
// were set, and firing ships exactly what CAF ships.
//
// CAF 0.17 also never cancels a request's timeout when the response comes: the timer stays until it falls due
// and the actor then drops an error for an id it no longer waits for. drop_answered takes such timers off once a
// link has scheduled the response to arrive before them (see sim_link.cpp); one that falls due after its
// response came (a local request's: no link sees those) fires without sending the actor anything.
#pragma once

#include <caf/detail/test_actor_clock.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "sim/timer_queue.hpp"

namespace corolla::sim {

// A request that crossed the simulated network, as the link it crossed saw it (kept with the request's timeout):
// the actor it reached and the network's fault count then (sim/network.hpp), for the request-answered invariant.
struct request_crossing {
  caf::weak_actor_ptr receiver;
  const char* receiver_name = "";
  size_t from = 0, to = 0;  // the requester's node and the receiver's
  uint64_t faults = 0;
  caf::actor_clock::time_point sent{};
};

// Whether the actor has ended: gone, or terminated while handles to it keep it in memory.
bool has_ended(const caf::weak_actor_ptr& actor);

class sim_clock final : public caf::detail::test_actor_clock {
 public:
  sim_clock() = default;
  sim_clock(const sim_clock&) = delete;
  sim_clock& operator=(const sim_clock&) = delete;
  ~sim_clock() override;

  void set_ordinary_timeout(time_point t, caf::abstract_actor* self, caf::atom_value type, uint64_t id) override;
  void set_multi_timeout(time_point t, caf::abstract_actor* self, caf::atom_value type, uint64_t id) override;
  void set_request_timeout(time_point t, caf::abstract_actor* self, caf::message_id id) override;
  void cancel_ordinary_timeout(caf::abstract_actor* self, caf::atom_value type) override;
  void cancel_request_timeout(caf::abstract_actor* self, caf::message_id id) override;
  void cancel_timeouts(caf::abstract_actor* self) override;
  void schedule_message(time_point t, caf::strong_actor_ptr receiver, caf::mailbox_element_ptr content) override;
  void schedule_message(time_point t, caf::group target, caf::strong_actor_ptr sender, caf::message content) override;
  // Drops every timer without firing it (the simulation is over).
  void cancel_all() override;

  // When the next timer is due; time_point::max() when none is pending.
  time_point next_due();
  // Moves the clock to the next timer (never backwards) and fires it; false when none is pending.
  bool fire_next();
  // The response to `requester`'s request `response_id` reaches it at `arrives`: its timeout, due later, is taken
  // off (the actor would handle the response first and drop the timeout). One due at or before stays.
  void drop_answered(const caf::strong_actor_ptr& requester, caf::message_id response_id, time_point arrives);
  // Timers pending (not counting cancelled queue entries).
  size_t pending() const { return live_; }

  // A link delivered `requester`'s request, whose response will carry `response_id`, to `c.receiver`. Kept with the
  // request's timeout, which CAF sets right after the send (a request relayed further keeps its latest crossing).
  void note_crossing(caf::actor_id requester, caf::message_id response_id, request_crossing c);
  // Called when a request's timeout fires while its requester still waits for a response nobody sent: the request
  // crossed the network (a response on its way, however late, takes the crossing off: drop_answered).
  std::function<void(const request_crossing&)> on_unanswered;

 private:
  enum class kind : uint8_t { free, ordinary, multi, request, message, group };
  static constexpr uint32_t none = UINT32_MAX;

  struct group_delivery {
    caf::group target;
    caf::strong_actor_ptr sender;
    caf::message content;
  };

  struct timer {
    kind what = kind::free;
    uint32_t generation = 0;  // counts the slot's reuses: a queue entry of an earlier use is stale
    time_point due;
    caf::actor_id owner = 0;  // the actor whose list the timer is on (cancellable kinds)
    uint32_t prev = none, next = none;
    caf::strong_actor_ptr target;  // the actor timed out, or the message's receiver
    caf::mailbox_element_ptr content;
    caf::atom_value type{};
    uint64_t id = 0;
    caf::message_id mid;
    std::unique_ptr<group_delivery> group;
    std::unique_ptr<request_crossing> crossing;  // a request's, once a link noted it
  };

  struct request_key {
    caf::actor_id actor;
    uint64_t mid;
    bool operator==(const request_key&) const = default;
  };
  struct request_key_hash {
    size_t operator()(const request_key& k) const noexcept {
      return std::hash<uint64_t>()(k.actor * 0x9E3779B97F4A7C15ull ^ k.mid);
    }
  };

  uint32_t add(time_point t, kind what, caf::strong_actor_ptr target);
  void link(uint32_t slot, caf::actor_id owner);
  void unlink(uint32_t slot);
  void release(uint32_t slot);  // takes the timer off its lists and frees its slot
  uint32_t find_ordinary(caf::actor_id owner, caf::atom_value type) const;  // `none` when the actor has none
  // Whether a queue entry is still its slot's timer (not cancelled, nor a slot reused since), as a predicate.
  auto live() const {
    return [this](const timer_entry& e) { return slots_[e.slot].generation == e.generation; };
  }

  std::vector<timer> slots_;
  std::vector<uint32_t> free_;
  timer_queue queue_;
  uint64_t next_seq_ = 0;
  size_t live_ = 0;
  // Each actor's cancellable timers, as a list: the first slot by actor id (CAF numbers actors from 1 upwards, so
  // an array: 4 bytes per actor ever spawned, where a hash map cost two cache misses per timer set or released).
  std::vector<uint32_t> first_of_;
  uint32_t& first_of(caf::actor_id owner);  // grows the array to hold `owner`
  std::unordered_map<request_key, uint32_t, request_key_hash> requests_;
  // The crossing of a request whose timeout is not set yet (CAF sets it right after sending).
  std::optional<std::pair<request_key, request_crossing>> unclaimed_;
};

// CAF's deterministic scheduler with the sim_clock in place of its test clock (loaded as the actor system's
// scheduler module: `cfg.module_factories`).
class sim_coordinator final : public caf::scheduler::test_coordinator {
 public:
  explicit sim_coordinator(caf::actor_system& sys) : test_coordinator(sys) {}
  sim_clock& clock() noexcept override { return virtual_clock_; }
  void stop() override;

 private:
  sim_clock virtual_clock_;
};

}  // namespace corolla::sim
