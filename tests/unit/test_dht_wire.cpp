// DHT wire messages (schema/dht.capnp): each survives encode/decode and a trip through CAF's serializer; a
// malformed one arrives with wire_error set; ids keep their length (the receiving node checks it). And the
// records a server announces (actors/dht/announcer.hpp) parse back.
#define BOOST_TEST_MODULE dht_wire
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>
#include <limits>

#include <caf/all.hpp>
#include <chrono>
#include <map>

#include "actors/dht/announcer.hpp"
#include "actors/dht/dht_messages.hpp"
#include "actors/dht/node_id.hpp"
#include "actors/dht/signed_record.hpp"
#include "actors/dht/storage.hpp"
#include "actors/protocol/unix_clock.hpp"
#include "actors/system/system_config.hpp"

using namespace corolla;
using namespace std::chrono_literals;

namespace {

template <class T>
T round_trip(const T& x) {
  auto bytes = encode(x);
  T out;
  decode(std::make_shared<std::vector<char>>(std::move(bytes)), out);
  return out;
}

// Through CAF's binary serializer, as a message crossing processes is.
template <class T>
T through_caf(caf::actor_system& sys, const T& x) {
  std::vector<char> buf;
  caf::binary_serializer sink(sys, buf);
  T copy = x;
  BOOST_REQUIRE(!sink(copy));
  T out;
  caf::binary_deserializer source(sys, buf);
  BOOST_REQUIRE(!source(out));
  return out;
}

const dht_contact alice{id_bytes(key_id("alice")), "127.0.0.1:4001"};
const dht_contact bob{id_bytes(key_id("bob")), "10.0.0.2:4002"};
const dht_contact client{id_bytes(key_id("client")), ""};
const std::vector<dht_item> items{{"server-a", std::string("\0\1\2bytes", 8), 30'000'000'000},
                                  {"server-b", std::string(64 * 1024, 'x'), 1}};

struct caf_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf_fixture() {
    add_corolla_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(requests_round_trip) {
  caf_fixture f;
  auto ping = round_trip(dht_ping_request{client, {}});
  BOOST_TEST(ping.wire_error.empty());
  BOOST_TEST((ping.sender == client));
  auto find = round_trip(dht_find_node_request{alice, id_bytes(key_id("target")), {}});
  BOOST_TEST((find.sender == alice));
  BOOST_TEST(find.target == id_bytes(key_id("target")));
  auto value = through_caf(*f.sys, dht_find_value_request{bob, id_bytes(key_id("llama.3")), {}});
  BOOST_TEST(value.wire_error.empty());
  BOOST_TEST((value.sender == bob));
  BOOST_TEST(value.key == id_bytes(key_id("llama.3")));
  auto store = through_caf(*f.sys, dht_store_request{alice, id_bytes(key_id("llama.3")), items, {}});
  BOOST_TEST(store.wire_error.empty());
  BOOST_TEST((store.items == items));
  // Ids of the wrong length travel as they are: the receiver refuses them.
  auto short_id = round_trip(dht_find_node_request{dht_contact{std::string(19, 'x'), "a:1"}, std::string(21, 'y'), {}});
  BOOST_TEST(short_id.wire_error.empty());
  BOOST_TEST(short_id.sender.id.size() == 19u);
  BOOST_TEST(short_id.target.size() == 21u);
}

BOOST_AUTO_TEST_CASE(replies_round_trip) {
  caf_fixture f;
  auto pong = round_trip(dht_ping_reply{alice, {}});
  BOOST_TEST((pong.responder == alice));
  auto nodes = through_caf(*f.sys, dht_find_node_reply{alice, {bob, client}, {}});
  BOOST_TEST((nodes.responder == alice));
  BOOST_TEST((nodes.contacts == std::vector<dht_contact>{bob, client}));
  auto found = round_trip(dht_find_value_reply{bob, items, {alice}, {}});
  BOOST_TEST((found.items == items));
  BOOST_TEST((found.contacts == std::vector<dht_contact>{alice}));
  auto stored = through_caf(*f.sys, dht_store_reply{bob, {true, false, true}, {}});
  BOOST_TEST((stored.stored == std::vector<bool>{true, false, true}));
}

BOOST_AUTO_TEST_CASE(malformed_bytes_set_wire_error) {
  dht_store_request x;
  decode(std::make_shared<std::vector<char>>(std::vector<char>(24, '\x7f')), x);
  BOOST_TEST(x.wire_error.find("malformed message") == 0u, x.wire_error);
  dht_ping_request y;
  decode(std::make_shared<std::vector<char>>(std::vector<char>(5, 0)), y);
  BOOST_TEST(y.wire_error.find("not whole 8-byte words") != std::string::npos, y.wire_error);
  // Another message's bytes read as a ping: fields missing are empty, nothing throws.
  dht_ping_request z;
  decode(std::make_shared<std::vector<char>>(encode(dht_store_reply{alice, {true}, {}})), z);
  BOOST_TEST(z.wire_error.empty());
}

BOOST_AUTO_TEST_CASE(server_records_round_trip) {
  const SigningKey alice = SigningKey::generate(), bob = SigningKey::generate();
  const DhtTime now = DhtTime{} + 10h, exp = now + 30min;
  server_info info;
  info.version = "0.1.0";
  info.model = "llama";
  info.public_name = "alice's GPU";
  info.address = "127.0.0.1:31337";
  info.first_block = 10;
  info.last_block = 13;
  info.total_blocks = 96;
  info.dtype = "bf16";
  info.device = "cuda";
  info.kv_dtype = "f16";
  info.cache_tokens_left = 4096;
  info.throughput = 123.5;
  info.hidden_size = 4096;
  // Blocks 10..12 lie in the group of blocks 0-31: one record, under the signer's key. A span across groups has
  // one in each.
  auto records = announce_puts(alice, "llama-3-8b", info, exp);
  BOOST_REQUIRE(records.size() == 1u);
  BOOST_TEST(records[0].key == "llama-3-8b.0-31");
  BOOST_TEST(records[0].subkey == to_hex(alice.public_key()));
  BOOST_TEST((records[0].expiration == exp));
  BOOST_TEST(block_key("m", 31) == "m.0-31");
  BOOST_TEST(block_key("m", 32) == "m.32-63");
  BOOST_TEST(group_count(80) == 3);
  BOOST_TEST(group_count(32) == 1);
  BOOST_TEST(group_count(0) == 0);
  server_info wide = info;
  wide.first_block = 31;
  wide.last_block = 65;
  auto wide_records = announce_puts(alice, "llama-3-8b", wide, exp);
  BOOST_REQUIRE(wide_records.size() == 3u);
  BOOST_TEST(wide_records[0].key == "llama-3-8b.0-31");
  BOOST_TEST(wide_records[2].key == "llama-3-8b.64-95");
  BOOST_TEST(serves_block(wide, 31));
  BOOST_TEST(serves_block(wide, 64));
  BOOST_TEST(!serves_block(wide, 65));
  info = wide;
  const std::string key = wide_records[1].key;  // blocks 32..63: this server's record in it

  // A reader's view of that key: this server, Bob's, and entries that must be left out.
  server_info other = info;
  other.address = "10.0.0.9:5000";
  other.first_block = 40;
  other.last_block = 41;
  const auto bobs = announce_puts(bob, "llama-3-8b", other, exp + 1s)[0];
  const std::string alices_subkey = wide_records[1].subkey, bobs_subkey = bobs.subkey;
  const std::string under_name = owned_subkey(alice.public_key(), "extra");
  DhtEntries entries{{alices_subkey, {wide_records[1].value, exp}},
                     {bobs_subkey, {bobs.value, exp + 1s}},
                     {"1.2.3.4:5", {"not a record at all", exp}},                       // names no owner
                     {to_hex(SigningKey::generate().public_key()), {bobs.value, exp}},  // Bob's record elsewhere
                     {under_name, {sign_record(alice, key_id(key), under_name, "x", unix_ms_at(exp)), exp}}};
  std::vector<std::string> problems;
  auto servers = parse_servers(key, entries, now, &problems);
  BOOST_REQUIRE(servers.size() == 2u);
  std::map<std::string, announced_server> by_owner;
  for (auto& s : servers) by_owner[s.info.owner] = s;
  BOOST_REQUIRE(by_owner.count(to_hex(alice.public_key())) == 1u);
  BOOST_REQUIRE(by_owner.count(to_hex(bob.public_key())) == 1u);
  const auto& a = by_owner[to_hex(alice.public_key())];
  BOOST_TEST(a.info.public_name == "alice's GPU");
  BOOST_TEST(a.info.first_block == 31);
  BOOST_TEST(a.info.throughput == 123.5);
  BOOST_TEST(a.info.kv_dtype == "f16");
  BOOST_TEST(by_owner[to_hex(bob.public_key())].info.address == "10.0.0.9:5000");
  BOOST_TEST((by_owner[to_hex(bob.public_key())].expiration == exp + 1s));
  BOOST_REQUIRE(problems.size() == 3u);
  for (const auto& p : problems) BOOST_TEST_MESSAGE(p);
  // The same entries read under another key, or after they expired: nothing checks.
  BOOST_TEST(parse_servers("llama-3-8b.0-31", entries, now).empty());
  BOOST_TEST(parse_servers(key, entries, exp + 2s).empty());

  // The entry announced last stands for a server listed under several keys; on a tie, not the "offline" one.
  info.owner = to_hex(alice.public_key());
  std::map<std::string, announced_server> standing;
  announced_server old_span{info, exp}, moved{info, exp + 1s}, offline{info, exp + 1s};
  old_span.info.state = "online";
  moved.info.state = "joining";
  offline.info.state = "offline";
  keep_standing(standing, old_span);
  keep_standing(standing, offline);
  BOOST_TEST(standing.at(info.address).info.state == "offline");
  keep_standing(standing, moved);  // same expiration as the offline one: it stands
  BOOST_TEST(standing.at(info.address).info.state == "joining");
  keep_standing(standing, old_span);  // older: ignored
  BOOST_TEST(standing.at(info.address).info.state == "joining");
  // Another key claiming the same address "offline", however late it expires, does not hide the server.
  announced_server claim{info, exp + 30min};
  claim.info.owner = to_hex(bob.public_key());
  claim.info.state = "offline";
  keep_standing(standing, claim);
  BOOST_TEST(standing.at(info.address).info.state == "joining");
  BOOST_TEST(standing.at(info.address).info.owner == to_hex(alice.public_key()));

  server_info nowhere = info;
  nowhere.address.clear();
  BOOST_CHECK_THROW(announce_puts(alice, "m", nowhere, exp), std::invalid_argument);
  server_info empty_span = info;
  empty_span.last_block = empty_span.first_block;
  BOOST_CHECK_THROW(announce_puts(alice, "m", empty_span, exp), std::invalid_argument);
  server_info negative = info;
  negative.first_block = -1;
  BOOST_CHECK_THROW(announce_puts(alice, "m", negative, exp), std::invalid_argument);
}

// A server announces "joining", then "online" as its blocks finish loading, both records signed to expire within
// one millisecond. A DHT node stores the second over the first only if it expires no sooner; it once reckoned the
// signed expiry from its own clock's whole milliseconds, so a record arriving just after a millisecond ticked
// over came out up to 1 ms shorter than its predecessor, was refused, and the server looked "joining" until its
// next announcement. A record's expiry is the signed millisecond, whenever and wherever it is read.
BOOST_AUTO_TEST_CASE(a_signed_expiry_is_the_same_whenever_the_record_is_read) {
  const SigningKey alice = SigningKey::generate();
  const std::string key = block_key("m", 0);
  const std::string subkey = owned_subkey(alice.public_key());
  const DhtTime t0 = DhtTime{} + 10h;  // on a millisecond
  const int64_t expires = unix_ms_at(t0 + 20s);
  const std::string joining = sign_record(alice, key_id(key), subkey, "joining", expires);
  const std::string online = sign_record(alice, key_id(key), subkey, "online", expires);
  const DhtTime far = t0 + 1h;  // the sender's time-to-live asks for no less than the signature
  DhtStorage storage;
  const DhtTime first_read = t0 + 900us, second_read = t0 + 1100us;  // either side of a millisecond's end
  const auto a = record_expiration(key_id(key), subkey, joining, far, first_read);
  const auto b = record_expiration(key_id(key), subkey, online, far, second_read);
  BOOST_REQUIRE((a && b));
  BOOST_TEST((*a == *b));
  BOOST_TEST((*a == time_at_unix_ms(expires)));
  BOOST_TEST((storage.put(key_id(key), subkey, joining, *a, first_read) == DhtStorage::Put::stored));
  BOOST_TEST((storage.put(key_id(key), subkey, online, *b, second_read) == DhtStorage::Put::stored));
  BOOST_TEST((storage.get(key_id(key), second_read).at(subkey).value == online));  // the "online" record stands
  // A time-to-live shorter than the signature still shortens it.
  BOOST_TEST((record_expiration(key_id(key), subkey, online, t0 + 5s, second_read) == t0 + 5s));
  // Unix milliseconds and the actor clock convert both ways.
  BOOST_TEST(unix_ms_at(time_at_unix_ms(expires)) == expires);
}

// A signed info can still say anything: a stranger's info claiming blocks 0..2^62, a NaN rate or an unknown state
// would have every client's routing build a graph node per block or compare NaN costs. Such infos are left out.
BOOST_AUTO_TEST_CASE(hostile_server_infos_are_left_out) {
  const DhtTime now = DhtTime{} + 10h;
  server_info good;
  good.address = "127.0.0.1:1";
  good.first_block = 0;
  good.last_block = 4;
  good.total_blocks = 4;
  good.throughput = 10;
  const std::string key = block_key("m", 0);
  // Each info signed by a key of its own, as a stranger would, bypassing announce_puts' checks.
  auto entry_of = [&](const server_info& i, std::string& subkey) {
    const SigningKey k = SigningKey::generate();
    subkey = owned_subkey(k.public_key());
    const auto bytes = encode(i);
    return DhtValue{sign_record(k, key_id(key), subkey, std::string(bytes.begin(), bytes.end()), unix_ms_at(now + 1h)),
                    now + 1h};
  };
  std::vector<std::function<void(server_info&)>> hostile{
      [](server_info& i) { i.last_block = int64_t{1} << 62, i.total_blocks = int64_t{1} << 62; },
      [](server_info& i) { i.first_block = -5; },
      [](server_info& i) { i.last_block = 9; },  // past the model's total
      [](server_info& i) { i.first_block = 4; },
      [](server_info& i) { i.throughput = std::nan(""); },
      [](server_info& i) { i.inference_rps = -1; },
      [](server_info& i) {
        i.pings = {{"x:1", std::numeric_limits<double>::infinity()}};
      },
      [](server_info& i) { i.state = "ruling"; },
      [](server_info& i) { i.cache_tokens_left = -1; },
      [](server_info& i) { i.kv_dtype = "f8"; },  // no such cache: its checks' tolerance would be unknown
  };
  DhtEntries entries;
  std::string subkey;
  DhtValue v = entry_of(good, subkey);
  entries[subkey] = v;
  for (size_t k = 0; k < hostile.size(); ++k) {
    server_info bad = good;
    bad.address = "127.0.0.1:" + std::to_string(100 + k);
    hostile[k](bad);
    v = entry_of(bad, subkey);
    entries[subkey] = v;
  }
  std::vector<std::string> problems;
  auto servers = parse_servers(key, entries, now, &problems);
  BOOST_REQUIRE_EQUAL(servers.size(), 1u);
  BOOST_TEST(servers[0].info.address == good.address);
  BOOST_TEST(problems.size() == hostile.size());
}
