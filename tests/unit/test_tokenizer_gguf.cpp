// GGUF vocabularies against Hugging Face: for each small byte-level tokenizer of tools/make_tokenizer_golden.py
// whose pre-tokenizer llama.cpp names, vocab.gguf holds the same vocabulary as llama.cpp's converter writes it
// (tokenizer.ggml.pre = that name). Corolla must give every golden text the ids llama.cpp's rules give it
// (gguf_golden.json: Hugging Face tokenizers run with llama.cpp's splits), which are the ids of the model's own
// tokenizer.json (golden.json) except on the texts the file marks, where llama.cpp's rules differ (its note says why).
#define BOOST_TEST_MODULE tokenizer_gguf
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/tokenizer/chat_template.hpp"
#include "model/tokenizer/pretokenizer.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/weights/gguf_file.hpp"
#include "model/weights/mapped_file.hpp"
#include "support/gguf_bytes.hpp"
#include "support/tokenizer_golden.hpp"

using namespace corolla;
using json = nlohmann::json;
namespace bdata = boost::unit_test::data;
using test::ids_of;

namespace {

const char* kVocabs[] = {"bpe-smollm", "bpe-llama3",       "bpe-qwen2",          "bpe-bloom",
                         "bpe-falcon", "bpe-deepseek-llm", "bpe-deepseek-coder", "bpe-deepseek-v3"};

json chat_golden() {
  std::ifstream f(std::string(COROLLA_TEST_DATA) + "/chat_templates/golden.json");
  return json::parse(f);
}

}  // namespace

BOOST_DATA_TEST_CASE(encodes_like_llama_cpp_and_hugging_face, bdata::make(kVocabs), name) {
  const Tokenizer tok = Tokenizer::from_gguf(*GgufFile::open(test::tokenizer_dir(name) + "/vocab.gguf"));
  const json gguf = test::tokenizer_golden(name, "gguf_golden.json");
  const json hf = test::tokenizer_golden(name);
  BOOST_REQUIRE(gguf.at("cases").size() == hf.at("cases").size());
  BOOST_TEST(tok.vocab_size() == hf.at("vocab_size").get<size_t>());
  size_t same_as_hf = 0, differ = 0;
  for (size_t i = 0; i < hf.at("cases").size(); ++i) {
    const json& c = gguf["cases"][i];
    const json& h = hf["cases"][i];
    const std::string text = c.at("text");
    BOOST_REQUIRE(text == h.at("text").get<std::string>());
    const auto plain = tok.encode(text, {.add_special = false, .parse_special = true});
    const auto with_special = tok.encode(text, {.add_special = true, .parse_special = true});
    BOOST_TEST(plain == ids_of(c.at("ids")),
               name << " '" << gguf.at("pre").get<std::string>() << "': '" << text << "'");
    BOOST_TEST(with_special == ids_of(c.at("ids_with_special")), name << " (with special tokens): '" << text << "'");
    if (c.at("same_as_hugging_face").get<bool>()) {
      BOOST_TEST(plain == ids_of(h.at("ids")), name << ": '" << text << "'");
      BOOST_TEST(tok.decode(plain) == h.at("decoded").get<std::string>(), name << ": '" << text << "'");
      same_as_hf += plain == ids_of(h.at("ids"));
    } else {
      BOOST_TEST(plain != ids_of(h.at("ids")), name << ": marked as differing from Hugging Face: '" << text << "'");
      ++differ;
    }
  }
  BOOST_TEST((differ == 0) == gguf.at("differences").get<std::string>().empty());
  BOOST_TEST_MESSAGE(name << " ('" << gguf.at("pre").get<std::string>() << "'): " << same_as_hf << "/"
                          << hf.at("cases").size() << " texts as Hugging Face, " << differ
                          << " where llama.cpp's rules differ");
}

