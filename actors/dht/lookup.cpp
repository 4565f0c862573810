#include "actors/dht/lookup.hpp"

#include <algorithm>

namespace corolla {

Lookup::Lookup(const NodeId& target, Options o, const NodeId& self, const std::vector<Contact>& initial)
    : target_(target), self_(self), opt_(o) {
  for (const auto& c : initial) add(c, 1);
}

void Lookup::add(const Contact& c, int depth) {
  if (c.id == self_ || c.address.empty()) return;
  auto [it, inserted] = candidates_.try_emplace(xor_distance(c.id, target_), Candidate{c, State::fresh, depth});
  if (!inserted) it->second.depth = std::min(it->second.depth, depth);
}

Lookup::Candidate* Lookup::find(const NodeId& id) {
  auto it = candidates_.find(xor_distance(id, target_));
  return it == candidates_.end() ? nullptr : &it->second;
}

std::vector<Contact> Lookup::next() {
  std::vector<Contact> out;
  size_t live = 0;
  for (auto& [d, c] : candidates_) {
    if (live >= opt_.k || in_flight_ >= opt_.alpha) break;
    if (passed_over(c.state)) continue;
    ++live;
    if (c.state != State::fresh) continue;
    c.state = State::in_flight;
    c.asked_tick = tick_;
    ++in_flight_;
    ++queries_;
    out.push_back(c.contact);
  }
  return out;
}

void Lookup::answered(const NodeId& from, const std::vector<Contact>& learned) {
  Candidate* c = find(from);
  if (!c || (c->state != State::in_flight && c->state != State::slow)) return;
  if (c->state == State::in_flight) --in_flight_;
  c->state = State::answered;
  const int depth = c->depth + 1;
  for (const auto& l : learned) add(l, depth);
}

void Lookup::failed(const NodeId& from) {
  Candidate* c = find(from);
  if (!c || (c->state != State::in_flight && c->state != State::slow)) return;
  if (c->state == State::in_flight) --in_flight_;
  c->state = State::failed;
}

size_t Lookup::mark_slow() {
  size_t marked = 0;
  for (auto& [d, c] : candidates_)
    if (c.state == State::in_flight && c.asked_tick < tick_) {
      c.state = State::slow;
      --in_flight_;
      ++marked;
    }
  ++tick_;
  return marked;
}

bool Lookup::finished() const {
  if (in_flight_ > 0) return false;
  size_t live = 0;
  for (const auto& [d, c] : candidates_) {
    if (live >= opt_.k) break;
    if (passed_over(c.state)) continue;
    ++live;
    if (c.state == State::fresh) return false;
  }
  return true;
}

std::vector<Contact> Lookup::closest_answered(size_t n) const {
  std::vector<Contact> out;
  for (const auto& [d, c] : candidates_) {
    if (out.size() >= n) break;
    if (c.state == State::answered) out.push_back(c.contact);
  }
  return out;
}

bool Lookup::nearest_answered(size_t n) const {
  size_t seen = 0;
  for (const auto& [d, c] : candidates_) {
    if (seen >= n) break;
    if (passed_over(c.state)) continue;
    if (c.state != State::answered) return false;
    ++seen;
  }
  return true;
}

int Lookup::hops() const {
  int h = 0;
  for (const auto& [d, c] : candidates_)
    if (c.state == State::answered) h = std::max(h, c.depth);
  return h;
}

}  // namespace corolla
