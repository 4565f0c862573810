#include "actors/store/node_store.hpp"

#include <openssl/rand.h>

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <random>
#include <stdexcept>
#include <system_error>

#include "actors/store/byte_order.hpp"

namespace corolla {
namespace fs = std::filesystem;

namespace {

constexpr StoreFamily kFamilies[] = {StoreFamily::weights, StoreFamily::identity, StoreFamily::reputation,
                                     StoreFamily::throughput};
constexpr std::string_view kIdentitySeedName = "ed25519_seed";

rocksdb::Slice slice(std::string_view s) { return {s.data(), s.size()}; }

rocksdb::DBOptions db_options() {
  rocksdb::DBOptions o;
  o.create_if_missing = true;
  o.create_missing_column_families = true;
  o.max_background_jobs = 2;  // nodes share few cores
  o.keep_log_file_num = 3;
  o.max_log_file_size = 4 << 20;
  o.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  return o;
}

// Converted block weights: values of megabytes to gigabytes, written once per (model, block, dtype), read at
// start-up. They go to blob files (the LSM tree holds only keys and blob references, so compactions never rewrite
// them); neither SSTs nor blobs are compressed (weights do not compress, and the checksum inside each record
// covers integrity). Reads need no block cache: each value is read once at load time.
rocksdb::ColumnFamilyOptions weights_options() {
  rocksdb::ColumnFamilyOptions o;
  o.compression = rocksdb::kNoCompression;
  o.enable_blob_files = true;
  o.min_blob_size = 4096;
  o.blob_file_size = 256ull << 20;
  o.blob_compression_type = rocksdb::kNoCompression;
  o.enable_blob_garbage_collection = true;  // reclaim rebuilt or erased entries during compactions
  o.write_buffer_size = 64ull << 20;        // a few blocks per memtable before a background flush
  o.max_write_buffer_number = 3;
  return o;
}

rocksdb::ColumnFamilyOptions small_options() {
  rocksdb::ColumnFamilyOptions o;
  o.OptimizeForSmallDb();
  return o;
}

}  // namespace

std::string_view family_name(StoreFamily f) {
  switch (f) {
    case StoreFamily::weights: return "weights";
    case StoreFamily::identity: return "identity";
    case StoreFamily::reputation: return "reputation";
    case StoreFamily::throughput: return "throughput";
  }
  return "?";
}

NodeStore::NodeStore(const std::string& data_dir) : path_((fs::path(data_dir) / "db").string()) {
  std::error_code ec;
  fs::create_directories(path_, ec);
  if (ec) throw std::runtime_error("node database " + path_ + ": cannot create the directory: " + ec.message());

  const rocksdb::DBOptions options = db_options();
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  families.emplace_back(rocksdb::kDefaultColumnFamilyName, small_options());
  for (StoreFamily f : kFamilies)
    families.emplace_back(std::string(family_name(f)), f == StoreFamily::weights ? weights_options() : small_options());
  // A database written by a later version may hold families this one does not know: RocksDB requires opening
  // them all. (Listing fails when the database does not exist yet; then there is nothing more to open.)
  std::vector<std::string> existing;
  if (rocksdb::DB::ListColumnFamilies(options, path_, &existing).ok())
    for (const auto& name : existing)
      if (std::none_of(families.begin(), families.end(), [&](const auto& d) { return d.name == name; }))
        families.emplace_back(name, small_options());

  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(options, path_, families, &handles_, &raw);
  if (!s.ok()) {
    std::string hint;
    if (s.IsIOError() && s.ToString().find("lock") != std::string::npos)
      throw NodeStoreInUse("node database " + path_ + ": cannot open: " + s.ToString() +
                           " (is another process, or another NodeStore in this one, using this data directory?)");
    if (s.IsCorruption()) hint = " (the database is damaged; move it aside to start afresh)";
    throw std::runtime_error("node database " + path_ + ": cannot open: " + s.ToString() + hint);
  }
  db_.reset(raw);
}

std::unique_ptr<NodeStore> open_node_store(const std::string& data_dir, bool may_use_another) {
  constexpr int kTries = 64;
  for (int i = 1;; ++i) {
    const std::string dir = i == 1 ? data_dir : data_dir + "-" + std::to_string(i);
    try {
      auto store = std::make_unique<NodeStore>(dir);
      if (i > 1) std::cerr << "data directory " << data_dir << " is in use by another node; using " << dir << "\n";
      return store;
    } catch (const NodeStoreInUse&) {
      if (!may_use_another || i == kTries) throw;
    }
  }
}

NodeStore::~NodeStore() {
  if (!db_) return;
  for (auto* h : handles_) db_->DestroyColumnFamilyHandle(h);
  handles_.clear();
  db_->Close();  // flushes memtables written without a WAL (the weights)
}

void NodeStore::fail(const std::string& what, const std::string& status) const {
  throw std::runtime_error("node database " + path_ + ": " + what + ": " + status);
}

rocksdb::ColumnFamilyHandle* NodeStore::family(StoreFamily f) const {
  return handles_[1 + static_cast<size_t>(f)];  // handles_[0] is the default family
}

bool NodeStore::get_raw(StoreFamily f, std::string_view key, std::string& out) const {
  const rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), family(f), slice(key), &out);
  if (s.IsNotFound()) return false;
  if (!s.ok()) fail("cannot read " + std::string(family_name(f)) + "/" + std::string(key), s.ToString());
  return true;
}

