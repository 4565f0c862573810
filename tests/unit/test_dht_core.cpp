// The DHT's plain code: SHA-1 known answers, ids and XOR distance, k-bucket rules, storage with expiring
// subkeys, and the iterative lookup state machine over a synthetic network.
#define BOOST_TEST_MODULE dht_core
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <set>

#include "actors/dht/kbucket.hpp"
#include "actors/dht/lookup.hpp"
#include "actors/dht/node_id.hpp"
#include "actors/dht/sha1.hpp"
#include "actors/dht/storage.hpp"

using namespace corolla;
using namespace std::chrono_literals;

namespace {

NodeId id_with(std::initializer_list<std::pair<size_t, uint8_t>> bytes) {
  NodeId id{};
  for (auto [i, b] : bytes) id[i] = b;
  return id;
}

NodeId random_id(std::mt19937_64& rng) {
  NodeId id;
  for (auto& b : id) b = static_cast<uint8_t>(rng());
  return id;
}

Contact contact(uint8_t last, uint8_t first = 0x80) {
  return Contact{id_with({{0, first}, {19, last}}), "node-" + std::to_string(first) + "-" + std::to_string(last)};
}

}  // namespace

// --- SHA-1 --------------------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(sha1_known_answers) {
  BOOST_TEST(to_hex(sha1("")) == "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  BOOST_TEST(to_hex(sha1("abc")) == "a9993e364706816aba3e25717850c26c9cd0d89d");
  BOOST_TEST(to_hex(sha1("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
             "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
  BOOST_TEST(to_hex(sha1("The quick brown fox jumps over the lazy dog")) == "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12");
  BOOST_TEST(to_hex(sha1(std::string(1000000, 'a'))) == "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
  BOOST_TEST(to_hex(sha1("llama.12")) == "dcdda916516aeb0931599c56ecc334daf0ec075b");
  std::string all_bytes;
  for (int i = 0; i < 256; ++i) all_bytes.push_back(static_cast<char>(i));
  BOOST_TEST(to_hex(sha1(all_bytes)) == "4916d6bdb7f78e6803698cab32d1586ea457dfc8");
}

BOOST_AUTO_TEST_CASE(sha1_padding_boundaries) {
  const std::map<size_t, std::string> want = {
      {55, "c1c8bbdc22796e28c0e15163d20899b65621d65a"}, {56, "c2db330f6083854c99d4b5bfb6e8f29f201be699"},
      {63, "03f09f5b158a7a8cdad920bddc29b81c18a551f5"}, {64, "0098ba824b5c16427bd7a1122a5a442a25ec644d"},
      {65, "11655326c708d70319be2610e8a57d9a5b959d3b"}, {119, "ee971065aaa017e0632a8ca6c77bb3bf8b1dfc56"},
      {120, "f34c1488385346a55709ba056ddd08280dd4c6d6"}};
  for (const auto& [n, hex] : want) BOOST_TEST(to_hex(sha1(std::string(n, 'a'))) == hex, "length " << n);
}

BOOST_AUTO_TEST_CASE(sha1_in_pieces_equals_one_shot) {
  const std::string text(1000, 'x');
  for (size_t piece : {1u, 7u, 63u, 64u, 65u, 333u}) {
    Sha1 h;
    for (size_t i = 0; i < text.size(); i += piece) h.update(std::string_view(text).substr(i, piece));
    BOOST_TEST(to_hex(h.finish()) == to_hex(sha1(text)), "pieces of " << piece);
  }
}

// --- ids ----------------------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(xor_distance_and_bucket_index) {
  const NodeId zero{};
  const NodeId top = id_with({{0, 0x80}});
  const NodeId last = id_with({{19, 0x01}});
  BOOST_TEST(xor_distance(top, top) == zero);
  BOOST_TEST(xor_distance(top, last) == id_with({{0, 0x80}, {19, 0x01}}));
  BOOST_TEST(common_prefix_length(zero, zero) == 160);
  BOOST_TEST(common_prefix_length(zero, top) == 0);
  BOOST_TEST(common_prefix_length(zero, last) == 159);
  BOOST_TEST(common_prefix_length(zero, id_with({{1, 0x10}})) == 11);
  BOOST_TEST(bucket_index(zero, top) == 159);
  BOOST_TEST(bucket_index(zero, last) == 0);
  BOOST_TEST(bucket_index(zero, id_with({{1, 0x10}})) == 148);
  BOOST_TEST(bucket_index(zero, zero) == -1);
  // XOR is symmetric; closer compares distances to a target as 160-bit numbers.
  BOOST_TEST(bucket_index(top, last) == bucket_index(last, top));
  BOOST_TEST(closer(last, top, zero));
  BOOST_TEST(!closer(top, last, zero));
  BOOST_TEST(!closer(top, top, zero));
  BOOST_TEST(closer(top, last, id_with({{0, 0xff}})));
}

BOOST_AUTO_TEST_CASE(random_ids_land_in_their_bucket) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 5; ++trial) {
    const NodeId self = random_id(rng);
    for (int index = 0; index < kIdBits; ++index)
      BOOST_TEST(bucket_index(self, random_id_in_bucket(self, index, rng)) == index);
  }
}

BOOST_AUTO_TEST_CASE(ids_from_bytes_must_have_20) {
  const NodeId id = key_id("llama.12");
  BOOST_TEST((id_from_bytes(id_bytes(id)) == id));
  BOOST_TEST(!id_from_bytes(std::string(19, 'x')));
  BOOST_TEST(!id_from_bytes(std::string(21, 'x')));
  BOOST_TEST(!id_from_bytes(""));
  BOOST_TEST(id_hex(id) == "dcdda916516aeb0931599c56ecc334daf0ec075b");
  BOOST_TEST(short_hex(id) == "dcdda916");
}

BOOST_AUTO_TEST_CASE(rng_from_id_is_deterministic) {
  const NodeId a = key_id("a"), b = key_id("b");
  BOOST_TEST(rng_from_id(a)() == rng_from_id(a)());
  BOOST_TEST(rng_from_id(a)() != rng_from_id(b)());
  BOOST_TEST(rng_from_id(a, 1)() != rng_from_id(a, 2)());
}

// --- k-bucket rules -----------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(bucket_keeps_old_contacts_and_queues_newcomers) {
  KBucket b(KBucket::Options{3, 3, 2});
  BOOST_TEST((b.seen(contact(1)) == KBucket::Seen::added));
  BOOST_TEST((b.seen(contact(2)) == KBucket::Seen::added));
  BOOST_TEST((b.seen(contact(3)) == KBucket::Seen::added));
  BOOST_TEST(b.full());
  BOOST_TEST((b.least_recent()->id == contact(1).id));
  // Seen again: moves to the end (most recently seen).
  BOOST_TEST((b.seen(contact(1)) == KBucket::Seen::updated));
  BOOST_TEST((b.least_recent()->id == contact(2).id));
  // Full: newcomers wait as replacements (the two most recent kept); members are untouched.
  BOOST_TEST((b.seen(contact(4)) == KBucket::Seen::replacement));
  BOOST_TEST((b.seen(contact(5)) == KBucket::Seen::replacement));
  BOOST_TEST((b.seen(contact(6)) == KBucket::Seen::replacement));
  BOOST_TEST(b.size() == 3u);
  BOOST_TEST(!b.contains(contact(4).id));
  BOOST_REQUIRE(b.replacements().size() == 2u);
  BOOST_TEST((b.replacements()[0].id == contact(5).id));
  BOOST_TEST((b.replacements()[1].id == contact(6).id));
  // The least recently seen answered its ping: it stays, the newcomer keeps waiting.
  BOOST_TEST((b.seen(contact(2)) == KBucket::Seen::updated));
  BOOST_TEST(b.contains(contact(2).id));
  BOOST_TEST(b.replacements().size() == 2u);
}

