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

#include "model/tokenizer/pretokenizer.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/weights/gguf_file.hpp"

using namespace corolla;
using json = nlohmann::json;
namespace bdata = boost::unit_test::data;

namespace {

const char* kVocabs[] = {"bpe-smollm", "bpe-llama3",       "bpe-qwen2",          "bpe-bloom",
                         "bpe-falcon", "bpe-deepseek-llm", "bpe-deepseek-coder", "bpe-deepseek-v3"};

std::string dir_of(const std::string& name) { return std::string(COROLLA_TEST_DATA) + "/tokenizers/" + name; }

json read_json(const std::string& path) {
  std::ifstream f(path);
  BOOST_REQUIRE_MESSAGE(f, "missing " << path << " (run tools/make_tokenizer_golden.py)");
  return json::parse(f);
}

std::vector<int32_t> ids_of(const json& j) { return j.get<std::vector<int32_t>>(); }

}  // namespace

BOOST_DATA_TEST_CASE(encodes_like_llama_cpp_and_hugging_face, bdata::make(kVocabs), name) {
  const Tokenizer tok = Tokenizer::from_gguf(*GgufFile::open(dir_of(name) + "/vocab.gguf"));
  const json gguf = read_json(dir_of(name) + "/gguf_golden.json");
  const json hf = read_json(dir_of(name) + "/golden.json");
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
    BOOST_TEST(plain == ids_of(c.at("ids")), name << " '" << gguf.at("pre").get<std::string>() << "': '" << text << "'");
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
      BOOST_TEST(std::string(e.what()).find("unknown pre-tokenizer '" + std::string(refused) + "'") != std::string::npos);
    }
  }
}
