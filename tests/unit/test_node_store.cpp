// The node store (RocksDB with one column family per concern) and the converted-weights cache built on it.
#define BOOST_TEST_MODULE node_store
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "actors/store/byte_order.hpp"
#include "actors/store/node_store.hpp"
#include "actors/store/weights_cache.hpp"
#include "actors/store/weights_record.hpp"
#include "actors/store/xxhash64.hpp"
#include "support/expect_error.hpp"
#include "support/golden.hpp"
#include "support/temp_dir.hpp"

using namespace corolla;
using namespace corolla::test;
namespace fs = std::filesystem;

namespace {

Backend& cpu() {
  static auto b = make_cpu_backend(1);
  return *b;
}

// The block's output for a few tokens from fixed random hidden states, with a KV cache.
std::vector<float> run_block(Block& block, const ModelConfig& c) {
  const int64_t tokens = 5;
  Tensor hidden = Tensor::empty(DType::f32, {1, tokens, c.hidden_size});
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < hidden.numel(); ++i) hidden.data_as<float>()[i] = normal(rng);
  std::vector<int32_t> positions(tokens);
  std::iota(positions.begin(), positions.end(), 0);
  KVCache cache = block.make_cache(1, 8);
  block.forward(hidden, positions, &cache);
  return std::vector<float>(hidden.data_as<float>(), hidden.data_as<float>() + hidden.numel());
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

// --- checksum ------------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(xxhash64_known_answers) {
  using store::xxhash64;
  auto xxh = [](std::string_view s, uint64_t seed) { return xxhash64(s.data(), s.size(), seed); };
  // Published XXH64 values (seed 0) and values from the reference implementation.
  BOOST_TEST(xxh("", 0) == 0xEF46DB3751D8E999ull);
  BOOST_TEST(xxh("a", 0) == 0xD24EC4F1A98C6E5Bull);
  BOOST_TEST(xxh("abc", 0) == 0x44BC2CF5AD770999ull);
  BOOST_TEST(xxh("abc", 1) == 0xBEA9CA8199328908ull);
  BOOST_TEST(xxh("Nobody inspects the spammish repetition", 0) == 0xFBCEA83C8A378BF1ull);
  std::string pattern(1000, '\0');
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<char>((i * 31 + 7) & 0xff);
  const std::pair<size_t, uint64_t> by_length[] = {{1, 0xA96C7F0CE858BBB7ull},   {4, 0xC60D15B1E3FF8F04ull},
                                                   {7, 0xAFBEFC3D6C6F9A8Eull},   {8, 0x3DA5C7AA269683E0ull},
                                                   {31, 0x4A74F3A1A39AD4A1ull},  {32, 0x8D57D6A4671CC43Dull},
                                                   {33, 0x62C9FD21ED857664ull},  {64, 0x7BBABBC45729D17Eull},
                                                   {100, 0xEFA0AD2D3E70C151ull}, {1000, 0x99594F4828043D35ull}};
  for (auto [n, want] : by_length) BOOST_TEST(xxhash64(pattern.data(), n, 0) == want, "length " << n);
  BOOST_TEST(xxhash64(pattern.data(), 1000, 0x9E3779B97F4A7C15ull) == 0xDA717F741F399F3Full);
  // In pieces: any split gives the one-shot value.
  for (size_t split1 : {0, 1, 5, 31, 32, 33, 200})
    for (size_t split2 : {0, 3, 32, 64, 500}) {
      store::XxHash64 h(7);
      const size_t a = split1, b = std::min(pattern.size(), split1 + split2);
      h.update(pattern.data(), a);
      h.update(pattern.data() + a, b - a);
      h.update(pattern.data() + b, pattern.size() - b);
      BOOST_TEST(h.digest() == xxhash64(pattern.data(), pattern.size(), 7), split1 << "+" << split2);
    }
}