BOOST_AUTO_TEST_CASE(bucket_evicts_after_failures_and_promotes_the_freshest_replacement) {
  KBucket b(KBucket::Options{2, 3, 4});
  b.seen(contact(1));
  b.seen(contact(2));
  b.seen(contact(3));  // waits
  b.seen(contact(4));  // waits, fresher
  BOOST_TEST(!b.failed(contact(1).id));
  BOOST_TEST(!b.failed(contact(1).id));
  BOOST_TEST(b.failures(contact(1).id) == 2u);
  // A success resets the count.
  b.seen(contact(1));
  BOOST_TEST(b.failures(contact(1).id) == 0u);
  BOOST_TEST(!b.failed(contact(1).id));
  BOOST_TEST(!b.failed(contact(1).id));
  BOOST_TEST(b.failed(contact(1).id));  // third in a row: evicted
  BOOST_TEST(!b.contains(contact(1).id));
  BOOST_TEST(b.contains(contact(4).id));  // the freshest replacement took the place
  BOOST_TEST(b.size() == 2u);
  BOOST_REQUIRE(b.replacements().size() == 1u);
  // A failed liveness ping evicts at once when a replacement waits...
  BOOST_TEST(b.failed(contact(2).id, true));
  BOOST_TEST(b.contains(contact(3).id));
  // ...but only counts as a failure when none does.
  BOOST_TEST(!b.failed(contact(3).id, true));
  BOOST_TEST(b.contains(contact(3).id));
  // A failing replacement is dropped from the cache.
  b.seen(contact(9));
  BOOST_TEST(b.replacements().size() == 1u);
  BOOST_TEST(!b.failed(contact(9).id));
  BOOST_TEST(b.replacements().empty());
}

