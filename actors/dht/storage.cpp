#include "actors/dht/storage.hpp"

namespace corolla {

bool DhtStorage::RefOrder::operator()(const Ref& a, const Ref& b) const {
  if (a.expiration != b.expiration) return a.expiration < b.expiration;
  if (*a.key != *b.key) return id_less{}(*a.key, *b.key);
  return *a.subkey < *b.subkey;
}

void DhtStorage::tally(Keys::iterator key_it, Entries::iterator e, bool add) {
  const Stored& s = e->second;
  const Ref ref{s.v.expiration, &key_it->first, &e->first, entry_cost(e->first, s.v.value.size())};
  Holder& h = holders_[s.origin];
  if (!s.origin.empty()) by_bytes_.erase({h.bytes, s.origin});
  if (add) {
    bytes_ += ref.cost;
    h.bytes += ref.cost;
    h.entries.insert(ref);
    expiring_.insert(ref);
  } else {
    bytes_ -= ref.cost;
    h.bytes -= ref.cost;
    h.entries.erase(ref);
    expiring_.erase(ref);
  }
  if (h.bytes == 0) {
    holders_.erase(s.origin);
  } else if (!s.origin.empty()) {
    by_bytes_.emplace(h.bytes, s.origin);
  }
  if (s.origin.empty()) return;
  auto& origins = key_it->second.origins;
  size_t& held = origins[s.origin];
  held = add ? held + 1 : held - 1;
  if (held == 0) origins.erase(s.origin);
}

void DhtStorage::insert(Keys::iterator key_it, const std::string& subkey, Stored s) {
  auto [e, _] = key_it->second.entries.emplace(subkey, std::move(s));
  tally(key_it, e, true);
}

void DhtStorage::remove(Keys::iterator key_it, Entries::iterator e, const NodeId* keep) {
  tally(key_it, e, false);
  key_it->second.entries.erase(e);
  if (key_it->second.entries.empty() && (!keep || key_it->first != *keep)) data_.erase(key_it);
}

size_t DhtStorage::purge(DhtTime now) {
  size_t dropped = 0;
  while (!expiring_.empty() && expiring_.begin()->expiration <= now) {
    const Ref first = *expiring_.begin();
    auto key_it = data_.find(*first.key);
    remove(key_it, key_it->second.entries.find(*first.subkey));
    ++dropped;
  }
  return dropped;
}

size_t DhtStorage::held_by(const KeyData& k, const std::string& origin) {
  auto it = k.origins.find(origin);
  return it == k.origins.end() ? 0 : it->second;
}

DhtStorage::Entries::iterator DhtStorage::gives_way_in_key(KeyData& k, const std::string& origin) {
  size_t strangers = 0;
  const std::pair<const std::string, size_t>* largest = nullptr;  // the first of the largest, in origin order
  for (const auto& held : k.origins) {
    strangers += held.second;
    if (!largest || held.second > largest->second) largest = &held;
  }
  const size_t mine = origin.empty() ? k.entries.size() - strangers : held_by(k, origin);  // "": this node's own
  if (!largest || largest->second < mine + 2) return k.entries.end();
  auto victim = k.entries.end();
  for (auto it = k.entries.begin(); it != k.entries.end(); ++it)
    if (it->second.origin == largest->first &&
        (victim == k.entries.end() || it->second.v.expiration < victim->second.v.expiration))
      victim = it;
  return victim;
}

std::optional<DhtStorage::Room> DhtStorage::room_for(Keys::iterator key_it, const NodeId& key,
                                                     const std::string& subkey, const Stored* held, size_t cost,
                                                     const std::string& origin) {
  Room room;
  auto cost_of = [](const Entries::value_type& e) { return entry_cost(e.first, e.second.v.value.size()); };
  // What the put frees of the giver's and of the newcomer's holdings, whoever the giver is.
  const Entries::value_type* freed[2] = {nullptr, nullptr};
  if (held) freed[0] = &*key_it->second.entries.find(subkey);
  if (!held && key_it != data_.end() && key_it->second.entries.size() >= opt_.max_subkeys) {
    auto victim = gives_way_in_key(key_it->second, origin);
    if (victim == key_it->second.entries.end()) return std::nullopt;
    room.in_key = victim;
    freed[1] = &*victim;
  }
  size_t left = bytes_, mine = bytes_from(origin);
  for (const auto* f : freed) {
    if (!f) continue;
    left -= cost_of(*f);
    if (f->second.origin == origin) mine -= cost_of(*f);
  }
  if (left + cost <= opt_.max_bytes) return room;
  const size_t need = left + cost - opt_.max_bytes;
  if (by_bytes_.empty() || by_bytes_.begin()->second == origin) return std::nullopt;
  room.giver = by_bytes_.begin()->second;
  size_t giver = bytes_from(room.giver), got = 0;
  for (const auto* f : freed)
    if (f && f->second.origin == room.giver) giver -= cost_of(*f);
  for (const Ref& r : holders_.at(room.giver).entries) {
    if (*r.key == key && (*r.subkey == subkey || (room.in_key && *r.subkey == (*room.in_key)->first))) continue;
    if (giver < mine + cost + r.cost) return std::nullopt;  // it would hold less than the newcomer
    giver -= r.cost;
    got += r.cost;
    ++room.from_giver;
    if (got >= need) return room;
  }
  return std::nullopt;
}

void DhtStorage::make_room(const Room& room, const NodeId& key, const std::string& subkey) {
  if (room.in_key) remove(data_.find(key), *room.in_key, &key);
  for (size_t n = 0; n < room.from_giver; ++n) {
    const Expiring& entries = holders_.at(room.giver).entries;
    auto r = entries.begin();
    while (*r->key == key && *r->subkey == subkey) ++r;  // the entry the put replaces
    auto key_it = data_.find(*r->key);
    remove(key_it, key_it->second.entries.find(*r->subkey), &key);
  }
}

bool DhtStorage::quota_refuses(const KeyData* k, const std::string& subkey, const Stored* held, size_t cost,
                               const std::string& origin) const {
  if (origin.empty()) return false;
  const bool own = held && held->origin == origin;  // the origin replaces its own entry
  const size_t freed = own ? entry_cost(subkey, held->v.value.size()) : 0;
  if (bytes_from(origin) - freed + cost > opt_.max_bytes_per_origin) return true;
  return !own && k && held_by(*k, origin) >= opt_.max_subkeys_per_origin;
}

DhtStorage::Precheck DhtStorage::precheck(const NodeId& key, const std::string& subkey, const std::string& value,
                                          const std::string& origin, DhtTime now) {
  purge(now);
  auto key_it = data_.find(key);
  const Stored* held = nullptr;
  if (key_it != data_.end())
    if (auto e = key_it->second.entries.find(subkey); e != key_it->second.entries.end()) held = &e->second;
  if (held && held->v.value == value) return Precheck::held;
  const size_t cost = entry_cost(subkey, value.size());
  if (quota_refuses(key_it != data_.end() ? &key_it->second : nullptr, subkey, held, cost, origin))
    return Precheck::refused;
  return room_for(key_it, key, subkey, held, cost, origin) ? Precheck::check : Precheck::refused;
}

DhtStorage::Put DhtStorage::put(const NodeId& key, const std::string& subkey, std::string value, DhtTime expiration,
                                DhtTime now, const std::string& origin) {
  if (expiration <= now) return Put::expired;
  if (expiration - now > opt_.max_ttl) return Put::too_late;
  purge(now);
  auto key_it = data_.find(key);
  const Stored* held = nullptr;
  if (key_it != data_.end())
    if (auto e = key_it->second.entries.find(subkey); e != key_it->second.entries.end()) held = &e->second;
  if (held && held->v.expiration > expiration) return Put::superseded;
  const size_t cost = entry_cost(subkey, value.size());
  if (quota_refuses(key_it != data_.end() ? &key_it->second : nullptr, subkey, held, cost, origin))
    return Put::over_quota;
  const auto room = room_for(key_it, key, subkey, held, cost, origin);
  if (!room) return Put::full;
  make_room(*room, key, subkey);
  key_it = data_.try_emplace(key).first;
  if (held) remove(key_it, key_it->second.entries.find(subkey), &key);
  insert(key_it, subkey, Stored{{std::move(value), expiration}, now, origin});
  return Put::stored;
}

DhtEntries DhtStorage::get(const NodeId& key, DhtTime now) const {
  DhtEntries out;
  visit(key, now, [&](const std::string& subkey, const DhtValue& v) { out.emplace_hint(out.end(), subkey, v); });
  return out;
}

size_t DhtStorage::bytes_from(const std::string& origin) const {
  auto it = holders_.find(origin);
  return it == holders_.end() ? 0 : it->second.bytes;
}

void DhtStorage::for_each(
    DhtTime now, const std::function<void(const NodeId&, const std::string&, const DhtValue&, DhtTime)>& fn) const {
  for (const auto& [key, k] : data_)
    for (const auto& [subkey, s] : k.entries)
      if (s.v.expiration > now) fn(key, subkey, s.v, s.stored_at);
}

}  // namespace corolla
