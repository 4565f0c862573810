#include "actors/dht/read_swarm.hpp"

namespace corolla {

void SwarmReading::add(const std::string& key, const DhtEntries* entries, DhtTime now) {
  // One entry per key and address: a stranger's record naming a server's address must not hide the server's own
  // (the stranger's fails the identity proof when a client connects).
  if (entries)
    for (auto& s : parse_servers(key, *entries, now)) {
      auto& of_owner = found_[s.info.owner];  // before s is moved from
      keep_standing(of_owner, std::move(s));
    }
  if (--pending_ > 0) return;
  std::vector<server_info> out;
  for (auto& [owner, servers] : found_)
    for (auto& [address, s] : servers)
      if (s.info.state != "offline") out.push_back(std::move(s.info));
  done_(std::move(out));
}

}  // namespace corolla