BOOST_AUTO_TEST_CASE(bucket_updates_a_moved_address) {
  KBucket b;
  b.seen(contact(1));
  Contact moved = contact(1);
  moved.address = "elsewhere:1";
  b.seen(moved);
  BOOST_TEST(b.contacts().front().address == "elsewhere:1");
}

BOOST_AUTO_TEST_CASE(closest_contacts_sorts_by_xor_distance) {
  std::vector<Contact> cs = {contact(1, 0x80), contact(2, 0x40), contact(3, 0x01), contact(4, 0xc0)};
  auto near = closest_contacts(cs, id_with({{0, 0x41}}), 2);
  BOOST_REQUIRE(near.size() == 2u);
  BOOST_TEST((near[0].id == contact(2, 0x40).id));
  BOOST_TEST((near[1].id == contact(3, 0x01).id));
  BOOST_TEST(closest_contacts(cs, NodeId{}, 10).size() == 4u);
}

// --- storage ------------------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(storage_subkeys_expire_separately) {
  DhtStorage s;
  const DhtTime t0 = DhtTime{} + 1h;
  const NodeId key = key_id("llama.12");
  BOOST_TEST((s.put(key, "server-a", "A", t0 + 10s, t0) == DhtStorage::Put::stored));
  BOOST_TEST((s.put(key, "server-b", "B", t0 + 20s, t0) == DhtStorage::Put::stored));
  auto live = s.get(key, t0 + 5s);
  BOOST_REQUIRE(live.size() == 2u);
  BOOST_TEST(live["server-a"].value == "A");
  BOOST_TEST((live["server-b"].expiration == t0 + 20s));
  live = s.get(key, t0 + 15s);
  BOOST_REQUIRE(live.size() == 1u);
  BOOST_TEST(live.count("server-b") == 1u);
  BOOST_TEST(s.get(key, t0 + 20s).empty());  // expiration is exclusive
  BOOST_TEST(s.get(key_id("other"), t0).empty());
  BOOST_TEST(s.entries() == 2u);
  BOOST_TEST(s.purge(t0 + 15s) == 1u);
  BOOST_TEST(s.entries() == 1u);
  BOOST_TEST(s.purge(t0 + 25s) == 1u);
  BOOST_TEST(s.keys() == 0u);
}

BOOST_AUTO_TEST_CASE(storage_keeps_the_later_expiration) {
  DhtStorage s;
  const DhtTime t0 = DhtTime{} + 1h;
  const NodeId key = key_id("k");
  BOOST_TEST((s.put(key, "a", "new", t0 + 60s, t0) == DhtStorage::Put::stored));
  // An older copy (expiring sooner) does not overwrite it.
  BOOST_TEST((s.put(key, "a", "old", t0 + 30s, t0 + 1s) == DhtStorage::Put::superseded));
  BOOST_TEST(s.get(key, t0 + 2s)["a"].value == "new");
  // A fresher one (or the same expiration) does.
  BOOST_TEST((s.put(key, "a", "newer", t0 + 90s, t0 + 2s) == DhtStorage::Put::stored));
  BOOST_TEST((s.put(key, "a", "same", t0 + 90s, t0 + 3s) == DhtStorage::Put::stored));
  BOOST_TEST(s.get(key, t0 + 3s)["a"].value == "same");
  // Already expired: refused.
  BOOST_TEST((s.put(key, "b", "x", t0, t0) == DhtStorage::Put::expired));
  BOOST_TEST(s.get(key, t0 + 3s).count("b") == 0u);
}

// Storage whose keys hold 16 subkeys, 4 from each origin: small enough to fill.
static DhtStorage::Options sixteen_places() {
  DhtStorage::Options o;
  o.max_subkeys = 16;
  o.max_subkeys_per_origin = 4;
  return o;
}

