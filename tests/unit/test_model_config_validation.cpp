// A model's shape, from config.json or GGUF metadata, is validated in one place before anything divides by it,
// sizes memory by it or computes with it: every file below was accepted, or crashed the loader, before.
#define BOOST_TEST_MODULE model_config_validation
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "actors/server/node_config.hpp"
#include "model/config.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/weights/weight_source.hpp"
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

nlohmann::json tiny_config() { return nlohmann::json::parse(read_file(model_dir("llama") + "/config.json")); }

// config.json after `edit`, read as the loader reads it; the text form lets a test write what JSON libraries
// would not (1e999).
void expect_config_refused(const std::string& config_text, std::initializer_list<std::string> fragments) {
  TempDir d;
  write_file(d.path / "config.json", config_text);
  expect_error([&] { ModelConfig::from_hf_json((d.path / "config.json").string()); }, fragments);
  expect_error([&] { ModelConfig::from_hf_json_text(config_text, "config.json"); }, fragments);
}
template <class Edit>
void expect_edit_refused(Edit edit, std::initializer_list<std::string> fragments) {
  nlohmann::json j = tiny_config();
  edit(j);
  expect_config_refused(j.dump(), fragments);
}

const std::string kGguf = model_dir("llama") + "/model-f32.gguf";

template <class T>
void expect_gguf_refused(const std::string& key, T value, std::initializer_list<std::string> fragments) {
  TempDir d;
  const auto file = (d.path / "m.gguf").string();
  write_file(file, with_gguf_value(read_file(kGguf), "llama." + key, value));
  expect_error([&] { open_weights(file); }, fragments);
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_committed_models_are_valid) {
  for (const char* m : {"llama",   "llama-bf16",    "llama-sharded",  "llama3-rope",  "qwen2-yarn", "mistral",
                        "qwen2",   "llama-bias",    "mistral-window", "qwen2-window", "qwen3",      "mixtral",
                        "phi3",    "phi3-longrope", "bloom",          "falcon",       "falcon-new", "falcon-sequential",
                        "falcon2", "gemma2",        "gemma2-options", "llama-kquant"})
    BOOST_CHECK_NO_THROW(open_weights(model_dir(m)));
  for (const char* m : {"gemma2/model-f32.gguf", "gemma2/model-q8_0.gguf"})
    BOOST_CHECK_NO_THROW(open_weights(model_dir(m)));
  BOOST_CHECK_NO_THROW(open_weights(kGguf));
  BOOST_CHECK_NO_THROW(ModelConfig::from_hf_json_text(tiny_config().dump(), "config.json"));
}

// Before: SIGFPE (hidden_size / num_heads computed before validation), for both formats.
BOOST_AUTO_TEST_CASE(a_head_count_of_zero_is_refused_not_divided_by) {
  expect_edit_refused([](auto& j) { j["num_attention_heads"] = 0; }, {"config.json", "num_attention_heads"});
  expect_edit_refused([](auto& j) { j["num_key_value_heads"] = 0; }, {"config.json", "num_key_value_heads"});
  expect_gguf_refused("attention.head_count", uint32_t{0}, {"m.gguf", "num_attention_heads"});
  expect_gguf_refused("attention.head_count_kv", uint32_t{0}, {"m.gguf", "num_key_value_heads"});
}

