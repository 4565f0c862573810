// What a message would weigh on the wire and what kind of traffic it is (dht, step, session, info, other), for
// the simulated network's delays and counts. The size is the payload of the fields that grow (tensors, DHT
// values, contacts, positions) plus 64 bytes of framing; small control messages count 64 bytes.
#pragma once

#include <caf/type_erased_tuple.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace corolla {
struct dht_item;
}

namespace corolla::sim {

// The kinds of traffic, counted apart (an index into the network's counters: no string per message).
enum class traffic_kind : uint8_t { dht, step, session, info, other };
inline constexpr size_t kTrafficKinds = 5;
const char* kind_name(traffic_kind k);

struct message_weight {
  uint64_t bytes = 64;
  traffic_kind kind = traffic_kind::other;
  // The signed DHT records whose signatures the receiver checks (a store request's, a find_value reply's), inside
  // the message weighed.
  const std::vector<dht_item>* records = nullptr;
};

message_weight weigh(const caf::type_erased_tuple& content);

}  // namespace corolla::sim