// A flood of valid records (keys cost nothing) from one peer takes at most its origin's share of a key and of the
// node's bytes, so records from elsewhere are still stored; this node's own puts have no quota;
// expired entries stop counting.
BOOST_AUTO_TEST_CASE(storage_gives_each_origin_a_share_of_a_key_and_of_its_bytes) {
  const DhtTime t0 = DhtTime{} + 1h;
  DhtStorage s(sixteen_places());
  const NodeId key = key_id("llama.0");
  const std::string flooder = "address 10.0.0.66", honest = "address 10.0.0.7";
  for (int i = 0; i < 4; ++i)
    BOOST_TEST((s.put(key, "flood-" + std::to_string(i), "x", t0 + 60s, t0, flooder) == DhtStorage::Put::stored));
  for (int i = 4; i < 100; ++i)
    BOOST_TEST((s.put(key, "flood-" + std::to_string(i), "x", t0 + 60s, t0, flooder) == DhtStorage::Put::over_quota));
  BOOST_TEST((s.put(key, "server-a", "A", t0 + 60s, t0, honest) == DhtStorage::Put::stored));
  // Its other keys have their own share; its own subkeys stay renewable at the quota.
  BOOST_TEST((s.put(key_id("llama.1"), "flood-0", "x", t0 + 60s, t0, flooder) == DhtStorage::Put::stored));
  BOOST_TEST((s.put(key, "flood-0", "renewed", t0 + 90s, t0 + 1s, flooder) == DhtStorage::Put::stored));
  // Taking over another origin's subkey counts as a new one.
  BOOST_TEST((s.put(key, "server-a", "taken", t0 + 90s, t0 + 1s, flooder) == DhtStorage::Put::over_quota));
  BOOST_TEST(s.get(key, t0 + 1s)["server-a"].value == "A");
  // This node's own puts are not limited.
  for (int i = 0; i < 8; ++i)
    BOOST_TEST((s.put(key, "own-" + std::to_string(i), "y", t0 + 60s, t0) == DhtStorage::Put::stored));
  // What a node decides before checking a record's signature: a record held as it is needs no check, one the
  // quotas refuse gets none, anything else is checked.
  using Pre = DhtStorage::Precheck;
  BOOST_TEST((s.precheck(key, "flood-0", "renewed", flooder, t0 + 2s) == Pre::held));
  BOOST_TEST((s.precheck(key, "flood-50", "x", flooder, t0 + 2s) == Pre::refused));
  BOOST_TEST((s.precheck(key, "flood-0", "renewed again", flooder, t0 + 2s) == Pre::check));
  BOOST_TEST((s.precheck(key, "server-b", "B", honest, t0 + 2s) == Pre::check));
  // Once the flood expires, its origin may store again.
  BOOST_TEST((s.precheck(key, "flood-9", "x", flooder, t0 + 61s) == Pre::check));
  BOOST_TEST((s.put(key, "flood-9", "x", t0 + 120s, t0 + 61s, flooder) == DhtStorage::Put::stored));

  // Bytes: one origin may hold max_bytes_per_origin in all keys; replacing its own entry frees what it held.
  const size_t two = 2 * DhtStorage::entry_cost("k1", 40);
  DhtStorage::Options b;
  b.max_bytes_per_origin = two + 1;
  DhtStorage t(b);
  const std::string value(40, 'v');
  BOOST_TEST((t.put(key_id("a"), "k1", value, t0 + 60s, t0, flooder) == DhtStorage::Put::stored));
  BOOST_TEST((t.put(key_id("b"), "k2", value, t0 + 60s, t0, flooder) == DhtStorage::Put::stored));
  BOOST_TEST(t.bytes_from(flooder) == two);
  BOOST_TEST((t.put(key_id("c"), "k3", value, t0 + 60s, t0, flooder) == DhtStorage::Put::over_quota));
  BOOST_TEST((t.put(key_id("a"), "k1", value + "x", t0 + 61s, t0, flooder) == DhtStorage::Put::stored));
  BOOST_TEST(t.bytes_from(flooder) == two + 1);
  BOOST_TEST((t.put(key_id("c"), "k3", value, t0 + 60s, t0, honest) == DhtStorage::Put::stored));
  BOOST_TEST(t.purge(t0 + 60s) == 2u);  // k2 and k3 (k1 now expires later)
  BOOST_TEST(t.bytes_from(flooder) == two / 2 + 1);
  BOOST_TEST(t.bytes_from(honest) == 0u);
  BOOST_TEST(t.bytes() == two / 2 + 1);

  // Keys: each entry costs kEntryOverhead besides its subkey and value, so small records under as many keys (which
  // would fill the node's memory with keys) count against the same bytes; more subkeys in a key cost the same.
  DhtStorage::Options few;
  few.max_bytes_per_origin = 3 * DhtStorage::entry_cost("s", 1);
  DhtStorage u(few);
  for (int i = 0; i < 3; ++i)
    BOOST_TEST((u.put(key_id("k" + std::to_string(i)), "s", "v", t0 + 60s, t0, flooder) == DhtStorage::Put::stored));
  BOOST_TEST((u.put(key_id("k3"), "s", "v", t0 + 60s, t0, flooder) == DhtStorage::Put::over_quota));
  BOOST_TEST((u.put(key_id("k0"), "t", "v", t0 + 60s, t0, flooder) == DhtStorage::Put::over_quota));
  BOOST_TEST((u.precheck(key_id("k3"), "s", "v", flooder, t0) == DhtStorage::Precheck::refused));
  BOOST_TEST((u.put(key_id("k3"), "s", "v", t0 + 60s, t0, honest) == DhtStorage::Put::stored));
  BOOST_TEST(u.keys() == 4u);
  BOOST_TEST(u.purge(t0 + 60s) == 4u);
  BOOST_TEST(u.keys() == 0u);
  BOOST_TEST(u.bytes_from(flooder) == 0u);
  BOOST_TEST((u.put(key_id("k3"), "s", "v", t0 + 90s, t0 + 60s, flooder) == DhtStorage::Put::stored));
}