// Before: all accepted; a NaN base makes every rotation NaN, a negative epsilon a NaN norm.
BOOST_AUTO_TEST_CASE(non_finite_and_non_positive_numbers_are_refused) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  expect_gguf_refused("rope.freq_base", nan, {"m.gguf", "rope_theta"});
  expect_gguf_refused("rope.freq_base", -1.0f, {"m.gguf", "rope_theta"});
  expect_gguf_refused("attention.layer_norm_rms_epsilon", -1e-5f, {"m.gguf", "rms_norm_eps"});
  expect_gguf_refused("attention.layer_norm_rms_epsilon", nan, {"m.gguf", "rms_norm_eps"});
  expect_edit_refused([](auto& j) { j["rms_norm_eps"] = -1e-5; }, {"rms_norm_eps"});
  expect_edit_refused([](auto& j) { j["rms_norm_eps"] = 0; }, {"rms_norm_eps"});
  expect_edit_refused([](auto& j) { j["rope_theta"] = 0; }, {"rope_theta"});
  // Finite and positive, yet every frequency 1 / theta^(2i/d) overflows to infinity.
  expect_edit_refused([](auto& j) { j["rope_theta"] = 1e-300; }, {"config.json", "non-finite frequency"});
  std::string inf_theta = tiny_config().dump();
  inf_theta.replace(inf_theta.find("\"rope_theta\":10000.0"), 20, "\"rope_theta\":1e999");
  expect_config_refused(inf_theta, {"config.json", "1e999"});
  expect_edit_refused(
      [](auto& j) {
        j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 0}};
      },
      {"rope_scaling", "factor"});
  expect_edit_refused(
      [](auto& j) {
        j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", -2.0}};
      },
      {"rope_scaling", "factor"});
  // llama3 scaling divides by high_freq_factor - low_freq_factor.
  expect_edit_refused(
      [](auto& j) {
        j["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", 8.0},
                             {"low_freq_factor", 4.0},
                             {"high_freq_factor", 4.0},
                             {"original_max_position_embeddings", 8192}};
      },
      {"rope_scaling", "high_freq_factor"});
  expect_edit_refused(
      [](auto& j) {
        j["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", 8.0},
                             {"low_freq_factor", 1.0},
                             {"high_freq_factor", 4.0},
                             {"original_max_position_embeddings", 0}};
      },
      {"rope_scaling", "original_max_position_embeddings"});
  expect_edit_refused(
      [](auto& j) {
        j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", 0}};
      },
      {"rope_scaling", "beta_fast"});
  expect_edit_refused(
      [](auto& j) {
        j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"attention_factor", -1.0}};
      },
      {"rope_scaling", "attention_factor"});
  expect_edit_refused(
      [](auto& j) {
        j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 4.0}};
      },
      {"short_factor", "missing"});
  expect_edit_refused(
      [](auto& j) {
        j["rope_scaling"] = {{"rope_type", "ntk-by-parts"}, {"factor", 4.0}};
      },
      {"rope_scaling", "ntk-by-parts", "supported"});
}

// Before: a GGUF file's rope scaling other than linear (llama.cpp writes "yarn" for Qwen2.5 and DeepSeek models)
// was ignored, and the model computed with unscaled frequencies. YaRN as Hugging Face computes it is now read (the
// golden qwen2-yarn GGUF); the keys that would make llama.cpp's computation differ from it, and scalings with no
// GGUF form here, are refused by name.
BOOST_AUTO_TEST_CASE(gguf_rope_scaling_is_read_or_refused_by_name) {
  TempDir d;
  const auto file = (d.path / "m.gguf").string();
  write_file(file, with_gguf_string_added(read_file(kGguf), "llama.rope.scaling.type", "longrope"));
  expect_error([&] { open_weights(file); }, {"m.gguf", "rope scaling 'longrope'", "not supported"});
  write_file(file, with_gguf_string_added(read_file(kGguf), "llama.rope.scaling.type", "none"));
  BOOST_CHECK_NO_THROW(open_weights(file));

  const std::string yarn = read_file(model_dir("qwen2-yarn") + "/model-f32.gguf");
  const ModelConfig c = open_weights(model_dir("qwen2-yarn") + "/model-f32.gguf")->config();
  BOOST_TEST(c.rope_scaling.type == "yarn");
  BOOST_TEST(c.rope_scaling.factor == 4.0);
  BOOST_TEST(c.rope_scaling.original_max_position == 64);
  for (const auto& [key, value] :
       {std::pair{"qwen2.rope.scaling.yarn_ext_factor", 0.5f}, std::pair{"qwen2.rope.scaling.yarn_attn_factor", 0.8f},
        std::pair{"qwen2.rope.scaling.yarn_log_multiplier", 0.1f}}) {
    write_file(file, with_gguf_f32_added(yarn, key, value));
    expect_error([&] { open_weights(file); }, {"m.gguf", key, "not supported"});
  }
  write_file(file, with_gguf_f32_added(yarn, "qwen2.rope.scaling.yarn_ext_factor", 1.0f));  // Hugging Face's ramp
  BOOST_CHECK_NO_THROW(open_weights(file));
  write_file(file, with_gguf_value(yarn, "qwen2.rope.scaling.factor", 0.0f));
  expect_error([&] { open_weights(file); }, {"m.gguf", "rope_scaling factor"});
}

