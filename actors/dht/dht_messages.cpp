#include "actors/dht/dht_messages.hpp"

#include "actors/protocol/wire_codec.hpp"
#include "schema/dht.capnp.h"

namespace corolla {
namespace {

using wire_codec::fill_root;
using wire_codec::parse;

std::string get_data(capnp::Data::Reader d) { return std::string(reinterpret_cast<const char*>(d.begin()), d.size()); }
kj::ArrayPtr<const kj::byte> as_data(const std::string& s) {
  return kj::arrayPtr(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}

void put_contact(wire::DhtContact::Builder b, const dht_contact& c) {
  b.setId(as_data(c.id));
  b.setAddress(c.address);
}
dht_contact get_contact(wire::DhtContact::Reader r) { return {get_data(r.getId()), r.getAddress()}; }

void put_contacts(capnp::List<wire::DhtContact>::Builder b, const std::vector<dht_contact>& cs) {
  for (unsigned i = 0; i < cs.size(); ++i) put_contact(b[i], cs[i]);
}
std::vector<dht_contact> get_contacts(capnp::List<wire::DhtContact>::Reader r) {
  std::vector<dht_contact> out;
  out.reserve(r.size());
  for (auto c : r) out.push_back(get_contact(c));
  return out;
}

void put_items(capnp::List<wire::DhtItem>::Builder b, const std::vector<dht_item>& items) {
  for (unsigned i = 0; i < items.size(); ++i) {
    b[i].setSubkey(items[i].subkey);
    b[i].setValue(as_data(items[i].value));
    b[i].setTtlNanos(items[i].ttl_ns);
  }
}
std::vector<dht_item> get_items(capnp::List<wire::DhtItem>::Reader r) {
  std::vector<dht_item> out;
  out.reserve(r.size());
  for (auto i : r) out.push_back({i.getSubkey(), get_data(i.getValue()), i.getTtlNanos()});
  return out;
}

}  // namespace

void fill(const dht_ping_request& x, capnp::MessageBuilder& mb) {
  fill_root<wire::DhtPingRequest>(
      mb, [&](wire::DhtPingRequest::Builder b, auto) { put_contact(b.initSender(), x.sender); });
}
void decode(std::shared_ptr<std::vector<char>> bytes, dht_ping_request& x) {
  parse<wire::DhtPingRequest>(std::move(bytes), x.wire_error,
                              [&](wire::DhtPingRequest::Reader r, auto&) { x.sender = get_contact(r.getSender()); });
}

void fill(const dht_ping_reply& x, capnp::MessageBuilder& mb) {
  fill_root<wire::DhtPingReply>(
      mb, [&](wire::DhtPingReply::Builder b, auto) { put_contact(b.initResponder(), x.responder); });
}
void decode(std::shared_ptr<std::vector<char>> bytes, dht_ping_reply& x) {
  parse<wire::DhtPingReply>(std::move(bytes), x.wire_error,
                            [&](wire::DhtPingReply::Reader r, auto&) { x.responder = get_contact(r.getResponder()); });
}

void fill(const dht_find_node_request& x, capnp::MessageBuilder& mb) {
  fill_root<wire::DhtFindNodeRequest>(mb, [&](wire::DhtFindNodeRequest::Builder b, auto) {
    put_contact(b.initSender(), x.sender);
    b.setTarget(as_data(x.target));
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, dht_find_node_request& x) {
  parse<wire::DhtFindNodeRequest>(std::move(bytes), x.wire_error, [&](wire::DhtFindNodeRequest::Reader r, auto&) {
    x.sender = get_contact(r.getSender());
    x.target = get_data(r.getTarget());
  });
}

void fill(const dht_find_node_reply& x, capnp::MessageBuilder& mb) {
  fill_root<wire::DhtFindNodeReply>(mb, [&](wire::DhtFindNodeReply::Builder b, auto) {
    put_contact(b.initResponder(), x.responder);
    put_contacts(b.initContacts(static_cast<unsigned>(x.contacts.size())), x.contacts);
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, dht_find_node_reply& x) {
  parse<wire::DhtFindNodeReply>(std::move(bytes), x.wire_error, [&](wire::DhtFindNodeReply::Reader r, auto&) {
    x.responder = get_contact(r.getResponder());
    x.contacts = get_contacts(r.getContacts());
  });
}

void fill(const dht_find_value_request& x, capnp::MessageBuilder& mb) {
  fill_root<wire::DhtFindValueRequest>(mb, [&](wire::DhtFindValueRequest::Builder b, auto) {
    put_contact(b.initSender(), x.sender);
    b.setKey(as_data(x.key));
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, dht_find_value_request& x) {
  parse<wire::DhtFindValueRequest>(std::move(bytes), x.wire_error, [&](wire::DhtFindValueRequest::Reader r, auto&) {
    x.sender = get_contact(r.getSender());
    x.key = get_data(r.getKey());
  });
}

void fill(const dht_find_value_reply& x, capnp::MessageBuilder& mb) {
  fill_root<wire::DhtFindValueReply>(mb, [&](wire::DhtFindValueReply::Builder b, auto) {
    put_contact(b.initResponder(), x.responder);
    put_items(b.initItems(static_cast<unsigned>(x.items.size())), x.items);
    put_contacts(b.initContacts(static_cast<unsigned>(x.contacts.size())), x.contacts);
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, dht_find_value_reply& x) {
  parse<wire::DhtFindValueReply>(std::move(bytes), x.wire_error, [&](wire::DhtFindValueReply::Reader r, auto&) {
    x.responder = get_contact(r.getResponder());
    x.items = get_items(r.getItems());
    x.contacts = get_contacts(r.getContacts());
  });
}

void fill(const dht_store_request& x, capnp::MessageBuilder& mb) {
  fill_root<wire::DhtStoreRequest>(mb, [&](wire::DhtStoreRequest::Builder b, auto) {
    put_contact(b.initSender(), x.sender);
    b.setKey(as_data(x.key));
    put_items(b.initItems(static_cast<unsigned>(x.items.size())), x.items);
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, dht_store_request& x) {
  parse<wire::DhtStoreRequest>(std::move(bytes), x.wire_error, [&](wire::DhtStoreRequest::Reader r, auto&) {
    x.sender = get_contact(r.getSender());
    x.key = get_data(r.getKey());
    x.items = get_items(r.getItems());
  });
}

void fill(const dht_store_reply& x, capnp::MessageBuilder& mb) {
  fill_root<wire::DhtStoreReply>(mb, [&](wire::DhtStoreReply::Builder b, auto) {
    put_contact(b.initResponder(), x.responder);
    auto stored = b.initStored(static_cast<unsigned>(x.stored.size()));
    for (unsigned i = 0; i < x.stored.size(); ++i) stored.set(i, x.stored[i]);
  });
}
void decode(std::shared_ptr<std::vector<char>> bytes, dht_store_reply& x) {
  parse<wire::DhtStoreReply>(std::move(bytes), x.wire_error, [&](wire::DhtStoreReply::Reader r, auto&) {
    x.responder = get_contact(r.getResponder());
    for (bool s : r.getStored()) x.stored.push_back(s);
  });
}

COROLLA_WIRE_CODEC(dht_ping_request)
COROLLA_WIRE_CODEC(dht_ping_reply)
COROLLA_WIRE_CODEC(dht_find_node_request)
COROLLA_WIRE_CODEC(dht_find_node_reply)
COROLLA_WIRE_CODEC(dht_find_value_request)
COROLLA_WIRE_CODEC(dht_find_value_reply)
COROLLA_WIRE_CODEC(dht_store_request)
COROLLA_WIRE_CODEC(dht_store_reply)

}  // namespace corolla