// A key full of a few origins' records (a flood from a handful of addresses) makes room for an origin with fewer:
// the origin holding the most of the key gives up its entry that expires first, as long as it holds at least two
// more than the newcomer (places move from the largest holders to smaller ones, never between equals). Flooders
// with an address each fill a key of single entries only, so they need as many addresses as the key has places.
BOOST_AUTO_TEST_CASE(a_full_key_makes_room_for_an_origin_that_holds_fewer_of_it) {
  const DhtTime t0 = DhtTime{} + 1h;
  DhtStorage s(sixteen_places());
  const NodeId key = key_id("llama.0");
  auto flooder = [](int f) { return "address 10.0.0." + std::to_string(60 + f); };
  auto flood = [](int f, int i) { return "flood-" + std::to_string(f) + "-" + std::to_string(i); };
  for (int f = 0; f < 4; ++f)
    for (int i = 0; i < 4; ++i)
      BOOST_TEST((s.put(key, flood(f, i), "x", t0 + 60s + std::chrono::seconds(i == 2 ? 0 : 10), t0, flooder(f)) ==
                  DhtStorage::Put::stored));
  BOOST_TEST(s.get(key, t0).size() == 16u);
  using Pre = DhtStorage::Precheck;
  BOOST_TEST((s.precheck(key, "server-a", "A", "address 10.0.0.7", t0) == Pre::check));
  BOOST_TEST((s.put(key, "server-a", "A", t0 + 60s, t0, "address 10.0.0.7") == DhtStorage::Put::stored));
  // The first of the largest holders gave up its entry that expires first.
  DhtEntries held = s.get(key, t0);
  BOOST_TEST(held.size() == 16u);
  BOOST_TEST(held.count("server-a") == 1u);
  BOOST_TEST(held.count(flood(0, 2)) == 0u);
  // The flooder that gave way may not take its place back from its equals (3 against 4), nor may a fifth flooder
  // take one from a holder of one: the node checks no signature of either.
  BOOST_TEST((s.precheck(key, flood(0, 2), "x", flooder(0), t0) == Pre::refused));
  BOOST_TEST((s.put(key, flood(0, 2), "x", t0 + 60s, t0, flooder(0)) == DhtStorage::Put::full));
  // Another newcomer takes its place from the next largest holder.
  BOOST_TEST((s.put(key, "server-b", "B", t0 + 60s, t0, "address 10.0.0.8") == DhtStorage::Put::stored));
  BOOST_TEST(s.get(key, t0).count(flood(1, 2)) == 0u);
  // This node's own record takes a place from a stranger holding two more than this node does.
  BOOST_TEST((s.put(key, "own", "O", t0 + 60s, t0) == DhtStorage::Put::stored));
  BOOST_TEST(s.get(key, t0).count(flood(2, 2)) == 0u);
  BOOST_TEST(s.get(key, t0).size() == 16u);

  // A key of single entries from as many origins is full for every newcomer.
  DhtStorage::Options one;
  one.max_subkeys = 4;
  DhtStorage t(one);
  for (int f = 0; f < 4; ++f)
    BOOST_TEST((t.put(key, "server-" + std::to_string(f), "v", t0 + 60s, t0, flooder(f)) == DhtStorage::Put::stored));
  BOOST_TEST((t.precheck(key, "late", "v", "address 10.0.0.9", t0) == Pre::refused));
  BOOST_TEST((t.put(key, "late", "v", t0 + 60s, t0, "address 10.0.0.9") == DhtStorage::Put::full));
  BOOST_TEST((t.put(key, "own", "v", t0 + 60s, t0) == DhtStorage::Put::full));
  // Expired entries still make room first.
  BOOST_TEST((t.put(key, "late", "v", t0 + 120s, t0 + 61s, "address 10.0.0.9") == DhtStorage::Put::stored));
}

