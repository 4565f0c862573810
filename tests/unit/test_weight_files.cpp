// Weight files: loading only what is asked for, clear errors (file and tensor named) for bad files, and where the
// CPU backend places what it loads.
#define BOOST_TEST_MODULE weight_files
#include <sys/resource.h>

#include <boost/test/unit_test.hpp>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/cpu/weight_placement.hpp"
#include "model/block.hpp"
#include "model/client_head.hpp"
#include "model/lora.hpp"
#include "model/weights/gguf_file.hpp"
#include "model/weights/load_weight.hpp"
#include "model/weights/safetensors_file.hpp"
#include "support/address_space_limit.hpp"
#include "support/expect_error.hpp"
#include "support/gguf_bytes.hpp"
#include "support/golden.hpp"
#include "support/temp_dir.hpp"

using namespace corolla;
using namespace corolla::test;
namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

Backend& cpu() {
  static auto b = make_cpu_backend(1);
  return *b;
}

int64_t block_bytes_in(const WeightSource& src, int64_t block) {
  int64_t n = 0;
  for (const auto& name : src.names())
    if (name.rfind(block_tensor_name(block, ""), 0) == 0) n += src.get(name).nbytes();
  return n;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_server_reads_only_its_blocks) {
  for (std::string path : {model_dir("llama"), model_dir("llama-sharded"), model_dir("llama") + "/model-q8_0.gguf"}) {
    auto probe = open_weights(path);
    const int64_t expected = block_bytes_in(*probe, 1) + block_bytes_in(*probe, 2);
    auto src = open_weights(path);
    auto b1 = load_block(*src, 1, cpu());
    auto b2 = load_block(*src, 2, cpu());
    BOOST_TEST(src->bytes_requested() == static_cast<uint64_t>(expected), path);
    BOOST_TEST(expected > 0);
  }
}

// Converting weights on loading (--dtype) to a dtype whose blocks the rows cannot fill is refused by tensor name.
BOOST_AUTO_TEST_CASE(a_dtype_the_rows_cannot_fill_is_refused_by_name) {
  auto src = open_weights(model_dir("llama") + "/model-f32.gguf");  // rows of 64 values
  expect_error([&] { load_block(*src, 0, cpu(), {DType::q4_K}); },
               {"model-f32.gguf", "rows of 64 values", "q4_K blocks of 256", "--dtype"});
  BOOST_CHECK_NO_THROW(load_block(*src, 0, cpu(), {DType::q5_0}));
}

BOOST_AUTO_TEST_CASE(missing_paths_are_named) {
  expect_error([] { open_weights("/nonexistent/model"); }, {"/nonexistent/model"});
  TempDir d;
  expect_error([&] { open_weights(d.path.string()); }, {"config.json"});
}

BOOST_AUTO_TEST_CASE(truncated_safetensors_is_reported) {
  TempDir d;
  fs::copy_file(model_dir("llama") + "/config.json", d.path / "config.json");
  const std::string bytes = read_file(model_dir("llama") + "/model.safetensors");
  write_file(d.path / "model.safetensors", bytes.substr(0, bytes.size() / 2));
  expect_error([&] { open_weights(d.path.string()); }, {"model.safetensors", "truncated"});
  write_file(d.path / "model.safetensors", bytes.substr(0, 4));
  expect_error([&] { open_weights(d.path.string()); }, {"model.safetensors", "no header"});
  std::string corrupt = bytes;
  corrupt[10] = '\x01';
  write_file(d.path / "model.safetensors", corrupt);
  expect_error([&] { open_weights(d.path.string()); }, {"model.safetensors", "JSON"});
}

BOOST_AUTO_TEST_CASE(wrong_shapes_and_missing_tensors_name_the_tensor) {
  TempDir d;
  auto src = open_weights(model_dir("llama"));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& name : src->names()) {
    Tensor t = src->get(name);
    if (name == "model.layers.1.mlp.up_proj.weight") t = t.reshaped({t.dim(1), t.dim(0)});
    if (name == "model.layers.2.self_attn.k_proj.weight") continue;
    tensors.emplace_back(name, t);
  }
  fs::copy_file(model_dir("llama") + "/config.json", d.path / "config.json");
  write_safetensors((d.path / "model.safetensors").string(), tensors);
  auto bad = open_weights(d.path.string());
  expect_error([&] { load_block(*bad, 1, cpu()); }, {"model.layers.1.mlp.up_proj.weight", "shape"});
  expect_error([&] { load_block(*bad, 2, cpu()); }, {"model.layers.2.self_attn.k_proj.weight", "missing"});
  expect_error([&] { load_block(*bad, 9, cpu()); }, {"block 9", "4 blocks"});
  load_block(*bad, 0, cpu());  // the intact blocks still load
}