BOOST_AUTO_TEST_CASE(the_names_follow_llama_cpp) {
  auto words = [](const std::string& name, const std::string& text) {
    std::vector<std::string_view> w;
    tok::PreTokenizer::for_gguf_name(name).split(text, w);
    return std::vector<std::string>(w.begin(), w.end());
  };
  using V = std::vector<std::string>;
  // "default" (also a file that names none) is llama.cpp's four rules, not GPT-2's alone.
  BOOST_TEST(words("default", "x1234 ok!?") == (V{"x", "123", "4", " ok", "!?"}));
  BOOST_TEST(words("gpt-2", "x1234 ok!?") == (V{"x", "1234", " ok", "!?"}));
  // BLOOM: the marks and the text between matches are pieces of their own.
  BOOST_TEST(words("bloom", "Hi, you (there)!") == (V{"Hi", ",", " you", " (", "there", ")!"}));
  BOOST_TEST(words("poro-chat", "a.b") == words("bloom", "a.b"));
  BOOST_TEST(words("gpt3-finnish", "a.b") == words("bloom", "a.b"));
  // DeepSeek-LLM's mark rule (ASCII '!' to '/' and ':' to '~') also takes ASCII letters, so it cuts the pieces of
  // its letter rule again; llama.cpp keeps the digit run that the tokenizer.json splits.
  BOOST_TEST(words("deepseek-llm", "Größe 42\n") == (V{"Gr", "öß", "e", " ", "42", "\n"}));
  BOOST_TEST(words("deepseek-coder", "Größe 42") == (V{"Größe", " ", "4", "2"}));
  BOOST_TEST(words("deepseek-v3", "x12345 灯台") == (V{"x", "123", "45", " ", "灯台"}));
  BOOST_TEST(words("minerva-7b", "a1") == (V{"a", "1"}));
  for (const char* refused : {"gpt2", "minerva", "no-such-thing", ""}) {
    try {
      tok::PreTokenizer::for_gguf_name(refused);
      BOOST_ERROR("'" << refused << "' was accepted");
    } catch (const std::invalid_argument& e) {
      BOOST_TEST(std::string(e.what()).find("unknown pre-tokenizer '" + std::string(refused) + "'") !=
                 std::string::npos);
    }
  }
}

// Gemma's GGUF vocabulary is SentencePiece ("llama") without the space prefix; its turns end with <end_of_turn>,
// which a converter may write as a user-defined token. As llama.cpp, Corolla then makes it a control token: it ends
// generation, the chat template finds it, and it is read from text only as special-token text.
BOOST_AUTO_TEST_CASE(gemma_shaped_sentencepiece_vocabulary) {
  const std::vector<std::string> tokens = {"<pad>",         "<eos>",        "<bos>", "<unk>", "<start_of_turn>",
                                           "<end_of_turn>", "\xE2\x96\x81", "H",     "i",     "Hi",
                                           "\xE2\x96\x81Hi"};
  const std::vector<int32_t> types = {3, 3, 3, 2, 4, 4, 1, 1, 1, 1, 1};
  std::string type_bytes;
  for (int32_t t : types) test::append_le<int32_t>(type_bytes, t);
  test::GgufBuilder g;
  g.str("tokenizer.ggml.model", "llama")
      .strings("tokenizer.ggml.tokens", tokens)
      .floats("tokenizer.ggml.scores", {0, 0, 0, 0, 0, 0, -1, -2, -3, -4, -5})
      .array("tokenizer.ggml.token_type", test::gguf_i32, types.size(), type_bytes)
      .u32("tokenizer.ggml.bos_token_id", 2)
      .u32("tokenizer.ggml.eos_token_id", 1)
      .str("tokenizer.chat_template", chat_golden().at("templates").at("gemma2").at("template").get<std::string>());
  // add_space_prefix = false, as Gemma's converter writes it (a bool: GGUF type 7)
  ++g.n_kv;
  test::append_gguf_string(g.kv, "tokenizer.ggml.add_space_prefix");
  test::append_le<uint32_t>(g.kv, 7);
  g.kv += '\0';
  const Tokenizer tok = Tokenizer::from_gguf(*GgufFile::parse(MappedFile::from_bytes("gemma.gguf", g.bytes())));
  BOOST_TEST(tok.encode("Hi", {.add_special = false}) == (std::vector<int32_t>{9}));  // no "▁" prefix
  BOOST_TEST(tok.encode("Hi") == (std::vector<int32_t>{2, 9}));
  BOOST_TEST(tok.is_eos(5));
  BOOST_TEST(tok.is_special(5));
  BOOST_TEST(!tok.is_eos(4));
  BOOST_TEST(tok.encode("<start_of_turn>Hi<end_of_turn>", {.add_special = false, .parse_special = true}) ==
             (std::vector<int32_t>{4, 9, 5}));
  const ChatTemplate chat = ChatTemplate::for_tokenizer(tok);
  BOOST_TEST(chat.format() == ChatFormat::gemma);
  BOOST_TEST(chat.end_of_turn_id() == 5);
  const std::vector<ChatMessage> hi = {{"user", "Hi"}};
  const auto ids = tok.encode(chat.render(hi, true), {.add_special = false, .parse_special = true});
  BOOST_TEST(ids.front() == 2);  // BOS, written by the template
  BOOST_TEST(ids[1] == 4);
}