// A node full of a few origins' records (a flood of keys from a handful of addresses, each within its own bytes)
// makes room for an origin holding fewer: the origin holding the most bytes gives up its entries that expire first,
// as many as the newcomer needs, while it keeps at least what the newcomer will hold. Flooders with an address each
// fill the node only with as many addresses as it holds entries of their size.
BOOST_AUTO_TEST_CASE(a_full_node_makes_room_for_an_origin_that_holds_fewer_of_it) {
  const DhtTime t0 = DhtTime{} + 1h;
  auto flooder = [](int f) { return "address 10.0.0." + std::to_string(60 + f); };
  auto flood = [](int f, int i) { return "flood-" + std::to_string(f) + "-" + std::to_string(i); };
  const size_t entry = DhtStorage::entry_cost(flood(0, 0), 1);
  DhtStorage::Options o;
  o.max_bytes = 16 * entry;
  DhtStorage s(o);
  for (int f = 0; f < 4; ++f)
    for (int i = 0; i < 4; ++i)
      BOOST_TEST((s.put(key_id(flood(f, i)), flood(f, i), "x", t0 + 60s + std::chrono::seconds(i == 2 ? 0 : 10), t0,
                        flooder(f)) == DhtStorage::Put::stored));
  BOOST_TEST(s.bytes() == o.max_bytes);
  using Pre = DhtStorage::Precheck;
  const std::string server = "address 10.0.0.7";
  BOOST_TEST((s.precheck(key_id("llama.0"), "server-a", "A", server, t0) == Pre::check));
  BOOST_TEST((s.put(key_id("llama.0"), "server-a", "A", t0 + 60s, t0, server) == DhtStorage::Put::stored));
  // The first of the largest holders gave up its entry that expires first.
  BOOST_TEST(s.get(key_id(flood(0, 2)), t0).empty());
  BOOST_TEST(s.keys() == 16u);
  BOOST_TEST(s.bytes() <= o.max_bytes);
  // The flooder that gave way may not take its place back from its equals (3 entries against 4).
  BOOST_TEST((s.precheck(key_id(flood(0, 2)), flood(0, 2), "x", flooder(0), t0) == Pre::refused));
  BOOST_TEST((s.put(key_id(flood(0, 2)), flood(0, 2), "x", t0 + 60s, t0, flooder(0)) == DhtStorage::Put::full));
  // Another newcomer takes room from the next largest; this node's own record from the next.
  BOOST_TEST((s.put(key_id("llama.1"), "server-b", "B", t0 + 60s, t0, "address 10.0.0.8") == DhtStorage::Put::stored));
  BOOST_TEST(s.get(key_id(flood(1, 2)), t0).empty());
  BOOST_TEST((s.put(key_id("llama.2"), "own", "O", t0 + 60s, t0) == DhtStorage::Put::stored));
  BOOST_TEST(s.get(key_id(flood(2, 2)), t0).empty());
  // A record costing two entries takes two from the largest (4 entries, left with 2 against the newcomer's 2).
  BOOST_TEST((s.put(key_id("llama.3"), "server-c", std::string(entry + 2, 'C'), t0 + 60s, t0, "address 10.0.0.9") ==
              DhtStorage::Put::stored));
  BOOST_TEST(s.get(key_id(flood(3, 2)), t0).empty());
  BOOST_TEST(s.bytes_from(flooder(3)) == 2 * entry);
  BOOST_TEST(s.bytes() <= o.max_bytes);
  // ... but not three: no one holds enough more than a newcomer with a record that large.
  BOOST_TEST((s.put(key_id("llama.4"), "server-d", std::string(2 * entry + 2, 'D'), t0 + 60s, t0,
                    "address 10.0.0.10") == DhtStorage::Put::full));

  // A node of single entries from as many origins is full for every newcomer.
  DhtStorage::Options one;
  one.max_bytes = 4 * entry;
  DhtStorage t(one);
  for (int f = 0; f < 4; ++f)
    BOOST_TEST((t.put(key_id(flood(f, 0)), flood(f, 0), "x", t0 + 60s, t0, flooder(f)) == DhtStorage::Put::stored));
  BOOST_TEST((t.precheck(key_id("late"), "late", "v", "address 10.0.0.9", t0) == Pre::refused));
  BOOST_TEST((t.put(key_id("late"), "late", "v", t0 + 60s, t0, "address 10.0.0.9") == DhtStorage::Put::full));
  BOOST_TEST((t.put(key_id("own"), "own", "v", t0 + 60s, t0) == DhtStorage::Put::full));
  // Expired entries still make room first.
  BOOST_TEST((t.put(key_id("late"), "late", "v", t0 + 120s, t0 + 61s, "address 10.0.0.9") == DhtStorage::Put::stored));
  BOOST_TEST(t.keys() == 1u);
}

