#include "sim/message_size.hpp"

#include "actors/dht/dht_messages.hpp"
#include "actors/protocol/messages.hpp"

namespace corolla::sim {
namespace {

constexpr uint64_t kFraming = 64;

uint64_t contact_bytes(const dht_contact& c) { return c.id.size() + c.address.size() + 4; }
uint64_t contacts_bytes(const std::vector<dht_contact>& cs) {
  uint64_t n = 0;
  for (const auto& c : cs) n += contact_bytes(c);
  return n;
}
uint64_t items_bytes(const std::vector<dht_item>& items) {
  uint64_t n = 0;
  for (const auto& i : items) n += i.subkey.size() + i.value.size() + 12;
  return n;
}

template <class T>
const T* as(const caf::type_erased_tuple& x) {
  return x.match_element<T>(0) ? &x.get_as<T>(0) : nullptr;
}

}  // namespace

const char* kind_name(traffic_kind k) {
  switch (k) {
    case traffic_kind::dht: return "dht";
    case traffic_kind::step: return "step";
    case traffic_kind::session: return "session";
    case traffic_kind::info: return "info";
    case traffic_kind::other: break;
  }
  return "other";
}

message_weight weigh(const caf::type_erased_tuple& x) {
  if (x.size() == 0) return {};
  if (auto m = as<step_request>(x))
    return {kFraming + static_cast<uint64_t>(m->hidden.nbytes()) + 4 * m->positions.size() + 32 * m->next.size(),
            traffic_kind::step};
  if (auto m = as<step_reply>(x)) return {kFraming + static_cast<uint64_t>(m->hidden.nbytes()), traffic_kind::step};
  if (auto m = as<dht_ping_request>(x)) return {kFraming + contact_bytes(m->sender), traffic_kind::dht};
  if (auto m = as<dht_ping_reply>(x)) return {kFraming + contact_bytes(m->responder), traffic_kind::dht};
  if (auto m = as<dht_find_node_request>(x))
    return {kFraming + contact_bytes(m->sender) + m->target.size(), traffic_kind::dht};
  if (auto m = as<dht_find_node_reply>(x))
    return {kFraming + contact_bytes(m->responder) + contacts_bytes(m->contacts), traffic_kind::dht};
  if (auto m = as<dht_find_value_request>(x))
    return {kFraming + contact_bytes(m->sender) + m->key.size(), traffic_kind::dht};
  if (auto m = as<dht_find_value_reply>(x))
    return {kFraming + contact_bytes(m->responder) + items_bytes(m->items) + contacts_bytes(m->contacts),
            traffic_kind::dht, &m->items};
  if (auto m = as<dht_store_request>(x))
    return {kFraming + contact_bytes(m->sender) + m->key.size() + items_bytes(m->items), traffic_kind::dht, &m->items};
  if (auto m = as<dht_store_reply>(x))
    return {kFraming + contact_bytes(m->responder) + m->stored.size(), traffic_kind::dht};
  if (as<open_session>(x) || as<session_opened>(x) || as<close_session>(x)) return {kFraming, traffic_kind::session};
  if (as<info_request>(x)) return {kFraming, traffic_kind::info};
  if (as<server_info>(x)) return {kFraming + 256, traffic_kind::info};
  if (auto m = as<bandwidth_probe>(x)) return {kFraming + m->payload.size(), traffic_kind::info};
  return {};
}

}  // namespace corolla::sim