// llama.cpp gives a Phi-3 vocabulary's special tokens RSTRIP (they swallow the whitespace after them, as Phi-3's
// tokenizer.json says of its added tokens), keyed on general.name containing "phi-3" or "phi3" since nothing in
// the vocabulary itself tells; <unk>, <s> and <|endoftext|> keep theirs. Any other name keeps the whitespace.
BOOST_AUTO_TEST_CASE(a_phi3_vocabulary_strips_the_whitespace_after_special_tokens) {
  const std::vector<std::string> tokens = {"<unk>",        "<s>", "</s>", "<|user|>", "<|end|>",        "<|endoftext|>",
                                           "\xE2\x96\x81", "H",   "i",    "Hi",       "\xE2\x96\x81Hi", "<0x0A>"};
  const std::vector<int32_t> types = {2, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 6};
  std::string type_bytes;
  for (int32_t t : types) test::append_le<int32_t>(type_bytes, t);
  auto vocabulary = [&](const std::string& name) {
    test::GgufBuilder g;
    g.str("general.name", name)
        .str("tokenizer.ggml.model", "llama")
        .strings("tokenizer.ggml.tokens", tokens)
        .floats("tokenizer.ggml.scores", {0, 0, 0, 0, 0, 0, -1, -2, -3, -4, -5, 0})
        .array("tokenizer.ggml.token_type", test::gguf_i32, types.size(), type_bytes)
        .u32("tokenizer.ggml.bos_token_id", 1)
        .u32("tokenizer.ggml.eos_token_id", 2);
    return Tokenizer::from_gguf(*GgufFile::parse(MappedFile::from_bytes("v.gguf", g.bytes())));
  };
  const EncodeOptions specials{.add_special = false, .parse_special = true};
  const Tokenizer phi3 = vocabulary("Phi-3-mini-4k-instruct");
  // "<|user|>\nHi<|end|>\n": the newlines after <|user|> and <|end|> are swallowed; "Hi" then starts a word.
  BOOST_TEST(phi3.encode("<|user|>\nHi<|end|>\n", specials) == (std::vector<int32_t>{3, 10, 4}));
  // <|endoftext|> keeps the whitespace after it (byte fallback for the newline).
  BOOST_TEST(phi3.encode("<|endoftext|>\nHi", specials) == (std::vector<int32_t>{5, 6, 11, 9}));
  const Tokenizer other = vocabulary("Some-Model");
  BOOST_TEST(other.encode("<|user|>\nHi<|end|>\n", specials) == (std::vector<int32_t>{3, 6, 11, 9, 4, 6, 11}));
}