// A stranger's record may not outlive the hour (a server "offline" for ten years would never be superseded by
// its own announcements), nor may records fill a node's memory past its bytes, keys included.
BOOST_AUTO_TEST_CASE(storage_refuses_records_past_the_hour_and_beyond_its_size) {
  const DhtTime t0 = DhtTime{} + 1h;
  DhtStorage s;
  BOOST_TEST((s.put(key_id("k"), "server-a", "offline", t0 + 24h * 3650, t0) == DhtStorage::Put::too_late));
  BOOST_TEST((s.put(key_id("k"), "server-a", "online", t0 + 1h, t0) == DhtStorage::Put::stored));
  BOOST_TEST((s.put(key_id("k"), "server-a", "offline", t0 + 1h + 1s, t0) == DhtStorage::Put::too_late));
  const size_t entry = DhtStorage::entry_cost("s", 1);
  DhtStorage::Options o;
  o.max_bytes = 3 * entry;
  DhtStorage small(o);
  for (int i = 0; i < 3; ++i)
    BOOST_TEST((small.put(key_id("k" + std::to_string(i)), "s", "v", t0 + 10s, t0) == DhtStorage::Put::stored));
  BOOST_TEST((small.put(key_id("k3"), "s", "v", t0 + 10s, t0) == DhtStorage::Put::full));
  BOOST_TEST((small.put(key_id("k0"), "s", "vv", t0 + 10s, t0) == DhtStorage::Put::full));
  BOOST_TEST(small.bytes() == 3 * entry);
  BOOST_TEST(small.keys() == 3u);
  // Expired entries make room.
  BOOST_TEST(
      (small.put(key_id("k3"), "s", std::string(2 * entry, 'x'), t0 + 20s, t0 + 11s) == DhtStorage::Put::stored));
  BOOST_TEST(small.keys() == 1u);
  BOOST_TEST(small.bytes() == DhtStorage::entry_cost("s", 2 * entry));
}

BOOST_AUTO_TEST_CASE(storage_limits_subkeys_per_key) {
  DhtStorage s(DhtStorage::Options{2});
  const DhtTime t0 = DhtTime{} + 1h;
  const NodeId key = key_id("k");
  BOOST_TEST((s.put(key, "a", "1", t0 + 10s, t0) == DhtStorage::Put::stored));
  BOOST_TEST((s.put(key, "b", "2", t0 + 20s, t0) == DhtStorage::Put::stored));
  BOOST_TEST((s.put(key, "c", "3", t0 + 20s, t0) == DhtStorage::Put::full));
  BOOST_TEST((s.put(key, "a", "1b", t0 + 20s, t0) == DhtStorage::Put::stored));  // an update is not a new subkey
  // Once one expires, its place is free.
  BOOST_TEST((s.put(key, "c", "3", t0 + 30s, t0 + 25s) == DhtStorage::Put::stored));
  std::set<std::string> seen;
  s.for_each(t0 + 25s, [&](const NodeId& k, const std::string& subkey, const DhtValue&, DhtTime stored_at) {
    BOOST_TEST((k == key));
    seen.insert(subkey + "@" +
                std::to_string(std::chrono::duration_cast<std::chrono::seconds>(stored_at - t0).count()));
  });
  BOOST_TEST((seen == std::set<std::string>{"c@25"}));
}

// --- lookup -------------------------------------------------------------------------------------------------------

namespace {

// A synthetic network: each node knows the k nodes closest to it and 20 random others; asked for a target, it
// names the k it knows closest to it.
struct SyntheticNetwork {
  std::vector<Contact> nodes;
  std::map<NodeId, std::vector<Contact>> knows;
  std::set<NodeId> dead;

  SyntheticNetwork(size_t n, size_t k, uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (size_t i = 0; i < n; ++i) nodes.push_back({random_id(rng), "n" + std::to_string(i)});
    for (const auto& node : nodes) {
      auto near = closest_contacts(nodes, node.id, k + 1);
      std::vector<Contact> table(near.begin() + 1, near.end());
      for (int j = 0; j < 20; ++j) table.push_back(nodes[rng() % n]);
      knows[node.id] = table;
    }
  }

