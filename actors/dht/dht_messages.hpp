// DHT RPCs between nodes (schema/dht.capnp). In one process they travel as these C++ values; across processes
// each is written as its Cap'n Proto struct. Ids are carried as bytes and checked by the receiver (a 19-byte id
// is a bad_request, not a crash); a malformed message arrives with `wire_error` set and gets bad_request.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/typed_actor.hpp>

#include "actors/protocol/wire_message.hpp"

namespace corolla {

// Limits every node enforces (bad_request beyond them).
inline constexpr size_t kMaxDhtValueBytes = 64 * 1024;
inline constexpr size_t kMaxDhtSubkeyBytes = 1024;
inline constexpr size_t kMaxDhtItemsPerStore = 256;
// A record lives at most this long past its store (or read), and no longer than the expiry its owner signed
// (signed_record.hpp: nobody writes under another's subkey): a record its owner no longer renews (a server gone
// without saying) is outlived within the hour. Servers announce every update_period (at most half of this).
inline constexpr int64_t kMaxDhtTtlNs = int64_t{3600} * 1000000000;

struct dht_contact {
  std::string id;       // 20 bytes
  std::string address;  // empty: a client-mode node
  bool operator==(const dht_contact&) const = default;
};

struct dht_item {
  std::string subkey;
  std::string value;
  int64_t ttl_ns = 0;  // time left until expiration
  bool operator==(const dht_item&) const = default;
};

struct dht_ping_request {
  dht_contact sender;
  std::string wire_error;
};
struct dht_ping_reply {
  dht_contact responder;
  std::string wire_error;
};

struct dht_find_node_request {
  dht_contact sender;
  std::string target;
  std::string wire_error;
};
struct dht_find_node_reply {
  dht_contact responder;
  std::vector<dht_contact> contacts;
  std::string wire_error;
};

struct dht_find_value_request {
  dht_contact sender;
  std::string key;
  std::string wire_error;
};
struct dht_find_value_reply {
  dht_contact responder;
  std::vector<dht_item> items;
  std::vector<dht_contact> contacts;
  std::string wire_error;
};

struct dht_store_request {
  dht_contact sender;
  std::string key;
  std::vector<dht_item> items;
  std::string wire_error;
};
struct dht_store_reply {
  dht_contact responder;
  std::vector<bool> stored;
  std::string wire_error;
};

COROLLA_WIRE_MESSAGE(dht_ping_request)
COROLLA_WIRE_MESSAGE(dht_ping_reply)
COROLLA_WIRE_MESSAGE(dht_find_node_request)
COROLLA_WIRE_MESSAGE(dht_find_node_reply)
COROLLA_WIRE_MESSAGE(dht_find_value_request)
COROLLA_WIRE_MESSAGE(dht_find_value_reply)
COROLLA_WIRE_MESSAGE(dht_store_request)
COROLLA_WIRE_MESSAGE(dht_store_reply)

// The RPCs a DHT node answers for other nodes (a server's gate answers them too, handing them to its DHT node).
using dht_rpc_actor = caf::typed_actor<caf::replies_to<dht_ping_request>::with<dht_ping_reply>,
                                       caf::replies_to<dht_find_node_request>::with<dht_find_node_reply>,
                                       caf::replies_to<dht_find_value_request>::with<dht_find_value_reply>,
                                       caf::replies_to<dht_store_request>::with<dht_store_reply>>;

}  // namespace corolla