BOOST_AUTO_TEST_CASE(unsupported_architecture_is_named) {
  TempDir d;
  std::string config = read_file(model_dir("llama") + "/config.json");
  config.replace(config.find("\"llama\""), 7, "\"gpt2\"");
  write_file(d.path / "config.json", config);
  fs::copy_file(model_dir("llama") + "/model.safetensors", d.path / "model.safetensors");
  expect_error([&] { open_weights(d.path.string()); }, {"config.json", "unsupported architecture 'gpt2'"});
  // A GGUF file of an architecture Corolla has no block for is refused by name, before any tensor is looked for.
  for (const char* arch : {"gpt2", "starcoder2"}) {
    GgufBuilder g;
    g.str("general.architecture", arch).u32(std::string(arch) + ".block_count", 1);
    write_file(d.path / "m.gguf", g.bytes());
    expect_error([&] { open_weights((d.path / "m.gguf").string()); },
                 {"m.gguf", "unsupported architecture '" + std::string(arch) + "'", "GGUF", "phi3, qwen2, qwen3"});
  }
  // Falcon's query_key_value is read only in the layout llama.cpp's converter writes.
  GgufBuilder g;
  g.str("general.architecture", "falcon").u32("falcon.block_count", 1);
  write_file(d.path / "m.gguf", g.bytes());
  expect_error([&] { open_weights((d.path / "m.gguf").string()); }, {"m.gguf", "tensor_data_layout", "jploski"});
}

BOOST_AUTO_TEST_CASE(bad_gguf_files_are_reported) {
  TempDir d;
  const std::string bytes = read_file(model_dir("llama") + "/model-q8_0.gguf");
  const auto file = (d.path / "m.gguf").string();
  write_file(file, bytes.substr(0, 100));
  expect_error([&] { open_weights(file); }, {"m.gguf", "truncated"});
  write_file(file, bytes.substr(0, bytes.size() - 1000));
  expect_error([&] { open_weights(file); }, {"m.gguf", "beyond the end"});
  write_file(file, "GGUF" + std::string(4, '\x09') + bytes.substr(8));
  expect_error([&] { open_weights(file); }, {"m.gguf", "version"});
  write_file(file, "NOPE" + bytes.substr(4));
  expect_error([&] { open_weights(file); }, {"m.gguf", "not a GGUF file"});
  write_file(file, "");
  expect_error([&] { open_weights(file); }, {"m.gguf"});
}

// Before: an array header announcing 2^32 elements made the reader reserve 32 GiB (bad_alloc under this test's
// limit, or the memory, where it was to spare) from a file of 50 bytes.
BOOST_AUTO_TEST_CASE(a_tiny_gguf_cannot_ask_for_gigabytes) {
  TempDir d;
  const auto file = (d.path / "m.gguf").string();
  AddressSpaceLimit limit(size_t{1} << 30);
  write_file(file, GgufBuilder().array("a", gguf_u64, uint64_t{1} << 32).bytes(1));
  expect_error([&] { GgufFile::open(file); }, {"m.gguf", "array length of 4294967296"});
  write_file(file, GgufBuilder().array("a", gguf_string, uint64_t{1} << 32).bytes(1));
  expect_error([&] { GgufFile::open(file); }, {"m.gguf", "array length of 4294967296"});
  // Counts of entries the rest of the file cannot hold.
  GgufBuilder many;
  many.n_kv = uint64_t{1} << 40;
  write_file(file, many.bytes(1));
  expect_error([&] { GgufFile::open(file); }, {"m.gguf", "metadata count"});
  GgufBuilder tensors;
  tensors.n_tensors = uint64_t{1} << 40;
  write_file(file, tensors.bytes(1));
  expect_error([&] { GgufFile::open(file); }, {"m.gguf", "tensor count"});
}