// --- the database ----------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(identity_key_persists_across_reopen) {
  TempDir d, other;
  NodeStore::IdentitySeed first;
  {
    NodeStore s(d.str());
    BOOST_TEST(fs::exists(d.path / "db"));
    first = s.identity_seed();
    BOOST_TEST((s.identity_seed() == first));
    BOOST_TEST((first != NodeStore::IdentitySeed{}));
  }
  {
    NodeStore s(d.str());
    BOOST_TEST((s.identity_seed() == first));
  }
  NodeStore s2(other.str());
  BOOST_TEST((s2.identity_seed() != first));
}

BOOST_AUTO_TEST_CASE(throughput_and_reputation_round_trip) {
  TempDir d;
  const PeerReputation alice{12, 3, 41.25, 1'700'000'000'123, 2};
  const PeerReputation bob{1, 0, 0.5, 0};
  {
    NodeStore s(d.str());
    BOOST_TEST(!s.throughput("llama/cpu/f32").has_value());
    s.put_throughput("llama/cpu/f32", 1234.5);
    s.put_throughput("llama/cuda/bf16", 1e-3);
    BOOST_TEST(!s.reputation("alice").has_value());
    s.put_reputation("bob", bob);
    s.put_reputation("alice", alice);
    s.put_reputation("carol", {});
    s.erase_reputation("carol");
  }
  NodeStore s(d.str());
  BOOST_TEST(*s.throughput("llama/cpu/f32") == 1234.5);
  BOOST_TEST(*s.throughput("llama/cuda/bf16") == 1e-3);
  BOOST_TEST((*s.reputation("alice") == alice));
  std::vector<std::pair<std::string, PeerReputation>> all;
  s.for_each_reputation([&](const std::string& peer, const PeerReputation& r) { all.emplace_back(peer, r); });
  BOOST_REQUIRE(all.size() == 2u);
  BOOST_TEST(all[0].first == "alice");
  BOOST_TEST((all[0].second == alice));
  BOOST_TEST(all[1].first == "bob");
  BOOST_TEST((all[1].second == bob));
}

BOOST_AUTO_TEST_CASE(reputation_layout_is_fixed_little_endian) {
  const std::string bytes = encode_reputation({0x0102, 7, 1.0, -2, 3});
  BOOST_REQUIRE(bytes.size() == kReputationRecordSize);
  const unsigned char want[37] = {2,                                               // layout version
                                  0x02, 0x01, 0,    0,    0,    0,    0,    0,     // successes
                                  7,    0,    0,    0,    0,    0,    0,    0,     // failures
                                  0,    0,    0,    0,    0,    0,    0xf0, 0x3f,  // 1.0
                                  0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,  // -2
                                  3,    0,    0,    0};                            // consecutive failures
  BOOST_TEST(std::memcmp(bytes.data(), want, sizeof want) == 0);
  BOOST_TEST(!decode_reputation(bytes.substr(1)).has_value());
  std::string other_version = bytes;
  other_version[0] = 3;
  BOOST_TEST(!decode_reputation(other_version).has_value());
  // A v1 record (no consecutive-failure count) still reads.
  std::string v1 = bytes.substr(0, 33);
  v1[0] = 1;
  const auto old = decode_reputation(v1);
  BOOST_REQUIRE(old.has_value());
  BOOST_TEST(old->failures == 7u);
  BOOST_TEST(old->consecutive_failures == 0u);
}

BOOST_AUTO_TEST_CASE(a_database_in_use_gives_a_clear_error) {
  TempDir d;
  {
    NodeStore s(d.str());
    expect_error([&] { NodeStore again(d.str()); }, {(d.path / "db").string(), "lock", "another"});
  }
  NodeStore reopened(d.str());  // free again once closed
  reopened.identity_seed();
}

