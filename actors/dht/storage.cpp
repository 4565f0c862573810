#include "actors/dht/storage.hpp"

#include <algorithm>

namespace corolla {

void DhtStorage::count(KeyData& k, const std::string& subkey, const Stored& s, bool add) {
  const size_t size = subkey.size() + s.v.value.size();
  bytes_ = add ? bytes_ + size : bytes_ - size;
  if (add) k.soonest = std::min(k.soonest, s.v.expiration);
  if (s.origin.empty()) return;
  size_t& from = origin_bytes_[s.origin];
  from = add ? from + size : from - size;
  if (from == 0) origin_bytes_.erase(s.origin);
  size_t& held = k.origins[s.origin];
  held = add ? held + 1 : held - 1;
  if (add && held == 1) ++origin_keys_[s.origin];  // its first entry in this key
  if (held == 0) {
    k.origins.erase(s.origin);
    if (--origin_keys_[s.origin] == 0) origin_keys_.erase(s.origin);
  }
}

size_t DhtStorage::drop_expired(KeyData& k, DhtTime now) {
  if (k.soonest > now) return 0;
  k.soonest = DhtTime::max();
  return std::erase_if(k.entries, [&](const auto& kv) {
    if (kv.second.v.expiration > now) {
      k.soonest = std::min(k.soonest, kv.second.v.expiration);
      return false;
    }
    count(k, kv.first, kv.second, false);
    return true;
  });
}

size_t DhtStorage::held_by(const KeyData& k, const std::string& origin) {
  auto it = k.origins.find(origin);
  return it == k.origins.end() ? 0 : it->second;
}

void DhtStorage::drop_expired_at_quota(KeyData& k, const std::string& origin, DhtTime now) {
  if (!origin.empty() && held_by(k, origin) >= opt_.max_subkeys_per_origin) drop_expired(k, now);
}

std::map<std::string, DhtStorage::Stored>::iterator DhtStorage::room_for(KeyData& k, const std::string& origin) {
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

std::optional<std::map<std::string, DhtStorage::Stored>::iterator> DhtStorage::place_for(KeyData& k,
                                                                                         const std::string& origin,
                                                                                         DhtTime now) {
  if (k.entries.size() >= opt_.max_subkeys) drop_expired(k, now);  // expired entries do not count
  if (k.entries.size() < opt_.max_subkeys) return k.entries.end();
  auto victim = room_for(k, origin);
  if (victim == k.entries.end()) return std::nullopt;
  return victim;
}

bool DhtStorage::quota_refuses(const KeyData* k, const std::string& subkey, const Stored* held, size_t size,
                               const std::string& origin) const {
  if (origin.empty()) return false;
  const bool own = held && held->origin == origin;  // the origin replaces its own entry
  const size_t freed = own ? subkey.size() + held->v.value.size() : 0;
  if (bytes_from(origin) - freed + size > opt_.max_bytes_per_origin) return true;
  if (own) return false;
  const size_t in_key = k ? held_by(*k, origin) : 0;
  if (in_key == 0) return keys_from(origin) >= opt_.max_keys_per_origin;  // a key new to it
  return in_key >= opt_.max_subkeys_per_origin;
}

DhtStorage::Precheck DhtStorage::precheck(const NodeId& key, const std::string& subkey, const std::string& value,
                                          const std::string& origin, DhtTime now) {
  auto key_it = data_.find(key);
  KeyData* k = key_it != data_.end() ? &key_it->second : nullptr;
  if (k) drop_expired_at_quota(*k, origin, now);
  const Stored* held = nullptr;
  if (k)
    if (auto it = k->entries.find(subkey); it != k->entries.end()) held = &it->second;
  if (held && held->v.expiration > now && held->v.value == value) return Precheck::held;
  if (quota_refuses(k, subkey, held, subkey.size() + value.size(), origin)) return Precheck::refused;
  return !held && k && !place_for(*k, origin, now) ? Precheck::refused : Precheck::check;
}

DhtStorage::Put DhtStorage::put(const NodeId& key, const std::string& subkey, std::string value, DhtTime expiration,
                                DhtTime now, const std::string& origin) {
  if (expiration <= now) return Put::expired;
  if (expiration - now > opt_.max_ttl) return Put::too_late;
  const size_t size = subkey.size() + value.size();
  auto key_it = data_.find(key);
  if (key_it == data_.end() || bytes_ + size > opt_.max_bytes) {
    if (data_.size() >= opt_.max_keys || bytes_ + size > opt_.max_bytes) purge(now);
    if (data_.size() >= opt_.max_keys && data_.find(key) == data_.end()) return Put::full;
    key_it = data_.find(key);
  }
  KeyData* existing = key_it != data_.end() ? &key_it->second : nullptr;
  if (existing) drop_expired_at_quota(*existing, origin, now);
  auto it = existing ? existing->entries.find(subkey) : decltype(existing->entries)::iterator{};
  const bool fresh = !existing || it == existing->entries.end();
  const size_t replaced = fresh ? 0 : it->first.size() + it->second.v.value.size();
  if (bytes_ - replaced + size > opt_.max_bytes) return Put::full;
  if (!fresh && it->second.v.expiration > expiration && it->second.v.expiration > now) return Put::superseded;
  if (quota_refuses(existing, subkey, fresh ? nullptr : &it->second, size, origin)) return Put::over_quota;
  KeyData& k = existing ? *existing : data_[key];
  if (fresh) {
    const auto place = place_for(k, origin, now);
    if (!place) {
      if (k.entries.empty()) data_.erase(key);
      return Put::full;
    }
    if (*place != k.entries.end()) {  // an entry gives way
      count(k, (*place)->first, (*place)->second, false);
      k.entries.erase(*place);
    }
    auto [placed, _] = k.entries.emplace(subkey, Stored{{std::move(value), expiration}, now, origin});
    count(k, placed->first, placed->second, true);
    return Put::stored;
  }
  count(k, it->first, it->second, false);
  it->second = Stored{{std::move(value), expiration}, now, origin};
  count(k, it->first, it->second, true);
  return Put::stored;
}

DhtEntries DhtStorage::get(const NodeId& key, DhtTime now) const {
  DhtEntries out;
  visit(key, now, [&](const std::string& subkey, const DhtValue& v) { out.emplace_hint(out.end(), subkey, v); });
  return out;
}

size_t DhtStorage::purge(DhtTime now) {
  size_t dropped = 0;
  for (auto it = data_.begin(); it != data_.end();) {
    dropped += drop_expired(it->second, now);
    it = it->second.entries.empty() ? data_.erase(it) : std::next(it);
  }
  return dropped;
}

size_t DhtStorage::entries() const {
  size_t n = 0;
  for (const auto& [key, k] : data_) n += k.entries.size();
  return n;
}

size_t DhtStorage::keys_from(const std::string& origin) const {
  auto it = origin_keys_.find(origin);
  return it == origin_keys_.end() ? 0 : it->second;
}

size_t DhtStorage::bytes_from(const std::string& origin) const {
  auto it = origin_bytes_.find(origin);
  return it == origin_bytes_.end() ? 0 : it->second;
}

void DhtStorage::for_each(
    DhtTime now, const std::function<void(const NodeId&, const std::string&, const DhtValue&, DhtTime)>& fn) const {
  for (const auto& [key, k] : data_)
    for (const auto& [subkey, s] : k.entries)
      if (s.v.expiration > now) fn(key, subkey, s.v, s.stored_at);
}

}  // namespace corolla