// Before: accepted, and the sizes derived from them (vocab × hidden elements, KV-cache bytes) overflow int64.
BOOST_AUTO_TEST_CASE(sizes_are_bounded_so_derived_sizes_fit) {
  const int64_t huge = int64_t{1} << 40;
  expect_edit_refused([&](auto& j) { j["vocab_size"] = huge; }, {"vocab_size"});
  expect_edit_refused(
      [&](auto& j) {
        j["hidden_size"] = huge;
        j["num_attention_heads"] = 4;
      },
      {"hidden_size"});
  expect_edit_refused([&](auto& j) { j["intermediate_size"] = huge; }, {"intermediate_size"});
  expect_edit_refused([&](auto& j) { j["num_hidden_layers"] = huge; }, {"num_hidden_layers"});
  expect_edit_refused([&](auto& j) { j["max_position_embeddings"] = huge; }, {"max_position_embeddings"});
  expect_edit_refused([&](auto& j) { j["max_position_embeddings"] = 0; }, {"max_position_embeddings"});
  expect_edit_refused([&](auto& j) { j["head_dim"] = huge; }, {"head_dim"});
  expect_edit_refused(
      [&](auto& j) {
        j["num_attention_heads"] = 4096;
        j["num_key_value_heads"] = 4096;
      },
      {"hidden_size"});
  expect_gguf_refused("embedding_length", uint32_t{0xFFFFFFF0u}, {"m.gguf", "hidden_size"});
}

// Before: hidden_size 64 with 3 heads was accepted (head_dim given explicitly), so were heads 4 with kv heads 3.
BOOST_AUTO_TEST_CASE(heads_must_divide_evenly) {
  expect_edit_refused(
      [](auto& j) {
        j["num_attention_heads"] = 3;
        j["num_key_value_heads"] = 3;
      },
      {"hidden_size", "num_attention_heads"});
  expect_edit_refused([](auto& j) { j["num_key_value_heads"] = 3; }, {"num_key_value_heads"});
}

// Before: 2^40 was cut to an int32 silently (get<int32_t>), and ids past the vocabulary accepted.
BOOST_AUTO_TEST_CASE(special_token_ids_lie_in_the_vocabulary) {
  expect_edit_refused([](auto& j) { j["eos_token_id"] = int64_t{1} << 40; }, {"eos_token_id"});
  expect_edit_refused([](auto& j) { j["eos_token_id"] = {2, 256}; }, {"eos_token_id"});
  expect_edit_refused([](auto& j) { j["bos_token_id"] = 256; }, {"bos_token_id"});
}

BOOST_AUTO_TEST_CASE(wrong_types_are_refused_with_the_source_named) {
  expect_edit_refused([](auto& j) { j["hidden_size"] = "64"; }, {"config.json", "hidden_size"});
  expect_edit_refused([](auto& j) { j["hidden_size"] = 64.5; }, {"config.json", "hidden_size"});
  expect_config_refused("[1, 2]", {"config.json"});
  expect_config_refused("{\"model_type\": \"llama\"", {"config.json", "JSON"});
}

// A sparse file of gigabytes costs nothing on disk. Before: config.json, tokenizer.json, adapter_config.json and
// TOML files were read whole into memory (std::bad_alloc under this test's limit, the node's memory otherwise).
BOOST_AUTO_TEST_CASE(huge_small_files_are_refused_before_they_are_read) {
  TempDir d;
  AddressSpaceLimit limit(size_t{1} << 30);
  for (const char* name : {"config.json", "tokenizer.json", "node.toml"}) {
    std::ofstream(d.path / name);
    fs::resize_file(d.path / name, uintmax_t{4} << 30);
  }
  expect_error([&] { ModelConfig::from_hf_json((d.path / "config.json").string()); },
               {"config.json", "4294967296 bytes, above the limit"});
  expect_error([&] { Tokenizer::from_hf_dir(d.path); }, {"tokenizer.json", "4294967296 bytes, above the limit"});
  expect_error([&] { load_node_config((d.path / "node.toml").string()); },
               {"node.toml", "4294967296 bytes, above the limit"});
}