  // Runs a lookup from `from` to `target`, answering in order; checks that at most alpha are in flight.
  Lookup run(const Contact& from, const NodeId& target, Lookup::Options o) {
    Lookup l(target, o, from.id, closest_contacts(knows[from.id], target, o.k));
    std::vector<Contact> flight;
    for (int guard = 0; guard < 10000 && !l.finished(); ++guard) {
      for (auto& c : l.next()) flight.push_back(c);
      BOOST_REQUIRE(l.in_flight() <= o.alpha);
      BOOST_REQUIRE(!flight.empty());
      Contact c = flight.front();
      flight.erase(flight.begin());
      if (dead.count(c.id))
        l.failed(c.id);
      else
        l.answered(c.id, closest_contacts(knows[c.id], target, o.k));
    }
    BOOST_REQUIRE(l.finished());
    return l;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(lookup_finds_the_k_closest) {
  SyntheticNetwork net(500, 20, 3);
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    const NodeId target = random_id(rng);
    const Contact& from = net.nodes[rng() % net.nodes.size()];
    Lookup l = net.run(from, target, {20, 3});
    std::vector<Contact> others;
    for (const auto& c : net.nodes)
      if (c.id != from.id) others.push_back(c);
    auto want = closest_contacts(others, target, 20);
    auto got = l.closest_answered(20);
    BOOST_REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) BOOST_TEST((got[i].id == want[i].id));
    BOOST_TEST(l.hops() >= 1);
    BOOST_TEST(l.hops() <= 18);  // 2 * log2(500)
  }
}

BOOST_AUTO_TEST_CASE(lookup_routes_around_failed_nodes) {
  SyntheticNetwork net(300, 20, 5);
  std::mt19937_64 rng(13);
  for (size_t i = 0; i < net.nodes.size(); i += 5) net.dead.insert(net.nodes[i].id);  // 20% dead
  for (int trial = 0; trial < 20; ++trial) {
    const NodeId target = random_id(rng);
    const Contact& from = net.nodes[1 + 5 * (rng() % 50)];
    Lookup l = net.run(from, target, {20, 3});
    std::vector<Contact> live;
    for (const auto& c : net.nodes)
      if (!net.dead.count(c.id) && c.id != from.id) live.push_back(c);
    auto want = closest_contacts(live, target, 5);
    auto got = l.closest_answered(5);
    BOOST_REQUIRE(got.size() == 5u);
    for (size_t i = 0; i < 5; ++i) BOOST_TEST((got[i].id == want[i].id));
    for (const auto& c : l.closest_answered(20)) BOOST_TEST(!net.dead.count(c.id));
  }
}

// A query unanswered at two ticks is passed over: another candidate is asked in its place and the lookup need not
// wait for it to finish; its answer, if it comes after all, still counts.
BOOST_AUTO_TEST_CASE(lookup_passes_over_a_slow_query_and_takes_its_late_answer) {
  const Contact self = contact(1);
  Lookup l(NodeId{}, {2, 1}, self.id, {contact(2), contact(3), contact(4)});
  auto asked = l.next();  // alpha 1: the closest
  BOOST_REQUIRE(asked.size() == 1u);
  BOOST_TEST(l.mark_slow() == 0u);  // asked in this tick: not slow yet
  BOOST_TEST(l.next().empty());     // still in flight
  BOOST_TEST(l.mark_slow() == 1u);  // in flight at two ticks
  BOOST_TEST(!l.nearest_answered(1));
  auto instead = l.next();
  BOOST_REQUIRE(instead.size() == 1u);
  BOOST_TEST((instead[0].id != asked[0].id));
  l.answered(instead[0].id, {});
  auto third = l.next();  // k = 2: the slow one is passed over, so the third candidate is in the window
  BOOST_REQUIRE(third.size() == 1u);
  l.answered(third[0].id, {});
  BOOST_TEST(l.finished());
  BOOST_TEST(l.closest_answered(3).size() == 2u);
  l.answered(asked[0].id, {});  // late, but an answer
  BOOST_TEST(l.closest_answered(3).size() == 3u);
  BOOST_TEST((l.closest_answered(1)[0].id == asked[0].id));
  BOOST_TEST(l.in_flight() == 0u);
}

BOOST_AUTO_TEST_CASE(lookup_ignores_self_and_unknown_replies) {
  const Contact self = contact(1);
  Lookup l(NodeId{}, {20, 3}, self.id, {self, contact(2), contact(3)});
  auto asked = l.next();
  BOOST_REQUIRE(asked.size() == 2u);        // not self
  l.answered(contact(9).id, {contact(4)});  // never asked: ignored
  l.answered(asked[0].id, {self, contact(4)});
  auto more = l.next();
  BOOST_REQUIRE(more.size() == 1u);
  BOOST_TEST((more[0].id == contact(4).id));
  l.failed(asked[1].id);
  l.answered(more[0].id, {});
  BOOST_TEST(l.finished());
  BOOST_TEST(l.queries() == 3u);
  BOOST_TEST(l.hops() == 2);
  BOOST_TEST(l.closest_answered(20).size() == 2u);
  // No contacts at all: finished at once.
  Lookup empty(NodeId{}, {20, 3}, self.id, {});
  BOOST_TEST(empty.finished());
  BOOST_TEST(empty.next().empty());
}