// A default data directory that another node holds gives way to the next free one (each with its own identity); a
// directory the user named does not.
BOOST_AUTO_TEST_CASE(a_default_directory_in_use_gives_way_to_the_next_free_one) {
  TempDir d;
  const std::string dir = (d.path / "node-default").string();
  auto first = open_node_store(dir, true);
  auto second = open_node_store(dir, true);
  auto third = open_node_store(dir, true);
  BOOST_TEST(first->path() == dir + "/db");
  BOOST_TEST(second->path() == dir + "-2/db");
  BOOST_TEST(third->path() == dir + "-3/db");
  BOOST_TEST(first->identity_seed() != second->identity_seed());
  BOOST_CHECK_THROW(open_node_store(dir, false), NodeStoreInUse);
  second.reset();
  BOOST_TEST(open_node_store(dir, true)->path() == dir + "-2/db");  // the first free one again
}

BOOST_AUTO_TEST_CASE(a_database_held_by_another_process_gives_a_clear_error) {
  TempDir d;
  int ready[2], done[2];
  BOOST_REQUIRE(::pipe(ready) == 0 && ::pipe(done) == 0);
  const pid_t child = ::fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0) {  // holds the database until the parent closes its end of `done`
    ::close(ready[0]);
    ::close(done[1]);
    std::unique_ptr<NodeStore> s;
    try {
      s = std::make_unique<NodeStore>(d.str());
    } catch (...) {
    }
    char c = s ? 1 : 0;
    if (::write(ready[1], &c, 1) != 1 || c == 0) ::_exit(1);
    if (::read(done[0], &c, 1) < 0) ::_exit(1);
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(done[0]);
  char c = 0;
  BOOST_REQUIRE(::read(ready[0], &c, 1) == 1);
  BOOST_REQUIRE(c == 1);
  expect_error([&] { NodeStore s(d.str()); }, {(d.path / "db").string(), "lock", "another process"});
  ::close(done[1]);
  int status = 0;
  ::waitpid(child, &status, 0);
  BOOST_TEST(WIFEXITED(status));
  ::close(ready[0]);
  NodeStore s(d.str());  // released with the process
}

BOOST_AUTO_TEST_CASE(unusable_paths_and_damaged_databases_are_named) {
  TempDir d;
  std::ofstream(d.path / "file") << "x";
  expect_error([&] { NodeStore s((d.path / "file").string()); }, {(d.path / "file" / "db").string(), "create"});
  { NodeStore s((d.path / "node").string()); }
  const fs::path db = d.path / "node" / "db";
  for (const auto& entry : fs::directory_iterator(db))  // garbage in the manifest
    if (entry.path().filename().string().starts_with("MANIFEST-"))
      std::ofstream(entry.path(), std::ios::trunc) << std::string(200, '\x5a');
  expect_error([&] { NodeStore s((d.path / "node").string()); }, {db.string(), "Corruption", "damaged"});
  std::ofstream(db / "CURRENT", std::ios::trunc) << "MANIFEST-999999\n";  // a missing manifest
  expect_error([&] { NodeStore s((d.path / "node").string()); }, {db.string(), "MANIFEST-999999"});
}

