// The network part of a server's throughput: the bandwidth to a peer of the swarm, measured at start with
// bandwidth_probe messages (Petals runs an internet speed test instead, which a swarm on a LAN, or without
// internet access, cannot use), expressed as tokens/s of f32 hidden states.
//
// For each peer in turn until one answers: the best of three round trips with a 64 KiB payload and with a 2 MiB
// one; the bandwidth is the extra bytes over the extra time, so the round trip itself cancels out. A peer that is a
// bare DHT node answers bad_request once it has read the payload, which times the transfer just as well.
// `timeout` bounds the whole measurement; when it runs out the estimate is unknown (0).
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <string>
#include <vector>

namespace corolla {

struct network_estimate {
  double bytes_per_second = 0;  // 0: no peer answered (or the transfer was too fast to time)
  double network_rps = 0;       // bytes_per_second / (hidden_size · 4)
  std::string peer;             // the peer measured against
};

network_estimate measure_network(caf::actor_system& sys, const caf::actor& connector,
                                 const std::vector<std::string>& peers, int64_t hidden_size,
                                 caf::timespan timeout = std::chrono::seconds(5));

}  // namespace corolla
