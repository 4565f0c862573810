// Reading a swarm's servers from the DHT: every key of its blocks (announcer.hpp), one server per key and address
// (a record naming someone else's address stands beside that server's own; the client's identity check at
// connect tells them apart).
// A server is listed under each group of blocks it serves, and after moving also (as "offline") under its old
// groups until those entries expire: the entry announced last stands for it (keep_standing, announcer.hpp).
// Servers whose standing entry is "offline" are left out.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/dht/announcer.hpp"
#include "actors/dht/dht_api.hpp"
#include "actors/protocol/messages.hpp"

namespace corolla {

// What the reads of a swarm's keys found so far: by owner, then address, the entry that stands for each server.
class SwarmReading {
 public:
  SwarmReading(int64_t keys, std::function<void(std::vector<server_info>)> done)
      : pending_(keys), done_(std::move(done)) {}
  // One key's reply (none: it failed to read); the last one calls done with the servers that are not offline.
  void add(const std::string& key, const DhtEntries* entries, DhtTime now);

 private:
  std::map<std::string, std::map<std::string, announced_server>> found_;
  int64_t pending_;
  std::function<void(std::vector<server_info>)> done_;
};

// Asks `dht` from `self` (any event-based actor, typed or not); calls done with the servers found, in address
// order. Keys that fail to read are skipped (a DHT that answers nothing gives an empty swarm).
template <class Self>
void read_swarm(Self* self, const dht_node_actor& dht, const std::string& model_prefix, int64_t total_blocks,
                caf::timespan timeout, std::function<void(std::vector<server_info>)> done) {
  const int64_t keys = group_count(total_blocks);
  if (keys == 0) return done({});
  auto reading = std::make_shared<SwarmReading>(keys, std::move(done));
  for (int64_t g = 0; g < keys; ++g) {
    const std::string key = group_key(model_prefix, g);
    self->request(dht, timeout, dht_get{key})
        .then([=](dht_get_reply& r) { reading->add(key, &r.entries, self->clock().now()); },
              [=](caf::error&) { reading->add(key, nullptr, self->clock().now()); });
  }
}

}  // namespace corolla
