// NodeStore: a node's persistent state, one RocksDB database at <data_dir>/db with one column family per concern:
//   weights     converted block weights (see weights_cache.hpp); large values, kept in blob files, uncompressed
//   identity    the node's Ed25519 seed (32 random bytes drawn once, when first asked for; see actors/trust)
//   reputation  per peer: successes, failures, latency EWMA, banned-until (layout in reputation.hpp)
//   throughput  measured rates (a double) keyed by a string such as "model/device/dtype"
//
//   NodeStore store("/var/lib/corolla/node1");   // creates the directory and the database if needed
//   auto seed = store.identity_seed();
//
// Errors (the directory cannot be created, another process holds the database, a corrupt database, a failed
// read or write) throw std::runtime_error naming the path and RocksDB's status. Every method may be called from
// several threads. Plain C++: no actor code here.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "actors/store/reputation.hpp"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
}  // namespace rocksdb

namespace corolla {

enum class StoreFamily : uint8_t { weights, identity, reputation, throughput };

// Thrown when another process (or another NodeStore in this one) holds the database open.
class NodeStoreInUse : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class NodeStore {
 public:
  using IdentitySeed = std::array<uint8_t, 32>;

  // Opens <data_dir>/db, creating the directories, the database and the column families if needed.
  explicit NodeStore(const std::string& data_dir);
  ~NodeStore();
  NodeStore(const NodeStore&) = delete;
  NodeStore& operator=(const NodeStore&) = delete;

  // The database directory (<data_dir>/db).
  const std::string& path() const { return path_; }

  // --- identity -----------------------------------------------------------------------------------------------
  // The secret seed of the node's Ed25519 key (its identity, and through the public key its DHT id): drawn
  // from OpenSSL's generator the first time it is asked for in a database (written with a synced write), read
  // back ever after.
  IdentitySeed identity_seed();

  // --- throughput ---------------------------------------------------------------------------------------------
  void put_throughput(const std::string& key, double value);
  // nullopt when absent (or not an 8-byte little-endian double).
  std::optional<double> throughput(const std::string& key) const;

  // --- reputation ---------------------------------------------------------------------------------------------
  void put_reputation(const std::string& peer_id, const PeerReputation& r);
  // nullopt when absent or unreadable (another layout version).
  std::optional<PeerReputation> reputation(const std::string& peer_id) const;
  void erase_reputation(const std::string& peer_id);
  // Every readable entry, in peer id order.
  void for_each_reputation(const std::function<void(const std::string& peer_id, const PeerReputation&)>& fn) const;

  // --- raw access (the weights cache, tools, tests) -----------------------------------------------------------
  rocksdb::DB& db() { return *db_; }
  rocksdb::ColumnFamilyHandle* family(StoreFamily f) const;
  // Reads one value into `out`; false when absent.
  bool get_raw(StoreFamily f, std::string_view key, std::string& out) const;
  void put_raw(StoreFamily f, std::string_view key, std::string_view value, bool sync = false);
  void erase_raw(StoreFamily f, std::string_view key);

 private:
  [[noreturn]] void fail(const std::string& what, const std::string& status) const;

  std::string path_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;  // every family opened, ours first in StoreFamily order
  std::mutex identity_mutex_;
  std::optional<IdentitySeed> identity_seed_;
};

// The column family name of `f` ("weights", "identity", "reputation", "throughput").
std::string_view family_name(StoreFamily f);

// The store at data_dir; when another process holds it and `may_use_another` (the directory is a default, not one
// the user named), the first free one of data_dir-2 .. data_dir-64 instead, named on stderr: two nodes started on
// one machine without names each get their own database (and identity) rather than one refusing to start.
std::unique_ptr<NodeStore> open_node_store(const std::string& data_dir, bool may_use_another);

}  // namespace corolla
