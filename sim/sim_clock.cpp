#include "sim/sim_clock.hpp"

#include <algorithm>
#include <caf/all.hpp>
#include <functional>

namespace corolla::sim {
namespace {

// Whether `actor` still waits for the response `id` (its handlers are protected: pointers to them taken through a
// subclass read them in any scheduled actor). Anything else, say a blocking actor, counts as waiting.
struct response_handlers : caf::scheduled_actor {
  static bool awaits(const caf::strong_actor_ptr& actor, caf::message_id id) {
    auto* a = dynamic_cast<caf::scheduled_actor*>(actor->get());
    if (!a) return true;
    if ((a->*(&response_handlers::multiplexed_responses_)).count(id) > 0) return true;
    for (const auto& pending : a->*(&response_handlers::awaited_responses_))
      if (pending.first == id) return true;
    return false;
  }
};

// An actor's termination flag (protected in CAF, read the same way).
struct actor_flags : caf::abstract_actor {
  static bool terminated(const caf::abstract_actor* actor) {
    return (actor->*(&actor_flags::getf))(is_terminated_flag);
  }
};

}  // namespace

bool has_ended(const caf::weak_actor_ptr& actor) {
  auto strong = actor.lock();
  return !strong || actor_flags::terminated(strong->get());
}

sim_clock::~sim_clock() { cancel_all(); }

uint32_t sim_clock::add(time_point t, kind what, caf::strong_actor_ptr target) {
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  timer& x = slots_[slot];
  x.what = what;
  x.due = t;
  x.target = std::move(target);
  queue_.push({t.time_since_epoch().count(), next_seq_++, slot, x.generation});
  ++live_;
  return slot;
}

uint32_t& sim_clock::first_of(caf::actor_id owner) {
  if (owner >= first_of_.size()) first_of_.resize(std::max<size_t>(owner + 1, first_of_.size() * 2), none);
  return first_of_[owner];
}

void sim_clock::link(uint32_t slot, caf::actor_id owner) {
  timer& x = slots_[slot];
  x.owner = owner;
  uint32_t& first = first_of(owner);
  x.prev = none;
  x.next = first;
  if (first != none) slots_[first].prev = slot;
  first = slot;
}

void sim_clock::unlink(uint32_t slot) {
  timer& x = slots_[slot];
  if (x.prev != none) slots_[x.prev].next = x.next;
  if (x.next != none) slots_[x.next].prev = x.prev;
  if (x.prev == none) first_of_[x.owner] = x.next;
  x.prev = x.next = none;
}

void sim_clock::release(uint32_t slot) {
  timer& x = slots_[slot];
  if (x.what == kind::request) requests_.erase({x.owner, x.mid.integer_value()});
  if (x.what == kind::ordinary || x.what == kind::multi || x.what == kind::request) unlink(slot);
  x.what = kind::free;
  ++x.generation;
  // Moved out before they are destroyed: destroying a message or the last reference to an actor may call back
  // into this clock (an actor's cleanup cancels its timeouts), which must find the slot already free.
  auto target = std::move(x.target);
  auto content = std::move(x.content);
  auto group = std::move(x.group);
  auto crossing = std::move(x.crossing);
  free_.push_back(slot);
  --live_;
}

uint32_t sim_clock::find_ordinary(caf::actor_id owner, caf::atom_value type) const {
  if (owner >= first_of_.size()) return none;
  for (uint32_t s = first_of_[owner]; s != none; s = slots_[s].next)
    if (slots_[s].what == kind::ordinary && slots_[s].type == type) return s;
  return none;
}

void sim_clock::set_ordinary_timeout(time_point t, caf::abstract_actor* self, caf::atom_value type, uint64_t id) {
  const caf::actor_id owner = self->id();
  if (const uint32_t old = find_ordinary(owner, type); old != none) release(old);  // a new one replaces it
  const uint32_t slot = add(t, kind::ordinary, self->ctrl());
  slots_[slot].type = type;
  slots_[slot].id = id;
  link(slot, owner);
}

void sim_clock::set_multi_timeout(time_point t, caf::abstract_actor* self, caf::atom_value type, uint64_t id) {
  const uint32_t slot = add(t, kind::multi, self->ctrl());
  slots_[slot].type = type;
  slots_[slot].id = id;
  link(slot, self->id());
}

void sim_clock::set_request_timeout(time_point t, caf::abstract_actor* self, caf::message_id id) {
  const request_key key{self->id(), id.integer_value()};
  if (auto it = requests_.find(key); it != requests_.end()) release(it->second);
  const uint32_t slot = add(t, kind::request, self->ctrl());
  slots_[slot].mid = id;
  link(slot, key.actor);
  requests_.emplace(key, slot);
  if (unclaimed_ && unclaimed_->first == key)
    slots_[slot].crossing = std::make_unique<request_crossing>(std::move(unclaimed_->second));
  unclaimed_.reset();
}

void sim_clock::note_crossing(caf::actor_id requester, caf::message_id response_id, request_crossing c) {
  const request_key key{requester, response_id.integer_value()};
  if (auto it = requests_.find(key); it != requests_.end())
    slots_[it->second].crossing = std::make_unique<request_crossing>(std::move(c));
  else
    unclaimed_.emplace(key, std::move(c));
}

void sim_clock::cancel_ordinary_timeout(caf::abstract_actor* self, caf::atom_value type) {
  if (const uint32_t slot = find_ordinary(self->id(), type); slot != none) release(slot);
}

void sim_clock::cancel_request_timeout(caf::abstract_actor* self, caf::message_id id) {
  if (auto it = requests_.find({self->id(), id.integer_value()}); it != requests_.end()) release(it->second);
}

void sim_clock::cancel_timeouts(caf::abstract_actor* self) {
  const caf::actor_id owner = self->id();
  while (owner < first_of_.size() && first_of_[owner] != none) release(first_of_[owner]);
}

void sim_clock::schedule_message(time_point t, caf::strong_actor_ptr receiver, caf::mailbox_element_ptr content) {
  const uint32_t slot = add(t, kind::message, std::move(receiver));
  slots_[slot].content = std::move(content);
}

void sim_clock::schedule_message(time_point t, caf::group target, caf::strong_actor_ptr sender, caf::message content) {
  const uint32_t slot = add(t, kind::group, nullptr);
  slots_[slot].group =
      std::make_unique<group_delivery>(group_delivery{std::move(target), std::move(sender), std::move(content)});
}

void sim_clock::cancel_all() {
  // Taken out whole first: destroying what the timers hold may call back into the clock.
  auto slots = std::move(slots_);
  slots_.clear();
  free_.clear();
  queue_.clear();
  first_of_.clear();
  requests_.clear();
  unclaimed_.reset();
  live_ = 0;
  slots.clear();
}

sim_clock::time_point sim_clock::next_due() {
  const timer_entry* e = queue_.front(live());
  return e ? time_point(time_point::duration(e->due)) : time_point::max();
}

bool sim_clock::fire_next() {
  const timer_entry* front = queue_.front(live());
  if (!front) return false;
  const timer_entry e = *front;
  queue_.pop();
  const time_point due{time_point::duration(e.due)};
  if (current_time < due) current_time = due;
  timer& x = slots_[e.slot];
  const kind what = x.what;
  caf::strong_actor_ptr target = x.target;
  caf::mailbox_element_ptr content = std::move(x.content);
  std::unique_ptr<group_delivery> group = std::move(x.group);
  const caf::atom_value type = x.type;
  const uint64_t id = x.id;
  const caf::message_id mid = x.mid;
  std::unique_ptr<request_crossing> crossing = std::move(x.crossing);
  release(e.slot);
  switch (what) {
    case kind::ordinary:
    case kind::multi:
      target->get()->eq_impl(caf::make_message_id(), target, nullptr, caf::timeout_msg{type, id});
      break;
    case kind::request:  // one whose response came needs no message: the actor would only drop it
      if (response_handlers::awaits(target, mid)) {
        if (crossing && on_unanswered) on_unanswered(*crossing);
        target->get()->eq_impl(mid, target, nullptr, caf::sec::request_timeout);
      }
      break;
    case kind::message: target->enqueue(std::move(content), nullptr); break;
    case kind::group:
      group->target->eq_impl(caf::make_message_id(), std::move(group->sender), nullptr, std::move(group->content));
      break;
    case kind::free: break;
  }
  if (queue_.size() > 2 * live_ + 4096) queue_.sweep(live());
  return true;
}

void sim_clock::drop_answered(const caf::strong_actor_ptr& requester, caf::message_id response_id, time_point arrives) {
  if (!requester) return;
  auto it = requests_.find({requester->id(), response_id.integer_value()});
  if (it == requests_.end()) return;
  if (slots_[it->second].due > arrives)
    release(it->second);
  else
    slots_[it->second].crossing.reset();  // answered, if too late
}

void sim_coordinator::stop() {
  test_coordinator::stop();
  virtual_clock_.cancel_all();
}

}  // namespace corolla::sim
