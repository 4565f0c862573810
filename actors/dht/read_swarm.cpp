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
  auto found = std::make_shared<std::map<std::string, announced_server>>();
  auto pending = std::make_shared<int64_t>(keys);
  auto one_done = [=] {
    if (--*pending > 0) return;
    std::vector<server_info> out;
    for (auto& [address, s] : *found)
      if (s.info.state != "offline") out.push_back(std::move(s.info));
    done(std::move(out));
  };
  for (int64_t g = 0; g < keys; ++g) {
    const std::string key = group_key(model_prefix, g);
    self->request(dht, timeout, dht_get{key})
        .then(
            [=](dht_get_reply& r) {
              for (auto& s : parse_servers(key, r.entries, self->clock().now())) keep_standing(*found, std::move(s));
              one_done();
            },
            [=](caf::error&) { one_done(); });
  }
}

}  // namespace corolla
