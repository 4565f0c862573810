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

message_weight weigh(const caf::type_erased_tuple& x) {
  if (x.size() == 0) return {};
  if (auto m = as<step_request>(x))
    return {kFraming + static_cast<uint64_t>(m->hidden.nbytes()) + 4 * m->positions.size() + 32 * m->next.size(),
            "step"};
  if (auto m = as<step_reply>(x)) return {kFraming + static_cast<uint64_t>(m->hidden.nbytes()), "step"};
  if (auto m = as<dht_ping_request>(x)) return {kFraming + contact_bytes(m->sender), "dht"};
  if (auto m = as<dht_ping_reply>(x)) return {kFraming + contact_bytes(m->responder), "dht"};
  if (auto m = as<dht_find_node_request>(x)) return {kFraming + contact_bytes(m->sender) + m->target.size(), "dht"};
  if (auto m = as<dht_find_node_reply>(x)) return {kFraming + contact_bytes(m->responder) + contacts_bytes(m->contacts), "dht"};
  if (auto m = as<dht_find_value_request>(x)) return {kFraming + contact_bytes(m->sender) + m->key.size(), "dht"};
  if (auto m = as<dht_find_value_reply>(x))
    return {kFraming + contact_bytes(m->responder) + items_bytes(m->items) + contacts_bytes(m->contacts), "dht"};
  if (auto m = as<dht_store_request>(x))
    return {kFraming + contact_bytes(m->sender) + m->key.size() + items_bytes(m->items), "dht"};
  if (auto m = as<dht_store_reply>(x)) return {kFraming + contact_bytes(m->responder) + m->stored.size(), "dht"};
  if (as<open_session>(x) || as<session_opened>(x) || as<close_session>(x)) return {kFraming, "session"};
  if (as<info_request>(x)) return {kFraming, "info"};
  if (as<server_info>(x)) return {kFraming + 256, "info"};
  if (auto m = as<bandwidth_probe>(x)) return {kFraming + m->payload.size(), "info"};
  return {};
}

}  // namespace corolla::sim
