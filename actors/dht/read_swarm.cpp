#include "actors/dht/read_swarm.hpp"

#include <caf/all.hpp>
#include <map>
#include <memory>

#include "actors/dht/announcer.hpp"

namespace corolla {

void read_swarm(caf::event_based_actor* self, const caf::actor& dht, const std::string& model_prefix,
                int64_t total_blocks, caf::timespan timeout, std::function<void(std::vector<server_info>)> done) {
  const int64_t keys = group_count(total_blocks);
  if (keys == 0) return done({});
  auto found = std::make_shared<std::map<std::string, std::map<std::string, announced_server>>>();  // by owner, address
  auto pending = std::make_shared<int64_t>(keys);
  auto one_done = [=] {
    if (--*pending > 0) return;
    std::vector<server_info> out;
    for (auto& [owner, servers] : *found)
      for (auto& [address, s] : servers)
        if (s.info.state != "offline") out.push_back(std::move(s.info));
    done(std::move(out));
  };
  for (int64_t g = 0; g < keys; ++g) {
    const std::string key = group_key(model_prefix, g);
    self->request(dht, timeout, dht_get{key})
        .then(
            [=](dht_get_reply& r) {
              // One entry per key and address: a stranger's record naming a server's address must not hide
              // the server's own (the stranger's fails the identity proof when a client connects).
              for (auto& s : parse_servers(key, r.entries, self->clock().now())) {
                auto& of_owner = (*found)[s.info.owner];
                keep_standing(of_owner, std::move(s));
              }
              one_done();
            },
            [=](caf::error&) { one_done(); });
  }
}

}  // namespace corolla
