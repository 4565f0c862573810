// Tokenizer pieces and failure modes: UTF-8 validation and lossy decoding, the streaming decoder on characters
// split across byte tokens, bad ids, missing or corrupt files, concurrent use.
#define BOOST_TEST_MODULE tokenizer_unit
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unistd.h>

#include "model/tokenizer/pretokenizer.hpp"
#include "model/tokenizer/regex.hpp"
#include "model/tokenizer/stream_decoder.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/tokenizer/unicode.hpp"

using namespace corolla;
namespace fs = std::filesystem;

namespace {

std::string data_dir(const std::string& name) { return std::string(COROLLA_TEST_DATA) + "/tokenizers/" + name; }

bool is_valid_utf8(const std::string& s) {
  try {
    tok::check_utf8(s);
    return true;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// A scratch directory removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() : path(fs::temp_directory_path() / ("corolla-tok-" + std::to_string(::getpid()))) {
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path / name) << text; }
};

const std::string kFffd = "\xEF\xBF\xBD";

}  // namespace

BOOST_AUTO_TEST_CASE(invalid_utf8_is_refused_with_its_offset) {
  const Tokenizer tok = Tokenizer::from_hf_dir(data_dir("bpe-smollm"));
  const std::string bad[] = {std::string("abc\xFF"), "abc\xC3", "abc\xC0\xAF", "abc\xED\xA0\x80",
                             "abc\xF4\x90\x80\x80",  "abc\x80"};
  for (const std::string& s : bad) {
    const std::string msg = error_of([&] { tok.encode(s); });
    BOOST_TEST(msg.find("byte offset 3") != std::string::npos, msg);
    BOOST_CHECK_THROW(tok.encode(s), std::invalid_argument);
  }
  BOOST_CHECK_NO_THROW(tok.encode("caf\xC3\xA9 \xF0\x9F\x8C\x8A"));
}

BOOST_AUTO_TEST_CASE(lossy_decoding_replaces_maximal_subparts) {
  // The same replacements as Python's bytes.decode("utf-8", "replace") and Rust's from_utf8_lossy.
  BOOST_TEST(tok::utf8_lossy("a\xE4\xBD") == "a" + kFffd);
  BOOST_TEST(tok::utf8_lossy("\xF0\x9F\x8C") == kFffd);
  BOOST_TEST(tok::utf8_lossy("\xFF\xFE") == kFffd + kFffd);
  BOOST_TEST(tok::utf8_lossy("\xED\xA0\x80") == kFffd + kFffd + kFffd);
  BOOST_TEST(tok::utf8_lossy("\xE4\xBD"
                             "A") == kFffd + "A");
  BOOST_TEST(tok::utf8_lossy("\xC3\xA9") == "\xC3\xA9");
}

BOOST_AUTO_TEST_CASE(incomplete_tails_are_found) {
  BOOST_TEST(tok::utf8_incomplete_tail("abc") == 0u);
  BOOST_TEST(tok::utf8_incomplete_tail("ab\xE4") == 1u);
  BOOST_TEST(tok::utf8_incomplete_tail("ab\xE4\xBD") == 2u);
  BOOST_TEST(tok::utf8_incomplete_tail("ab\xE4\xBD\xA0") == 0u);
  BOOST_TEST(tok::utf8_incomplete_tail("\xF0\x9F\x8C") == 3u);
  BOOST_TEST(tok::utf8_incomplete_tail("\xF0\x9F\x8C\x8A") == 0u);
  BOOST_TEST(tok::utf8_incomplete_tail("a\xFF") == 0u);      // ill-formed, nothing to wait for
  BOOST_TEST(tok::utf8_incomplete_tail("a\xED\xA0") == 0u);  // a surrogate never completes
}

BOOST_AUTO_TEST_CASE(stream_never_breaks_a_character) {
  for (const char* name : {"spm-legacy", "bpe-smollm", "bpe-llama3"}) {
    const Tokenizer tok = Tokenizer::from_hf_dir(data_dir(name));
    // CJK and emoji outside these small vocabularies: byte tokens (SentencePiece) or byte symbols (byte-level).
    const std::string text = "x 灯塔看守人 🌊🐟 Größe ꙮ";
    const auto ids = tok.encode(text, {.add_special = true});
    StreamDecoder stream(tok);
    std::string joined;
    bool held_back = false;
    for (int32_t id : ids) {
      const std::string piece = stream.push(id);
      BOOST_TEST(is_valid_utf8(piece), name << ": chunk is not valid UTF-8");
      held_back = held_back || stream.pending() > 0;
      joined += piece;
    }
    joined += stream.flush();
    BOOST_TEST(held_back, name << ": no character was split across tokens");
    BOOST_TEST(joined == text, name);
    BOOST_TEST(joined == tok.decode(ids, true), name);
  }
}

BOOST_AUTO_TEST_CASE(stream_replaces_what_can_never_complete) {
  const Tokenizer tok = Tokenizer::from_hf_dir(data_dir("spm-legacy"));
  const int32_t e4 = *tok.find_token("<0xE4>"), bd = *tok.find_token("<0xBD>"), a = *tok.find_token("<0x41>");
  StreamDecoder stream(tok);
  BOOST_TEST(stream.push(e4).empty());
  BOOST_TEST(stream.push(bd).empty());
  BOOST_TEST(stream.pending() == 2u);
  BOOST_TEST(stream.push(a) == kFffd + "A");
  BOOST_TEST(stream.push(e4).empty());
  BOOST_TEST(stream.flush() == kFffd);
}

