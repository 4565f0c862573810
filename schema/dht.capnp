@0xca28fe14250850bd;
# Kademlia DHT RPCs between nodes (actors/dht/). Every request names its sender and every reply its responder,
# so both sides learn of each other. Ids are 20 bytes (a node's key, or the SHA-1 of a DHT key); anything else
# is refused with bad_request.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("corolla::wire");

struct DhtContact {
  id @0 :Data;        # 20 bytes
  address @1 :Text;   # HOST:PORT; empty for a client-mode node (it serves no requests: never added to tables)
}

# One subkey of a dictionary value. The expiration travels as the time left, in nanoseconds: nodes do not share
# a clock; the receiver adds it to its own clock's now.
struct DhtItem {
  subkey @0 :Text;
  value @1 :Data;     # opaque, at most 64 KiB
  ttlNanos @2 :Int64;
}

struct DhtPingRequest {
  sender @0 :DhtContact;
}
struct DhtPingReply {
  responder @0 :DhtContact;
}

struct DhtFindNodeRequest {
  sender @0 :DhtContact;
  target @1 :Data;
}
struct DhtFindNodeReply {
  responder @0 :DhtContact;
  contacts @1 :List(DhtContact);   # the responder's k closest contacts to the target
}

struct DhtFindValueRequest {
  sender @0 :DhtContact;
  key @1 :Data;
}
struct DhtFindValueReply {
  responder @0 :DhtContact;
  items @1 :List(DhtItem);         # the live subkeys the responder holds for the key (may be empty)
  contacts @2 :List(DhtContact);   # and its k closest contacts to the key, so the lookup goes on
}

struct DhtStoreRequest {
  sender @0 :DhtContact;
  key @1 :Data;
  items @2 :List(DhtItem);
}
struct DhtStoreReply {
  responder @0 :DhtContact;
  stored @1 :List(Bool);           # per item: false when a later-expiring entry is kept, or it had expired
}

# A record as its owner signed it: what every DHT value is. The owner's Ed25519 key signs the key's id, the
# subkey, the payload and the expiry (actors/dht/signed_record.hpp). The subkey names the owner (its public key),
# so the record need not carry it, and a record under someone else's subkey cannot be signed; the expiry is Unix
# time, so the signature bounds how long any copy of the record (a replay included) is believed.
struct SignedRecord {
  payload @0 :Data;
  expiresUnixMs @1 :Int64;
  signature @2 :Data;    # 64 bytes
}