// Before: dimensions of 2^32 × 2^32 counted 0 elements and 0 bytes, so the tensor was accepted with no data.
BOOST_AUTO_TEST_CASE(gguf_tensor_sizes_are_counted_without_overflow) {
  TempDir d;
  const auto file = (d.path / "m.gguf").string();
  write_file(file, GgufBuilder().tensor("t", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0).bytes());
  expect_error([&] { GgufFile::open(file); }, {"m.gguf", "'t'", "too large"});
  // An offset that wraps around 2^64 once the data section's start is added.
  GgufBuilder wrap;
  wrap.tensor("t", {8}, 0, ~uint64_t{0} - 31);
  wrap.data.assign(64, '\0');
  write_file(file, wrap.bytes());
  expect_error([&] { GgufFile::open(file); }, {"m.gguf", "'t'"});
}

// Before: accepted; two weights then share bytes, and a write through one (a copy-on-load conversion) is the other.
BOOST_AUTO_TEST_CASE(gguf_tensors_may_not_overlap_or_repeat) {
  TempDir d;
  const auto file = (d.path / "m.gguf").string();
  GgufBuilder overlap;
  overlap.tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32);
  overlap.data.assign(64, '\0');
  write_file(file, overlap.bytes());
  expect_error([&] { GgufFile::open(file); }, {"m.gguf", "'a'", "'b'", "overlap"});
  GgufBuilder twice;
  twice.tensor("a", {8}, 0, 0).tensor("a", {8}, 0, 32);
  twice.data.assign(64, '\0');
  write_file(file, twice.bytes());
  expect_error([&] { GgufFile::open(file); }, {"m.gguf", "'a'", "twice"});
  GgufBuilder fine;
  fine.tensor("a", {8}, 0, 0).tensor("b", {8}, 0, 32);
  fine.data.assign(64, '\0');
  write_file(file, fine.bytes());
  BOOST_CHECK_NO_THROW(GgufFile::open(file));
}

// K-quant tensors (ggml types 12, 13, 14: q4_K, q5_K, q6_K) take whole super-blocks of 256 values per row; q5_0
// and q5_1 (6, 7) blocks of 32.
BOOST_AUTO_TEST_CASE(gguf_k_quant_tensors_are_sized_by_their_super_blocks) {
  TempDir d;
  const auto file = (d.path / "m.gguf").string();
  GgufBuilder ok;
  ok.tensor("a", {256, 2}, 12, 0).tensor("b", {512}, 13, 288).tensor("c", {256}, 14, 640);
  ok.tensor("d", {64}, 6, 864).tensor("e", {32, 3}, 7, 928);
  ok.data.assign(928 + 72, '\0');
  write_file(file, ok.bytes());
  const auto g = GgufFile::open(file);
  BOOST_TEST(g->find_tensor("a")->nbytes == 288);
  BOOST_TEST(g->find_tensor("b")->nbytes == 352);
  BOOST_TEST(g->find_tensor("c")->nbytes == 210);
  BOOST_TEST((g->find_tensor("c")->dtype == DType::q6_K));
  BOOST_TEST(g->find_tensor("d")->nbytes == 44);
  BOOST_TEST(g->find_tensor("e")->nbytes == 72);
  BOOST_TEST((g->find_tensor("e")->dtype == DType::q5_1));
  GgufBuilder partial;  // rows of 128 values: half a super-block each
  partial.tensor("a", {128, 2}, 12, 0);
  partial.data.assign(288, '\0');
  write_file(file, partial.bytes());
  expect_error([&] { GgufFile::open(file); }, {"m.gguf", "'a'", "q4_K blocks"});
  GgufBuilder huge;  // 2^40 x 2^40 values: the byte count overflows
  huge.tensor("a", {uint64_t{1} << 40, uint64_t{1} << 40}, 14, 0);
  write_file(file, huge.bytes());
  expect_error([&] { GgufFile::open(file); }, {"m.gguf", "'a'", "too large"});
  GgufBuilder q8_k;  // Q8_K is an intermediate type of ggml's dot products, not a weight format
  q8_k.tensor("a", {256}, 15, 0);
  q8_k.data.assign(292, '\0');
  write_file(file, q8_k.bytes());
  expect_error([&] { GgufFile::open(file); }, {"m.gguf", "'a'", "ggml type 15"});
}

