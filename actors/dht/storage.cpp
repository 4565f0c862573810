#include "actors/dht/storage.hpp"

#include <algorithm>

namespace corolla {

void DhtStorage::count(const std::string& subkey, const Stored& s, bool add) {
  const size_t size = subkey.size() + s.v.value.size();
  if (add)
    bytes_ += size;
  else
    bytes_ -= size;
  if (s.origin.empty()) return;
  size_t& from = origin_bytes_[s.origin];
  from = add ? from + size : from - size;
  if (from == 0) origin_bytes_.erase(s.origin);
}

size_t DhtStorage::drop_expired(Dict& dict, DhtTime now) {
  return std::erase_if(dict, [&](const auto& kv) {
    if (kv.second.v.expiration > now) return false;
    count(kv.first, kv.second, false);
    return true;
  });
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
  Dict* existing = key_it != data_.end() ? &key_it->second : nullptr;
  auto it = existing ? existing->find(subkey) : Dict::iterator{};
  const bool fresh = !existing || it == existing->end();
  const size_t replaced = fresh ? 0 : it->first.size() + it->second.v.value.size();
  if (bytes_ - replaced + size > opt_.max_bytes) return Put::full;
  if (!fresh && it->second.v.expiration > expiration && it->second.v.expiration > now) return Put::superseded;
  if (!origin.empty()) {
    auto from = origin_bytes_.find(origin);
    const size_t held = from == origin_bytes_.end() ? 0 : from->second;
    const size_t freed = !fresh && it->second.origin == origin ? replaced : 0;
    if (held - freed + size > opt_.max_bytes_per_origin) return Put::over_quota;
    if (existing && (fresh || it->second.origin != origin)) {
      size_t live = 0;  // the origin's live subkeys of this key
      for (const auto& [k, st] : *existing)
        if (st.origin == origin && st.v.expiration > now) ++live;
      if (live >= opt_.max_subkeys_per_origin) return Put::over_quota;
    }
  }
  Dict& dict = existing ? *existing : data_[key];
  if (fresh) {
    // Expired entries do not count against the limit.
    if (dict.size() >= opt_.max_subkeys) drop_expired(dict, now);
    if (dict.size() >= opt_.max_subkeys) {
      if (dict.empty()) data_.erase(key);
      return Put::full;
    }
    auto [placed, _] = dict.emplace(subkey, Stored{{std::move(value), expiration}, now, origin});
    count(placed->first, placed->second, true);
    return Put::stored;
  }
  count(it->first, it->second, false);
  it->second = Stored{{std::move(value), expiration}, now, origin};
  count(it->first, it->second, true);
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
    it = it->second.empty() ? data_.erase(it) : std::next(it);
  }
  return dropped;
}

size_t DhtStorage::entries() const {
  size_t n = 0;
  for (const auto& [key, dict] : data_) n += dict.size();
  return n;
}

size_t DhtStorage::bytes_from(const std::string& origin) const {
  auto it = origin_bytes_.find(origin);
  return it == origin_bytes_.end() ? 0 : it->second;
}

void DhtStorage::for_each(
    DhtTime now, const std::function<void(const NodeId&, const std::string&, const DhtValue&, DhtTime)>& fn) const {
  for (const auto& [key, dict] : data_)
    for (const auto& [subkey, s] : dict)
      if (s.v.expiration > now) fn(key, subkey, s.v, s.stored_at);
}

}  // namespace corolla
