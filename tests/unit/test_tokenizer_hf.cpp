// tokenizer.json loading against Hugging Face: the small tokenizers of tools/make_tokenizer_golden.py
// (tests/data/tokenizers/*) must encode and decode exactly as HF `tokenizers` did when it wrote golden.json.
#define BOOST_TEST_MODULE tokenizer_hf
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "model/tokenizer/stream_decoder.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "support/tokenizer_golden.hpp"

using namespace corolla;
using json = nlohmann::json;
namespace bdata = boost::unit_test::data;
using test::ids_of;

namespace {

const char* kTokenizers[] = {"bpe-smollm", "bpe-llama3",       "bpe-qwen2",          "bpe-bloom",
                             "bpe-falcon", "bpe-deepseek-llm", "bpe-deepseek-coder", "bpe-deepseek-v3",
                             "spm-legacy", "spm-metaspace",    "spm-gemma"};

std::string dir_of(const std::string& name) { return test::tokenizer_dir(name); }
json golden(const std::string& name) { return test::tokenizer_golden(name); }

std::string stream_all(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  StreamDecoder s(tok, skip_special);
  std::string out;
  for (int32_t id : ids) out += s.push(id);
  return out + s.flush();
}

}  // namespace

BOOST_DATA_TEST_CASE(encodes_like_hugging_face, bdata::make(kTokenizers), name) {
  const Tokenizer tok = Tokenizer::from_hf_dir(dir_of(name));
  const json g = golden(name);
  BOOST_TEST(tok.vocab_size() == g.at("vocab_size").get<size_t>());
  size_t passed = 0, total = 0;
  for (const json& c : g.at("cases")) {
    const std::string text = c.at("text");
    const auto plain = tok.encode(text, {.add_special = false, .parse_special = true});
    const auto with_special = tok.encode(text, {.add_special = true, .parse_special = true});
    BOOST_TEST(plain == ids_of(c.at("ids")), name << ": '" << text << "'");
    BOOST_TEST(with_special == ids_of(c.at("ids_with_special")), name << " (with special tokens): '" << text << "'");
    passed += (plain == ids_of(c.at("ids"))) + (with_special == ids_of(c.at("ids_with_special")));
    total += 2;
  }
  BOOST_TEST_MESSAGE(name << ": " << passed << "/" << total << " encodings match Hugging Face");
}

BOOST_DATA_TEST_CASE(decodes_like_hugging_face, bdata::make(kTokenizers), name) {
  const Tokenizer tok = Tokenizer::from_hf_dir(dir_of(name));
  const json g = golden(name);
  for (const json& c : g.at("cases")) {
    BOOST_TEST(tok.decode(ids_of(c.at("ids"))) == c.at("decoded").get<std::string>());
    BOOST_TEST(tok.decode(ids_of(c.at("ids_with_special")), true) == c.at("decoded_skip_special").get<std::string>());
  }
  for (const json& c : g.at("decode_cases")) {
    const auto ids = ids_of(c.at("ids"));
    BOOST_TEST(tok.decode(ids) == c.at("text").get<std::string>(), name << " ids " << c.at("ids").dump());
    BOOST_TEST(tok.decode(ids, true) == c.at("text_skip_special").get<std::string>(),
               name << " ids " << c.at("ids").dump());
  }
}

BOOST_DATA_TEST_CASE(streaming_gives_the_same_text, bdata::make(kTokenizers), name) {
  const Tokenizer tok = Tokenizer::from_hf_dir(dir_of(name));
  const json g = golden(name);
  for (const json& c : g.at("decode_cases")) {
    const auto ids = ids_of(c.at("ids"));
    for (bool skip : {false, true}) {
      const std::string whole = tok.decode(ids, skip);
      // Runs of SentencePiece byte tokens that are not UTF-8 give one U+FFFD per byte in Hugging Face's
      // decode, but the stream replaces maximal ill-formed subparts; compare where no replacement happens.
      if (whole.find("\xEF\xBF\xBD") != std::string::npos) continue;
      BOOST_TEST(stream_all(tok, ids, skip) == whole, name << " ids " << c.at("ids").dump());
    }
  }
}

BOOST_DATA_TEST_CASE(special_tokens_and_config, bdata::make(kTokenizers), name) {
  const Tokenizer tok = Tokenizer::from_hf_dir(dir_of(name));
  // BLOOM's and Falcon's tokenizers have none (nor does the Gemma-layout test tokenizer); DeepSeek-Coder's and
  // -V3's have templates Corolla does not render.
  const std::string n = name;
  BOOST_TEST(tok.chat_template().empty() == (n == "bpe-bloom" || n == "bpe-falcon" || n == "spm-gemma" ||
                                             n == "bpe-deepseek-coder" || n == "bpe-deepseek-v3"));
  BOOST_TEST(tok.eos_id() >= 0);
  BOOST_TEST(tok.is_eos(tok.eos_id()));
  BOOST_TEST(tok.is_special(tok.eos_id()));
  BOOST_TEST(tok.adds_bos() == (n == "bpe-llama3" || n.starts_with("bpe-deepseek") || n.starts_with("spm")));
  BOOST_TEST(!tok.adds_eos());
}