// Safetensors files whose header lies about their tensors.
BOOST_AUTO_TEST_CASE(safetensors_headers_are_checked_against_the_data) {
  TempDir d;
  const auto file = (d.path / "m.safetensors").string();
  auto write_header = [&](const std::string& json, size_t data_bytes) {
    std::string bytes(8, '\0');
    const uint64_t n = json.size();
    std::memcpy(bytes.data(), &n, 8);
    write_file(file, bytes + json + std::string(data_bytes, '\0'));
  };
  // Before: accepted; 2^31 × 2^33 elements count 0 (overflow), matching the 0 bytes given.
  write_header(R"({"t":{"dtype":"F32","shape":[2147483648,8589934592],"data_offsets":[0,0]}})", 0);
  expect_error([&] { SafetensorsFile::open(file); }, {"m.safetensors", "'t'", "too large"});
  // Before: std::invalid_argument "negative tensor dimension", naming neither file nor tensor.
  write_header(R"({"t":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,16]}})", 16);
  expect_error([&] { SafetensorsFile::open(file); }, {"m.safetensors", "'t'"});
  // Before: nlohmann converted 8e22 to int64 (undefined behaviour; UBSan stopped the safetensors fuzz target), and
  // the garbage passed or failed by chance.
  write_header(R"({"t":{"dtype":"F32","shape":[8e22,4],"data_offsets":[0,16]}})", 16);
  expect_error([&] { SafetensorsFile::open(file); }, {"m.safetensors", "'t'", "non-negative integers"});
  write_header(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,1.6e1]}})", 16);
  expect_error([&] { SafetensorsFile::open(file); }, {"m.safetensors", "'t'", "data_offsets"});
  // Before: accepted.
  write_header(
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
      16);
  expect_error([&] { SafetensorsFile::open(file); }, {"m.safetensors", "'a'", "'b'", "overlap"});
  // The type's size times the shape must be the bytes given (already refused).
  write_header(R"({"t":{"dtype":"F16","shape":[4],"data_offsets":[0,16]}})", 16);
  expect_error([&] { SafetensorsFile::open(file); }, {"m.safetensors", "'t'", "needs 8"});
  write_header(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 16);
  BOOST_CHECK_NO_THROW(SafetensorsFile::open(file));
}

// model.safetensors.index.json names shard files; before, "../x" and absolute paths were opened wherever they led
// (here a valid copy of the shard placed outside the model directory loaded without a word).
BOOST_AUTO_TEST_CASE(index_files_name_shards_inside_the_model_directory) {
  TempDir d;
  const fs::path model = d.path / "model";
  fs::copy(model_dir("llama-sharded"), model);
  const std::string shard = "model-00001-of-00003.safetensors";
  fs::copy_file(model / shard, d.path / "outside.safetensors");
  const nlohmann::json index = nlohmann::json::parse(read_file(model / "model.safetensors.index.json"));
  for (const std::string& escape : std::vector<std::string>{
           "../outside.safetensors", (d.path / "outside.safetensors").string(), "", "sub/../" + shard, "config.json"}) {
    nlohmann::json edited = index;
    for (auto& file : edited["weight_map"])
      if (file.is_string() && file.get<std::string>() == shard) file = escape;
    write_file(model / "model.safetensors.index.json", edited.dump());
    expect_error([&] { open_weights(model.string()); }, {"model.safetensors.index.json", "'" + escape + "'"});
  }
  write_file(model / "model.safetensors.index.json", R"({"weight_map": {"a": 7}})");
  expect_error([&] { open_weights(model.string()); }, {"model.safetensors.index.json", "'a'"});
}

namespace {
// A copy of a committed LoRA adapter with its first tensor renamed.
fs::path adapter_with_tensor_renamed(const fs::path& dir, const std::string& new_name) {
  const fs::path src = model_dir("llama") + "/adapters/lora-attn";
  fs::create_directories(dir);
  fs::copy_file(src / "adapter_config.json", dir / "adapter_config.json");
  auto file = SafetensorsFile::open((src / "adapter_model.safetensors").string());
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, info] : file->tensors())
    tensors.emplace_back(tensors.empty() ? new_name : name, file->tensor(info));
  write_safetensors((dir / "adapter_model.safetensors").string(), tensors);
  return dir;
}
}  // namespace