void NodeStore::put_raw(StoreFamily f, std::string_view key, std::string_view value, bool sync) {
  rocksdb::WriteOptions w;
  w.sync = sync;
  const rocksdb::Status s = db_->Put(w, family(f), slice(key), slice(value));
  if (!s.ok()) fail("cannot write " + std::string(family_name(f)) + "/" + std::string(key), s.ToString());
}

void NodeStore::erase_raw(StoreFamily f, std::string_view key) {
  const rocksdb::Status s = db_->Delete(rocksdb::WriteOptions(), family(f), slice(key));
  if (!s.ok()) fail("cannot delete " + std::string(family_name(f)) + "/" + std::string(key), s.ToString());
}

NodeStore::IdentitySeed NodeStore::identity_seed() {
  std::lock_guard lock(identity_mutex_);
  if (identity_seed_) return *identity_seed_;
  IdentitySeed seed;
  std::string stored;
  if (get_raw(StoreFamily::identity, kIdentitySeedName, stored)) {
    if (stored.size() != seed.size())
      fail("identity/" + std::string(kIdentitySeedName), "holds " + std::to_string(stored.size()) + " bytes, not " +
                                                             std::to_string(seed.size()) +
                                                             " (move the database aside to start afresh)");
    std::copy(stored.begin(), stored.end(), seed.begin());
  } else {
    if (RAND_bytes(seed.data(), static_cast<int>(seed.size())) != 1)
      fail("identity/" + std::string(kIdentitySeedName), "OpenSSL's random generator failed");
    put_raw(StoreFamily::identity, kIdentitySeedName,
            std::string_view(reinterpret_cast<const char*>(seed.data()), seed.size()), /*sync=*/true);
  }
  identity_seed_ = seed;
  return seed;
}

void NodeStore::put_throughput(const std::string& key, double value) {
  std::string bytes;
  store::put_le_double(bytes, value);
  put_raw(StoreFamily::throughput, key, bytes);
}

std::optional<double> NodeStore::throughput(const std::string& key) const {
  std::string bytes;
  if (!get_raw(StoreFamily::throughput, key, bytes) || bytes.size() != 8) return std::nullopt;
  return store::get_le_double(bytes.data());
}

void NodeStore::put_reputation(const std::string& peer_id, const PeerReputation& r) {
  put_raw(StoreFamily::reputation, peer_id, encode_reputation(r));
}

std::optional<PeerReputation> NodeStore::reputation(const std::string& peer_id) const {
  std::string bytes;
  if (!get_raw(StoreFamily::reputation, peer_id, bytes)) return std::nullopt;
  return decode_reputation(bytes);
}

void NodeStore::erase_reputation(const std::string& peer_id) { erase_raw(StoreFamily::reputation, peer_id); }

void NodeStore::for_each_reputation(
    const std::function<void(const std::string& peer_id, const PeerReputation&)>& fn) const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), family(StoreFamily::reputation)));
  for (it->SeekToFirst(); it->Valid(); it->Next())
    if (auto r = decode_reputation(std::string_view(it->value().data(), it->value().size())))
      fn(it->key().ToString(), *r);
  if (!it->status().ok()) fail("cannot iterate over reputation", it->status().ToString());
}

}  // namespace corolla