// --- weights record --------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(record_round_trip_and_alignment) {
  Tensor a = Tensor::empty(DType::f32, {3, 5});
  for (int i = 0; i < 15; ++i) a.data_as<float>()[i] = static_cast<float>(i) * 0.5f;
  Tensor b = Tensor::empty(DType::q4_1, {2, 32});
  for (int64_t i = 0; i < b.nbytes(); ++i) static_cast<uint8_t*>(b.data())[i] = static_cast<uint8_t>(i * 7);
  Tensor c = Tensor::empty(DType::bf16, {7});
  const auto rec = encode_weights_record({{"a", a}, {"b", b}, {"c", c}});
  auto buffer = std::make_shared<std::string>(flatten(rec));
  BOOST_TEST(buffer->size() == rec.size);
  BOOST_TEST(buffer->substr(0, 8) == std::string("CWTS\x01\0\0\0", 8));  // magic, format version 1
  BOOST_TEST(store::get_le<uint64_t>(buffer->data() + 8) == rec.size);
  BOOST_TEST(store::get_le<uint32_t>(buffer->data() + 16) == 3u);  // tensors
  BOOST_TEST(store::get_le<uint64_t>(buffer->data() + rec.size - 8) ==
             store::xxhash64(buffer->data(), rec.size - 8, 0));
  const auto tensors = decode_weights_record(buffer);
  BOOST_REQUIRE(tensors.size() == 3u);
  for (const auto& [name, t] : std::map<std::string, Tensor>{{"a", a}, {"b", b}, {"c", c}}) {
    const Tensor& got = tensors.at(name);
    BOOST_TEST((got.shape() == t.shape()));
    BOOST_TEST((got.dtype() == t.dtype()));
    BOOST_TEST(std::memcmp(got.data(), t.data(), static_cast<size_t>(t.nbytes())) == 0);
    BOOST_TEST((static_cast<const char*>(got.data()) - buffer->data()) % 64 == 0);
    BOOST_TEST(got.owner().get() == static_cast<const void*>(buffer.get()));  // a view: no copy
  }
  // Every damage is reported, never decoded.
  auto damaged = [&](auto edit) {
    auto copy = std::make_shared<std::string>(*buffer);
    edit(*copy);
    return copy;
  };
  BOOST_CHECK_THROW(decode_weights_record(damaged([](std::string& s) { s[200] ^= 0x10; })), WeightsRecordError);
  expect_error([&] { decode_weights_record(damaged([](std::string& s) { s[s.size() / 2] ^= 1; })); }, {"checksum"});
  expect_error([&] { decode_weights_record(damaged([](std::string& s) { s.resize(s.size() - 64); })); }, {"truncated"});
  expect_error([&] { decode_weights_record(damaged([](std::string& s) { s[4] = 9; })); }, {"format version 9"});
  expect_error([&] { decode_weights_record(damaged([](std::string& s) { s.resize(10); })); }, {"truncated"});
  expect_error([&] { decode_weights_record(damaged([](std::string& s) { s[0] = 'X'; })); }, {"magic"});
}

