// The tokenizers against llama.cpp's external vectors (gpt-2, llama-bpe, llama-spm, qwen2): every text encodes,
// without BOS/EOS and without parsing special-token text, to the expected ids; and decodes back to itself.
// Skipped (exit 77) when the vectors are absent.
#define BOOST_TEST_MODULE tokenizer_vectors
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "model/tokenizer/chat_template.hpp"
#include "model/tokenizer/stream_decoder.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/weights/gguf_file.hpp"
#include "tests/support/tokenizer_vectors.hpp"

using namespace corolla;
using namespace corolla::test;
namespace bdata = boost::unit_test::data;

namespace {

struct SkipWithoutVectors {
  SkipWithoutVectors() { require_vectors_or_skip(); }
};
BOOST_TEST_GLOBAL_FIXTURE(SkipWithoutVectors);

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    s += ' ';
    s += std::to_string(id);
  }
  return s;
}

constexpr EncodeOptions kRaw{.add_special = false, .parse_special = false};

}  // namespace

BOOST_DATA_TEST_CASE(every_text_encodes_to_the_expected_ids, bdata::make(kExternalVocabs), name) {
  const Tokenizer tok = Tokenizer::from_gguf(*GgufFile::open(vocab_path(name)));
  const auto cases = read_vectors(name);
  size_t passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto got = tok.encode(cases[i].text, kRaw);
    if (got == cases[i].ids) {
      ++passed;
    } else {
      BOOST_ERROR(name << " case " << i << " text '" << cases[i].text << "'\n expected" << ids_text(cases[i].ids)
                       << "\n got     " << ids_text(got));
    }
  }
  BOOST_TEST_MESSAGE(name << ": " << passed << "/" << cases.size() << " texts encode as expected");
  BOOST_TEST(passed == cases.size());
  BOOST_TEST(cases.size() == 46u);
}

BOOST_DATA_TEST_CASE(every_text_decodes_back_to_itself, bdata::make(kExternalVocabs), name) {
  const Tokenizer tok = Tokenizer::from_gguf(*GgufFile::open(vocab_path(name)));
  for (const auto& c : read_vectors(name)) {
    BOOST_TEST(tok.decode(c.ids) == c.text);
    BOOST_TEST(tok.decode(tok.encode(c.text, kRaw)) == c.text);
  }
}

BOOST_DATA_TEST_CASE(streaming_decodes_every_text, bdata::make(kExternalVocabs), name) {
  const Tokenizer tok = Tokenizer::from_gguf(*GgufFile::open(vocab_path(name)));
  for (const auto& c : read_vectors(name)) {
    StreamDecoder stream(tok);
    std::string joined;
    for (int32_t id : c.ids) joined += stream.push(id);
    joined += stream.flush();
    BOOST_TEST(joined == c.text);
  }
}

BOOST_DATA_TEST_CASE(repeated_encoding_is_stable, bdata::make(kExternalVocabs), name) {
  // The second pass runs from the word cache; it must give the same ids as the first.
  const Tokenizer tok = Tokenizer::from_gguf(*GgufFile::open(vocab_path(name)));
  const auto cases = read_vectors(name);
  std::string all;
  for (const auto& c : cases) all += c.text;
  const auto first = tok.encode(all, kRaw);
  BOOST_TEST(tok.encode(all, kRaw) == first);
}

BOOST_AUTO_TEST_CASE(special_tokens_follow_the_metadata) {
  auto load = [](const char* name) { return Tokenizer::from_gguf(*GgufFile::open(vocab_path(name))); };
  const Tokenizer gpt2 = load("gpt-2"), llama3 = load("llama-bpe"), llama2 = load("llama-spm"), qwen2 = load("qwen2");
  BOOST_TEST(gpt2.bos_id() == 50256);
  BOOST_TEST(!gpt2.adds_bos());
  BOOST_TEST(gpt2.encode("Hello world") == (std::vector<int32_t>{15496, 995}));

  BOOST_TEST(llama3.adds_bos());
  BOOST_TEST(llama3.eos_id() == 128001);
  BOOST_TEST(llama3.is_eos(128009));  // <|eot_id|> ends a turn
  BOOST_TEST(llama3.encode("<|start_header_id|>user").front() == 128000);
  BOOST_TEST(llama3.encode("<|start_header_id|>user")[1] == 128006);
  BOOST_TEST(llama3.encode("<|eot_id|>", kRaw).size() > 1u);  // plain text in raw mode

  BOOST_TEST(llama2.adds_bos());
  BOOST_TEST(llama2.encode("Hello world") == (std::vector<int32_t>{1, 15043, 3186}));
  BOOST_TEST(llama2.decode(std::vector<int32_t>{1, 15043, 3186}) == "<s> Hello world");
  BOOST_TEST(llama2.decode(std::vector<int32_t>{1, 15043, 3186}, true) == "Hello world");

  BOOST_TEST(!qwen2.adds_bos());
  BOOST_TEST(qwen2.is_eos(151645));  // <|im_end|>
  const auto chat = ChatTemplate::for_tokenizer(qwen2);
  BOOST_TEST(chat.format() == ChatFormat::chatml);
  BOOST_TEST(chat.default_system() == "You are a helpful assistant");
  const std::vector<ChatMessage> hello = {{"user", "Hi"}};
  const auto ids = qwen2.encode(chat.render(hello, true), {.add_special = false, .parse_special = true});
  BOOST_TEST(ids.front() == 151644);  // <|im_start|>
  BOOST_TEST(std::count(ids.begin(), ids.end(), 151645) == 2);
}