BOOST_AUTO_TEST_CASE(ids_outside_the_vocabulary_are_refused) {
  const Tokenizer tok = Tokenizer::from_hf_dir(data_dir("bpe-qwen2"));
  const std::vector<int32_t> too_big = {1, static_cast<int32_t>(tok.vocab_size())};
  const std::string msg = error_of([&] { tok.decode(too_big); });
  BOOST_TEST(msg.find("outside the vocabulary") != std::string::npos, msg);
  BOOST_CHECK_THROW(tok.decode(too_big), std::invalid_argument);
  BOOST_CHECK_THROW(tok.decode(std::vector<int32_t>{-1}), std::invalid_argument);
  StreamDecoder stream(tok);
  BOOST_CHECK_THROW(stream.push(1 << 30), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(missing_or_corrupt_files_are_named) {
  TempDir dir;
  std::string msg = error_of([&] { Tokenizer::from_hf_dir(dir.path); });
  BOOST_TEST(msg.find((dir.path / "tokenizer.json").string()) != std::string::npos, msg);

  dir.write("tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
  msg = error_of([&] { Tokenizer::from_hf_dir(dir.path); });
  BOOST_TEST(msg.find("tokenizer.json") != std::string::npos, msg);
  BOOST_TEST(msg.find("not valid JSON") != std::string::npos, msg);

  dir.write("tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})");
  msg = error_of([&] { Tokenizer::from_hf_dir(dir.path); });
  BOOST_TEST(msg.find("tokenizer.json") != std::string::npos, msg);
  BOOST_TEST(msg.find("WordPiece") != std::string::npos, msg);

  dir.write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}}})");  // no merges
  msg = error_of([&] { Tokenizer::from_hf_dir(dir.path); });
  BOOST_TEST(msg.find("tokenizer.json") != std::string::npos, msg);

  fs::copy_file(data_dir("bpe-smollm") + "/tokenizer.json", dir.path / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  dir.write("tokenizer_config.json", "{ not json");
  msg = error_of([&] { Tokenizer::from_hf_dir(dir.path); });
  BOOST_TEST(msg.find("tokenizer_config.json") != std::string::npos, msg);

  msg = error_of([&] { Tokenizer::load(dir.path / "absent.gguf"); });
  BOOST_TEST(msg.find("absent.gguf") != std::string::npos, msg);
  dir.write("fake.gguf", "this is not a gguf file at all");
  msg = error_of([&] { Tokenizer::load(dir.path / "fake.gguf"); });
  BOOST_TEST(msg.find("fake.gguf") != std::string::npos, msg);
}

BOOST_AUTO_TEST_CASE(split_rules_follow_unicode_classes) {
  // Llama-3 splits digits in groups of up to three; Qwen2 one by one; letters of any script stay together.
  auto words = [](const char* pattern, const std::string& text) {
    tok::PreTokenizer p;
    p.add_split(pattern, tok::SplitBehavior::isolated);
    std::vector<std::string_view> w;
    p.split(text, w);
    return std::vector<std::string>(w.begin(), w.end());
  };
  using V = std::vector<std::string>;
  BOOST_TEST(words(tok::patterns::llama3, "1234567") == (V{"123", "456", "7"}));
  BOOST_TEST(words(tok::patterns::qwen2, "1234") == (V{"1", "2", "3", "4"}));
  BOOST_TEST(words(tok::patterns::gpt2, "Größe ٣٤ 灯塔") == (V{"Größe", " ٣٤", " 灯塔"}));
  BOOST_TEST(words(tok::patterns::llama3, "I'M here\n\n  x") == (V{"I", "'M", " here", "\n\n", " ", " x"}));
  BOOST_TEST(words(tok::patterns::gpt2, "a  b   ") == (V{"a", " ", " b", "   "}));
}

BOOST_AUTO_TEST_CASE(concurrent_encoding_agrees) {
  const Tokenizer tok = Tokenizer::from_hf_dir(data_dir("bpe-llama3"));
  std::string text;
  for (int i = 0; i < 200; ++i) text += "The keeper counted " + std::to_string(i * 37) + " steps, twice. ";
  const auto expected = tok.encode(text);
  std::vector<std::vector<int32_t>> results(4);
  std::vector<std::thread> threads;
  for (auto& r : results)
    threads.emplace_back([&] {
      for (int k = 0; k < 20; ++k) r = tok.encode(text);
    });
  for (auto& t : threads) t.join();
  for (const auto& r : results) BOOST_TEST(r == expected);
}

// A String pattern (Gemma's Split on " ", a Metaspace that splits on "▁") is matched as plain text: it failed to
// compile before (PCRE2 refuses Unicode properties beside PCRE2_LITERAL).
BOOST_AUTO_TEST_CASE(literal_patterns_match_as_plain_text) {
  std::vector<std::pair<size_t, size_t>> found;
  tok::Regex(" ", true).find_all("a b  c", found);
  BOOST_TEST(found.size() == 3u);
  found.clear();
  tok::Regex("\u2581", true).find_all("\u2581Hello\u2581world", found);
  BOOST_TEST(found.size() == 2u);
  found.clear();
  tok::Regex("a.c", true).find_all("abc a.c", found);  // the dot is a dot
  BOOST_REQUIRE(found.size() == 1u);
  BOOST_TEST(found[0].first == 4u);
}