// --- weights cache ---------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(miss_then_hit_gives_the_same_block) {
  TempDir d;
  for (const std::string& path : {model_dir("llama") + "/model-q4_1.gguf", model_dir("llama")}) {
    auto src = open_weights(path);
    const auto reference = run_block(*load_block(*src, 2, cpu(), {DType::f32}), src->config());
    for (std::optional<DType> dtype : {std::optional<DType>(DType::f32), std::optional<DType>()}) {
      const auto expected = run_block(*load_block(*src, 2, cpu(), {dtype}), src->config());
      LoadReport report;
      {
        NodeStore store(d.str());
        auto block = load_block_cached(&store, *src, 2, cpu(), {dtype}, &report);
        BOOST_TEST(outcome_name(report.outcome) == "miss", path);
        BOOST_TEST(report.cache_bytes > 0u);
        BOOST_TEST(report.problem.empty(), report.problem);
        BOOST_TEST(same_bits(run_block(*block, src->config()), expected), path);
        block = load_block_cached(&store, *src, 2, cpu(), {dtype}, &report);
        BOOST_TEST(outcome_name(report.outcome) == "hit", path);
        BOOST_TEST(same_bits(run_block(*block, src->config()), expected), path);
      }
      // After a restart (the block outliving the store: its weights keep the buffer they were read into).
      std::unique_ptr<Block> block;
      {
        NodeStore store(d.str());
        block = load_block_cached(&store, *src, 2, cpu(), {dtype}, &report);
        BOOST_TEST(outcome_name(report.outcome) == "hit", path);
        BOOST_TEST(report.seconds >= report.cache_seconds);
      }
      BOOST_TEST(same_bits(run_block(*block, src->config()), expected), path);
      if (dtype) BOOST_TEST(same_bits(expected, reference));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_hit_does_not_convert_or_read_the_source) {
  TempDir d;
  NodeStore store(d.str());
  auto src = open_weights(model_dir("llama") + "/model-q4_1.gguf");
  load_block_cached(&store, *src, 1, cpu(), {DType::f32});
  auto fresh = open_weights(model_dir("llama") + "/model-q4_1.gguf");
  LoadReport report;
  auto block = load_block_cached(&store, *fresh, 1, cpu(), {DType::f32}, &report);
  BOOST_TEST(outcome_name(report.outcome) == "hit");
  BOOST_TEST(fresh->bytes_requested() == 0u);  // digest from metadata only, weights from the cache
  for (const auto& [name, t] : block->named_weights()) BOOST_TEST((t.dtype() == DType::f32), name);
  // The block's weights are views into one buffer (the record read from the store).
  const auto weights = block->named_weights();
  for (const auto& [name, t] : weights) BOOST_TEST(t.owner() == weights.front().second.owner(), name);
}

BOOST_AUTO_TEST_CASE(the_serving_dtype_is_part_of_the_key) {
  TempDir d;
  NodeStore store(d.str());
  auto src = open_weights(model_dir("llama") + "/model-q4_1.gguf");
  LoadReport report;
  load_block_cached(&store, *src, 0, cpu(), {DType::f32}, &report);
  BOOST_TEST(outcome_name(report.outcome) == "miss");
  load_block_cached(&store, *src, 0, cpu(), {DType::bf16}, &report);
  BOOST_TEST(outcome_name(report.outcome) == "miss");
  auto f32 = load_block_cached(&store, *src, 0, cpu(), {DType::f32}, &report);
  BOOST_TEST(outcome_name(report.outcome) == "hit");
  auto bf16 = load_block_cached(&store, *src, 0, cpu(), {DType::bf16}, &report);
  BOOST_TEST(outcome_name(report.outcome) == "hit");
  const std::string wq = block_tensor_name(0, "self_attn.q_proj.weight");
  for (const auto& [name, t] : f32->named_weights())
    if (name == wq) BOOST_TEST((t.dtype() == DType::f32));
  for (const auto& [name, t] : bf16->named_weights())
    if (name == wq) BOOST_TEST((t.dtype() == DType::bf16));
  // Other blocks are other entries.
  load_block_cached(&store, *src, 1, cpu(), {DType::f32}, &report);
  BOOST_TEST(outcome_name(report.outcome) == "miss");
}

BOOST_AUTO_TEST_CASE(a_corrupted_entry_is_reported_deleted_and_rebuilt) {
  TempDir d;
  NodeStore store(d.str());
  auto src = open_weights(model_dir("llama") + "/model-q4_1.gguf");
  const auto expected = run_block(*load_block(*src, 3, cpu(), {DType::f32}), src->config());
  load_block_cached(&store, *src, 3, cpu(), {DType::f32});
  const WeightsKey key{model_digest(*src), 3, "f32"};

  // Flip one byte inside the stored value (in a tensor's data) through the raw RocksDB handle.
  std::string value;
  BOOST_REQUIRE(store.get_raw(StoreFamily::weights, key.str(), value));
  value[value.size() / 2] ^= 0x01;
  store.put_raw(StoreFamily::weights, key.str(), value);

  std::vector<std::string> warnings;
  WeightsCache cache(store, [&](const std::string& w) { warnings.push_back(w); });
  const auto lookup = cache.get(key);
  BOOST_TEST((lookup.status == WeightsCache::Status::corrupt));
  BOOST_TEST(lookup.tensors.empty());
  BOOST_TEST(lookup.problem.find("checksum mismatch") != std::string::npos, lookup.problem);
  BOOST_TEST(lookup.problem.find(key.str()) != std::string::npos, lookup.problem);
  BOOST_REQUIRE(warnings.size() == 1u);
  BOOST_TEST(!store.get_raw(StoreFamily::weights, key.str(), value));  // deleted
  BOOST_TEST((cache.get(key).status == WeightsCache::Status::miss));

  // Through load_block_cached: rebuilt (never served), then a hit again.
  load_block_cached(&store, *src, 3, cpu(), {DType::f32});
  BOOST_REQUIRE(store.get_raw(StoreFamily::weights, key.str(), value));
  value.resize(value.size() - 100);  // truncated
  store.put_raw(StoreFamily::weights, key.str(), value);
  LoadReport report;
  auto block = load_block_cached(&store, *src, 3, cpu(), {DType::f32}, &report);
  BOOST_TEST(outcome_name(report.outcome) == "rebuilt");
  BOOST_TEST(report.problem.find("truncated") != std::string::npos, report.problem);
  BOOST_TEST(same_bits(run_block(*block, src->config()), expected));
  block = load_block_cached(&store, *src, 3, cpu(), {DType::f32}, &report);
  BOOST_TEST(outcome_name(report.outcome) == "hit");
  BOOST_TEST(same_bits(run_block(*block, src->config()), expected));

  // An unknown format version (a record from a later build) is not served either.
  BOOST_REQUIRE(store.get_raw(StoreFamily::weights, key.str(), value));
  value[4] = 2;
  store.put_raw(StoreFamily::weights, key.str(), value);
  block = load_block_cached(&store, *src, 3, cpu(), {DType::f32}, &report);
  BOOST_TEST(outcome_name(report.outcome) == "rebuilt");
  BOOST_TEST(report.problem.find("format version 2") != std::string::npos, report.problem);
}

BOOST_AUTO_TEST_CASE(a_changed_model_file_changes_the_digest) {
  TempDir d;
  const fs::path copy = d.path / "model.gguf";
  fs::copy_file(model_dir("llama") + "/model-q4_1.gguf", copy);
  const std::string before = model_digest(*open_weights(copy.string()));
  BOOST_TEST(before.size() == 32u);
  BOOST_TEST(model_digest(*open_weights(copy.string())) == before);  // stable

  // Touched (same bytes, new modification time).
  fs::last_write_time(copy, fs::last_write_time(copy) + std::chrono::seconds(5));
  const std::string touched = model_digest(*open_weights(copy.string()));
  BOOST_TEST(touched != before);

  // Altered in place (one byte of tensor data, same size): writing moves the modification time.
  {
    std::fstream f(copy, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-10, std::ios::end);
    f.put('\x55');
  }
  BOOST_TEST(model_digest(*open_weights(copy.string())) != touched);

  // A different file (another quantization of the same model) is another model.
  BOOST_TEST(model_digest(*open_weights(model_dir("llama") + "/model-q8_0.gguf")) !=
             model_digest(*open_weights(model_dir("llama") + "/model-q4_1.gguf")));

  // Safetensors: every shard counts.
  auto sharded = open_weights(model_dir("llama-sharded"));
  BOOST_TEST(sharded->files().size() == 5u);  // config, index, three shards
  TempDir m;
  for (const auto& entry : fs::directory_iterator(model_dir("llama-sharded")))
    fs::copy_file(entry.path(), m.path / entry.path().filename());
  const std::string s_before = model_digest(*open_weights(m.str()));
  const fs::path shard = m.path / "model-00002-of-00003.safetensors";
  fs::last_write_time(shard, fs::last_write_time(shard) + std::chrono::seconds(5));
  BOOST_TEST(model_digest(*open_weights(m.str())) != s_before);

  // And the cache misses for the changed model.
  TempDir db;
  NodeStore store(db.str());
  LoadReport report;
  load_block_cached(&store, *open_weights(copy.string()), 0, cpu(), {DType::f32}, &report);
  BOOST_TEST(outcome_name(report.outcome) == "miss");
  load_block_cached(&store, *open_weights(copy.string()), 0, cpu(), {DType::f32}, &report);
  BOOST_TEST(outcome_name(report.outcome) == "hit");
  fs::last_write_time(copy, fs::last_write_time(copy) + std::chrono::seconds(5));
  load_block_cached(&store, *open_weights(copy.string()), 0, cpu(), {DType::f32}, &report);
  BOOST_TEST(outcome_name(report.outcome) == "miss");
}

BOOST_AUTO_TEST_CASE(without_a_store_blocks_load_from_the_source) {
  auto src = open_weights(model_dir("llama"));
  LoadReport report;
  auto block = load_block_cached(nullptr, *src, 0, cpu(), {}, &report);
  BOOST_TEST(outcome_name(report.outcome) == "uncached");
  BOOST_TEST(block->index() == 0);
}