// Before: std::stoll threw std::out_of_range "stoll" for a block number of 20 digits, naming neither file nor
// tensor (GGUF tensor names went through the same parse).
BOOST_AUTO_TEST_CASE(block_numbers_in_tensor_names_are_parsed_safely) {
  TempDir d;
  auto source = open_weights(model_dir("llama"));
  const auto dir = adapter_with_tensor_renamed(
      d.path / "a", "base_model.model.model.layers.99999999999999999999.self_attn.q_proj.lora_A.weight");
  expect_error([&] { LoraAdapter::load(dir.string(), source->config(), 0, 4, cpu()); },
               {"adapter_model.safetensors", "99999999999999999999"});
  GgufBuilder g;
  g.str("general.architecture", "llama")
      .u32("llama.embedding_length", 64)
      .u32("llama.feed_forward_length", 128)
      .u32("llama.block_count", 1)
      .u32("llama.attention.head_count", 4)
      .f32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .tensor("token_embd.weight", {64, 256}, 0, 0)
      .tensor("blk.99999999999999999999.attn_norm.weight", {64}, 0, 64 * 256 * 4);
  g.data.assign(64 * 256 * 4 + 64 * 4, '\0');
  write_file(d.path / "m.gguf", g.bytes());
  expect_error([&] { open_weights((d.path / "m.gguf").string()); }, {"m.gguf", "99999999999999999999"});
}

// Before: a null lora_alpha gave nlohmann's "type must be number" naming no key; an r unlike the tensors' was
// accepted and scaled every update wrong.
BOOST_AUTO_TEST_CASE(lora_configs_are_checked) {
  TempDir d;
  auto source = open_weights(model_dir("llama"));
  const fs::path src = model_dir("llama") + "/adapters/lora-attn";
  auto with_config = [&](const std::function<void(nlohmann::json&)>& edit) {
    const fs::path dir = d.path / "edited";
    fs::remove_all(dir);
    fs::copy(src, dir);
    nlohmann::json cfg = nlohmann::json::parse(read_file(src / "adapter_config.json"));
    edit(cfg);
    write_file(dir / "adapter_config.json", cfg.dump());
    return dir.string();
  };
  expect_error(
      [&] {
        LoraAdapter::load(with_config([](auto& c) { c["lora_alpha"] = nullptr; }), source->config(), 0, 4, cpu());
      },
      {"adapter_config.json", "lora_alpha"});
  expect_error(
      [&] {
        LoraAdapter::load(with_config([](auto& c) { c["r"] = c["r"].template get<int>() + 1; }), source->config(), 0, 4,
                          cpu());
      },
      {"adapter_model.safetensors", "rank"});
}

BOOST_AUTO_TEST_CASE(embedding_rejects_ids_outside_the_vocabulary) {
  auto src = open_weights(model_dir("llama"));
  ClientHead head(*src, cpu());
  std::vector<int32_t> ids = {1, 256};
  expect_error([&] { head.embed(ids, 1); }, {"token id 256", "vocabulary of 256"});
  ids = {-1};
  expect_error([&] { head.embed(ids, 1); }, {"token id -1"});
}

namespace {

int64_t minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// A host tensor of `shape` whose values are distinct bit patterns.
Tensor patterned(DType dtype, Shape shape) {
  Tensor t = Tensor::empty(dtype, shape);
  auto* bytes = static_cast<uint8_t*>(t.data());
  for (int64_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + i / 251);
  return t;
}

bool page_aligned(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()) % 4096 == 0; }

}  // namespace

BOOST_AUTO_TEST_CASE(rows_of_whole_pages_are_moved_onto_page_boundaries) {
  // Views at chosen places inside one page-aligned buffer.
  const Tensor buffer = patterned(DType::i32, {5 * 4096 * 2});  // 40 pages
  char* base = static_cast<char*>(buffer.data());
  base += (4096 - reinterpret_cast<uintptr_t>(base) % 4096) % 4096;
  auto view = [&](size_t offset, DType dtype, Shape shape) {
    return Tensor::view(base + offset, dtype, shape, buffer.owner());
  };
  // bf16 rows of 2048 values and f32 rows of 1024 are one page each: copied when they start inside a page.
  for (auto [dtype, k] : {std::pair{DType::bf16, int64_t{2048}}, std::pair{DType::f32, int64_t{1024}}}) {
    const Tensor inside = view(2512, dtype, {8, k});
    const Tensor placed = placed_for_kernels(inside);
    BOOST_TEST(placed.data() != inside.data());
    BOOST_TEST(page_aligned(placed));
    BOOST_TEST(placed.shape() == inside.shape());
    BOOST_TEST(std::memcmp(placed.data(), inside.data(), static_cast<size_t>(inside.nbytes())) == 0);
    const Tensor on_page = view(4096, dtype, {8, k});
    BOOST_TEST(placed_for_kernels(on_page).data() == on_page.data());
  }
  // Rows of 2.75 pages (a down projection's) cross pages at varying places anyway: a small matrix of them is left
  // where it is, and so is anything but a matrix.
  const Tensor down = view(2512, DType::bf16, {4, 5632});
  BOOST_TEST(placed_for_kernels(down).data() == down.data());
  const Tensor vector = view(2512, DType::bf16, {2048});
  BOOST_TEST(placed_for_kernels(vector).data() == vector.data());
}

