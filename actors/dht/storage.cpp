#include "actors/dht/storage.hpp"

namespace corolla {

DhtStorage::Put DhtStorage::put(const NodeId& key, const std::string& subkey, std::string value, DhtTime expiration,
                                DhtTime now) {
  if (expiration <= now) return Put::expired;
  if (expiration - now > opt_.max_ttl) return Put::too_late;
  const size_t size = subkey.size() + value.size();
  auto key_it = data_.find(key);
  if (key_it == data_.end() || bytes_ + size > opt_.max_bytes) {
    if (data_.size() >= opt_.max_keys || bytes_ + size > opt_.max_bytes) purge(now);
    if (data_.size() >= opt_.max_keys && data_.find(key) == data_.end()) return Put::full;
    key_it = data_.find(key);
  }
  auto& dict = key_it != data_.end() ? key_it->second : data_[key];
  auto it = dict.find(subkey);
  const size_t replaced = it == dict.end() ? 0 : it->first.size() + it->second.v.value.size();
  if (bytes_ - replaced + size > opt_.max_bytes) {
    if (dict.empty()) data_.erase(key);
    return Put::full;
  }
  if (it == dict.end()) {
    // Expired entries do not count against the limit.
    if (dict.size() >= opt_.max_subkeys)
      std::erase_if(dict, [&](const auto& kv) {
        if (kv.second.v.expiration > now) return false;
        bytes_ -= kv.first.size() + kv.second.v.value.size();
        return true;
      });
    if (dict.size() >= opt_.max_subkeys) return Put::full;
    dict.emplace(subkey, Stored{{std::move(value), expiration}, now});
    bytes_ += size;
    return Put::stored;
  }
  if (it->second.v.expiration > expiration && it->second.v.expiration > now) return Put::superseded;
  bytes_ = bytes_ - replaced + size;
  it->second = Stored{{std::move(value), expiration}, now};
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
    dropped += std::erase_if(it->second, [&](const auto& kv) {
      if (kv.second.v.expiration > now) return false;
      bytes_ -= kv.first.size() + kv.second.v.value.size();
      return true;
    });
    it = it->second.empty() ? data_.erase(it) : std::next(it);
  }
  return dropped;
}

size_t DhtStorage::entries() const {
  size_t n = 0;
  for (const auto& [key, dict] : data_) n += dict.size();
  return n;
}

void DhtStorage::for_each(
    DhtTime now, const std::function<void(const NodeId&, const std::string&, const DhtValue&, DhtTime)>& fn) const {
  for (const auto& [key, dict] : data_)
    for (const auto& [subkey, s] : dict)
      if (s.v.expiration > now) fn(key, subkey, s.v, s.stored_at);
}

}  // namespace corolla
