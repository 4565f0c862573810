// BASP frames as CAF itself writes them (its serializers, its header type), for tests that speak to a node's peer
// port as a hostile peer would, and for the filter's unit tests and fuzz seeds.
#pragma once

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/io/basp/header.hpp>
#include <caf/io/basp/message_type.hpp>
#include <caf/io/basp/version.hpp>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace corolla::test {

using bytes = std::vector<char>;
namespace basp = caf::io::basp;

// A node id no process has: a fixed host hash and the given process id.
inline caf::node_id fake_node(uint32_t pid) {
  std::array<uint8_t, 20> host{};
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(0xa0 + i);
  return caf::make_node_id(pid, host);
}

template <class... Ts>
bytes serialized(caf::actor_system& sys, Ts&&... xs) {
  bytes out;
  caf::binary_serializer sink{sys, out};
  if (auto err = sink(std::forward<Ts>(xs)...)) throw std::runtime_error("cannot serialize: " + sys.render(err));
  return out;
}

// A header followed by its payload; payload_len is the payload's size unless `announced` says otherwise.
inline bytes frame(caf::actor_system& sys, basp::message_type op, const bytes& payload, uint64_t op_data = 0,
                   uint64_t source_actor = 0, uint64_t dest_actor = 0, uint8_t flags = 0, int64_t announced = -1) {
  basp::header hdr{
      op,      flags,        static_cast<uint32_t>(announced >= 0 ? announced : static_cast<int64_t>(payload.size())),
      op_data, source_actor, dest_actor};
  bytes out = serialized(sys, hdr);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

inline bytes client_handshake(caf::actor_system& sys, const caf::node_id& me, uint8_t flags = 0) {
  return frame(sys, basp::message_type::client_handshake, serialized(sys, me), 0, 0, 0, flags);
}

inline bytes server_handshake(caf::actor_system& sys, const caf::node_id& me, uint64_t actor) {
  std::vector<std::string> app_ids{"generic-caf-app"};
  std::set<std::string> sigs;
  return frame(sys, basp::message_type::server_handshake, serialized(sys, me, app_ids, actor, sigs), basp::version);
}

// A direct message to actor `dest` carrying `msg` (any message: the peer protocol's or not).
inline bytes direct_message(caf::actor_system& sys, uint64_t dest, const caf::message& msg, uint64_t mid = 0,
                            uint64_t source_actor = 0) {
  std::vector<caf::strong_actor_ptr> stages;
  return frame(sys, basp::message_type::direct_message, serialized(sys, stages, msg), mid, source_actor, dest);
}

inline bytes routed_message(caf::actor_system& sys, const caf::node_id& from, const caf::node_id& to, uint64_t dest,
                            const caf::message& msg) {
  std::vector<caf::strong_actor_ptr> stages;
  return frame(sys, basp::message_type::routed_message, serialized(sys, from, to, stages, msg), 0, 0, dest);
}

inline bytes down_message(caf::actor_system& sys, const caf::node_id& from, const caf::node_id& to,
                          uint64_t source_actor) {
  caf::error reason = caf::make_error(caf::exit_reason::kill);
  return frame(sys, basp::message_type::down_message, serialized(sys, from, to, reason), 0, source_actor, 0);
}

// What a server handshake says: the node and the published actor.
struct server_greeting {
  caf::node_id node;
  uint64_t actor = 0;
};

inline server_greeting read_server_handshake(caf::actor_system& sys, const bytes& header, const bytes& payload) {
  basp::header hdr;
  caf::binary_deserializer hs{sys, header};
  if (hs(hdr) || hdr.operation != basp::message_type::server_handshake)
    throw std::runtime_error("not a server handshake");
  server_greeting g;
  std::vector<std::string> app_ids;
  std::set<std::string> sigs;
  caf::binary_deserializer ps{sys, payload};
  if (ps(g.node, app_ids, g.actor, sigs)) throw std::runtime_error("malformed server handshake");
  return g;
}

}  // namespace corolla::test
