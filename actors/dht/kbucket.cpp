#include "actors/dht/kbucket.hpp"

#include <algorithm>

namespace corolla {

KBucket::Seen KBucket::seen(const Contact& c) {
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.contact.id == c.id; });
  if (it != entries_.end()) {
    Entry e = std::move(*it);
    entries_.erase(it);
    e.failures = 0;
    if (!c.address.empty()) e.contact.address = c.address;
    entries_.push_back(std::move(e));
    return Seen::updated;
  }
  if (!full()) {
    entries_.push_back({c, 0});
    std::erase_if(replacements_, [&](const Contact& r) { return r.id == c.id; });
    return Seen::added;
  }
  std::erase_if(replacements_, [&](const Contact& r) { return r.id == c.id; });
  replacements_.push_back(c);
  if (replacements_.size() > opt_.replacement_slots) replacements_.erase(replacements_.begin());
  return Seen::replacement;
}

bool KBucket::failed(const NodeId& id, bool stale) {
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.contact.id == id; });
  if (it == entries_.end()) {
    std::erase_if(replacements_, [&](const Contact& r) { return r.id == id; });
    return false;
  }
  ++it->failures;
  if (it->failures < opt_.max_failures && !(stale && !replacements_.empty())) return false;
  entries_.erase(it);
  promote_replacement();
  return true;
}

void KBucket::promote_replacement() {
  if (replacements_.empty() || full()) return;
  entries_.push_back({std::move(replacements_.back()), 0});
  replacements_.pop_back();
}

bool KBucket::contains(const NodeId& id) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.contact.id == id; });
}

size_t KBucket::failures(const NodeId& id) const {
  for (const auto& e : entries_)
    if (e.contact.id == id) return e.failures;
  return 0;
}

std::vector<Contact> KBucket::contacts() const {
  std::vector<Contact> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) out.push_back(e.contact);
  return out;
}

std::vector<Contact> closest_contacts(std::vector<Contact> contacts, const NodeId& target, size_t n) {
  auto by_distance = [&](const Contact& a, const Contact& b) { return closer(a.id, b.id, target); };
  if (contacts.size() > n) {
    std::partial_sort(contacts.begin(), contacts.begin() + static_cast<std::ptrdiff_t>(n), contacts.end(), by_distance);
    contacts.resize(n);
  } else {
    std::sort(contacts.begin(), contacts.end(), by_distance);
  }
  return contacts;
}

}  // namespace corolla