BOOST_AUTO_TEST_CASE(large_matrices_are_moved_onto_huge_page_boundaries) {
  constexpr size_t kHuge = size_t{2} << 20;
  const Tensor buffer = patterned(DType::i32, {int64_t{3} << 20});  // 12 MiB
  char* base = static_cast<char*>(buffer.data());
  base += (kHuge - reinterpret_cast<uintptr_t>(base) % kHuge) % kHuge;
  // 2.06 MiB of rows that are not whole pages, 2512 bytes into a page: copied onto a huge-page boundary.
  const Tensor inside = Tensor::view(base + 2512, DType::bf16, {192, 5632}, buffer.owner());
  BOOST_REQUIRE(inside.nbytes() >= static_cast<int64_t>(kHuge));
  const Tensor placed = placed_for_kernels(inside);
  BOOST_TEST(placed.data() != inside.data());
  BOOST_TEST(reinterpret_cast<uintptr_t>(placed.data()) % kHuge == 0);
  BOOST_TEST(std::memcmp(placed.data(), inside.data(), static_cast<size_t>(inside.nbytes())) == 0);
  // Already on a huge-page boundary: left in place. Under 2 MiB: left in place.
  const Tensor on_boundary = Tensor::view(base + kHuge, DType::bf16, {192, 5632}, buffer.owner());
  BOOST_TEST(placed_for_kernels(on_boundary).data() == on_boundary.data());
  const Tensor small = Tensor::view(base + 2512, DType::bf16, {180, 5632}, buffer.owner());
  BOOST_REQUIRE(small.nbytes() < static_cast<int64_t>(kHuge));
  BOOST_TEST(placed_for_kernels(small).data() == small.data());
}

BOOST_AUTO_TEST_CASE(a_weight_copied_on_load_releases_its_mapped_pages) {
  TempDir d;
  fs::copy_file(fs::path(model_dir("llama")) / "config.json", d.path / "config.json");
  const Tensor w = patterned(DType::bf16, {16, 2048});
  const Tensor small = patterned(DType::bf16, {16, 100});
  write_safetensors((d.path / "model.safetensors").string(), {{"small", small}, {"w", w}});
  auto src = open_weights(d.path.string());
  const Tensor mapped = src->get("w");
  BOOST_REQUIRE(!page_aligned(mapped));  // the file's JSON header decides where the data starts

  const Tensor placed = load_matrix(*src, "w", {16, 2048}, std::nullopt, cpu());
  BOOST_TEST(page_aligned(placed));
  BOOST_TEST(std::memcmp(placed.data(), w.data(), static_cast<size_t>(w.nbytes())) == 0);
  // Its pages in the mapping were dropped from the process: reading the view faults them back, unchanged.
  int64_t before = minor_faults();
  BOOST_TEST(std::memcmp(mapped.data(), w.data(), static_cast<size_t>(w.nbytes())) == 0);
  BOOST_TEST(minor_faults() > before);
  before = minor_faults();
  BOOST_TEST(std::memcmp(mapped.data(), w.data(), static_cast<size_t>(w.nbytes())) == 0);
  BOOST_TEST(minor_faults() == before);

  // A table read by rows (embeddings) is served in place, and so are rows that are not whole pages.
  BOOST_TEST(load_table(*src, "w", {16, 2048}, std::nullopt, cpu()).data() == mapped.data());
  const Tensor in_place = load_matrix(*src, "small", {16, 100}, std::nullopt, cpu());
  BOOST_TEST(in_place.data() == src->get("small").data());
}
