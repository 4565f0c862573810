// Tokenizer files from outside (tokenizer.json, GGUF vocabularies): ids are bounded and checked before anything is
// sized by them, so a small file cannot ask for gigabytes or smuggle in an id that wraps around.
#define BOOST_TEST_MODULE tokenizer_files
#include <boost/test/unit_test.hpp>
#include <fstream>

#include "model/tokenizer/tokenizer.hpp"
#include "model/weights/gguf_file.hpp"
#include "support/address_space_limit.hpp"
#include "support/expect_error.hpp"
#include "support/gguf_bytes.hpp"
#include "support/temp_dir.hpp"

using namespace corolla;
using namespace corolla::test;

namespace {

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string tokenizer_json(const std::string& vocab, const std::string& added = "[]") {
  return R"({"model": {"type": "BPE", "vocab": )" + vocab + R"(, "merges": []}, "added_tokens": )" + added + "}";
}

void expect_tokenizer_refused(const std::string& text, std::initializer_list<std::string> fragments) {
  TempDir d;
  write_file(d.path / "tokenizer.json", text);
  expect_error([&] { Tokenizer::from_hf_dir(d.path); }, fragments);
  expect_error([&] { Tokenizer::from_hf_json_text(text, "tokenizer.json"); }, fragments);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_small_tokenizer_json_loads) {
  const Tokenizer t = Tokenizer::from_hf_json_text(tokenizer_json(R"({"a": 0, "b": 1, "ab": 2})"), "tokenizer.json");
  BOOST_TEST(t.vocab_size() == 3u);
}

// Before: one token with id 2,000,000,000 grew the vocabulary to that many slots (std::bad_alloc under this
// test's limit; some 70 GB where memory allowed).
BOOST_AUTO_TEST_CASE(token_ids_are_bounded_before_the_vocabulary_grows) {
  AddressSpaceLimit limit(size_t{1} << 30);
  expect_tokenizer_refused(tokenizer_json(R"({"a": 2000000000})"), {"tokenizer.json", "2000000000"});
  expect_tokenizer_refused(tokenizer_json(R"({"a": 0})", R"([{"id": 2000000000, "content": "x"}])"),
                           {"tokenizer.json", "2000000000"});
}

// Before: 2^40 was narrowed to int32 (0) by nlohmann's get<int32_t> and accepted; -1 gave "negative token id -1"
// without the file's name.
BOOST_AUTO_TEST_CASE(token_ids_must_be_integers_in_range) {
  expect_tokenizer_refused(tokenizer_json(R"({"a": 1099511627776})"), {"tokenizer.json", "1099511627776"});
  expect_tokenizer_refused(tokenizer_json(R"({"a": -1})"), {"tokenizer.json", "-1"});
  expect_tokenizer_refused(tokenizer_json(R"({"a": 1.5})"), {"tokenizer.json", "1.5"});
  expect_tokenizer_refused(tokenizer_json(R"({"a": 0})", R"([{"id": 4294967296, "content": "x"}])"),
                           {"tokenizer.json", "4294967296"});
}

// Before: a special token id of 2^32 + 1 was cast to int32 (1) and taken as BOS.
BOOST_AUTO_TEST_CASE(gguf_special_token_ids_are_checked_before_narrowing) {
  TempDir d;
  const auto file = (d.path / "t.gguf").string();
  GgufBuilder g;
  g.str("tokenizer.ggml.model", "llama")
      .strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a"})
      .floats("tokenizer.ggml.scores", {0, 0, 0, -1})
      .u64("tokenizer.ggml.bos_token_id", (uint64_t{1} << 32) + 1);
  write_file(file, g.bytes());
  expect_error([&] { Tokenizer::from_gguf(*GgufFile::open(file)); }, {"t.gguf", "bos_token_id", "4294967297"});
}

// Before: a merge naming a piece outside the vocabulary was skipped without a word, so a broken file loaded as a
// different tokenizer (Hugging Face refuses it: MergeTokenOutOfVocabulary).
BOOST_AUTO_TEST_CASE(merges_name_tokens_of_the_vocabulary) {
  expect_tokenizer_refused(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b", "a c"]}})",
      {"tokenizer.json", "merge 1", "'a c'"});
  expect_tokenizer_refused(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b"]]}})",
                           {"tokenizer.json", "merge 0", "'a b'"});
  TempDir d;
  const auto file = (d.path / "t.gguf").string();
  GgufBuilder g;
  g.str("tokenizer.ggml.model", "gpt2")
      .strings("tokenizer.ggml.tokens", {"a", "b", "ab"})
      .strings("tokenizer.ggml.merges", {"a b", "b c"});
  write_file(file, g.bytes());
  expect_error([&] { Tokenizer::from_gguf(*GgufFile::open(file)); }, {"t.gguf", "merges[1]", "'b c'"});
}
