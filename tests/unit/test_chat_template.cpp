// Chat templates against transformers' apply_chat_template with the models' real Jinja templates
// (tests/data/chat_templates/golden.json, written by tools/make_tokenizer_golden.py).
#define BOOST_TEST_MODULE chat_template
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "model/tokenizer/chat_template.hpp"
#include "model/tokenizer/tokenizer.hpp"

using namespace corolla;
using json = nlohmann::json;

namespace {

json golden() {
  std::ifstream f(std::string(COROLLA_TEST_DATA) + "/chat_templates/golden.json");
  BOOST_REQUIRE(f);
  return json::parse(f);
}

std::vector<ChatMessage> conversation(const json& j) {
  std::vector<ChatMessage> out;
  for (const json& m : j) out.push_back({m.at("role"), m.at("content")});
  return out;
}

std::string text_or_empty(const json& j) { return j.is_string() ? j.get<std::string>() : std::string(); }

}  // namespace

BOOST_AUTO_TEST_CASE(formats_are_recognised_from_the_templates) {
  const json g = golden();
  const std::map<std::string, ChatFormat> expected = {{"smollm2", ChatFormat::chatml},
                                                      {"qwen2", ChatFormat::chatml},
                                                      {"llama3", ChatFormat::llama3},
                                                      {"llama2", ChatFormat::llama2},
                                                      {"mistral", ChatFormat::mistral},
                                                      {"gemma2", ChatFormat::gemma},
                                                      {"phi3", ChatFormat::phi3},
                                                      {"phi3.5", ChatFormat::phi3},
                                                      {"phi3-original", ChatFormat::phi3_original},
                                                      {"phi3-medium", ChatFormat::phi3_original},
                                                      {"phi4-mini", ChatFormat::phi4_mini},
                                                      {"phi4", ChatFormat::phi4},
                                                      {"phi4-original", ChatFormat::phi4},
                                                      {"qwen3", ChatFormat::qwen3},
                                                      {"deepseek-llm", ChatFormat::deepseek},
                                                      {"falcon2", ChatFormat::falcon}};
  BOOST_TEST(g.at("templates").size() == expected.size());
  for (const auto& [name, spec] : g.at("templates").items()) {
    const auto t = ChatTemplate::detect(spec.at("template").get<std::string>(), "", "");
    BOOST_TEST(to_string(t.format()) == to_string(expected.at(name)), name);
  }
  BOOST_TEST(ChatTemplate::detect(g["templates"]["smollm2"]["template"].get<std::string>(), "", "").default_system() ==
             "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  BOOST_TEST(ChatTemplate::detect(g["templates"]["qwen2"]["template"].get<std::string>(), "", "").default_system() ==
             "You are a helpful assistant.");
  BOOST_TEST(ChatTemplate::detect("", "", "").format() == ChatFormat::plain);
  BOOST_TEST(ChatTemplate::detect("{{ messages }}", "", "").format() == ChatFormat::plain);
}

BOOST_AUTO_TEST_CASE(rendering_matches_transformers) {
  const json g = golden();
  size_t passed = 0;
  for (const json& c : g.at("cases")) {
    const std::string name = c.at("template");
    const json& spec = g.at("templates").at(name);
    const auto t = ChatTemplate::detect(spec.at("template").get<std::string>(), text_or_empty(spec.at("bos")),
                                        text_or_empty(spec.at("eos")));
    const auto messages = conversation(g.at("conversations").at(c.at("conversation").get<size_t>()));
    const bool gen = c.at("add_generation_prompt");
    ChatOptions options;
    if (c.contains("kwargs")) options.enable_thinking = c.at("kwargs").at("enable_thinking");
    const std::string label = name + " conversation " + c.at("conversation").dump() + (gen ? " +gen" : "") +
                              (c.contains("kwargs") ? " " + c.at("kwargs").dump() : "");
    if (c.contains("error")) {
      try {
        t.render(messages, gen, options);
        BOOST_ERROR(label << ": expected the error '" << c.at("error").get<std::string>() << "'");
      } catch (const std::invalid_argument& e) {
        BOOST_TEST(std::string(e.what()) == c.at("error").get<std::string>(), label);
        ++passed;
      }
    } else {
      const std::string got = t.render(messages, gen, options);
      BOOST_TEST(got == c.at("text").get<std::string>(), label);
      passed += got == c.at("text").get<std::string>();
    }
  }
  BOOST_TEST_MESSAGE(passed << "/" << g.at("cases").size() << " renderings match transformers");
}

BOOST_AUTO_TEST_CASE(templates_come_from_the_tokenizer_config) {
  const std::string dir = std::string(COROLLA_TEST_DATA) + "/tokenizers/";
  const auto smollm = ChatTemplate::for_tokenizer(Tokenizer::from_hf_dir(dir + "bpe-smollm"));
  BOOST_TEST(smollm.format() == ChatFormat::chatml);
  BOOST_TEST(!smollm.default_system().empty());
  const auto llama3 = ChatTemplate::for_tokenizer(Tokenizer::from_hf_dir(dir + "bpe-llama3"));
  BOOST_TEST(llama3.format() == ChatFormat::llama3);
  const std::vector<ChatMessage> hello = {{"user", "Hi"}};
  BOOST_TEST(llama3.render(hello, true) ==
             "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
             "<|start_header_id|>assistant<|end_header_id|>\n\n");
  const auto llama2 = ChatTemplate::for_tokenizer(Tokenizer::from_hf_dir(dir + "spm-legacy"));
  BOOST_TEST(llama2.format() == ChatFormat::llama2);
  BOOST_TEST(llama2.render(hello, true) == "<s>[INST] Hi [/INST]");
  const auto mistral = ChatTemplate::for_tokenizer(Tokenizer::from_hf_dir(dir + "spm-metaspace"));
  BOOST_TEST(mistral.format() == ChatFormat::mistral);
}

// A template that only mentions another format's tokens in a string keeps its own format; a family's template
// whose code is not one Corolla renders exactly is plain, not its neighbour's.
BOOST_AUTO_TEST_CASE(markers_in_strings_do_not_change_the_format) {
  const json g = golden();
  const std::string chatml =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\nNever write <start_of_turn>, <|user|>, <|end|>, [INST], <think>\n\n</think>\n\n, "
      "User: or Falcon:.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
      "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  BOOST_TEST(ChatTemplate::detect(chatml, "", "").format() == ChatFormat::chatml);
  std::string gemma = g["templates"]["gemma2"]["template"];
  gemma.insert(0, "{# <|im_start|> and <|start_header_id|> are not ours #}");
  BOOST_TEST(ChatTemplate::detect(gemma, "", "").format() == ChatFormat::gemma);
  // Gemma 3's template takes a system message (it prefixes the first user turn): not Gemma 2's refusal.
  std::string gemma3 = g["templates"]["gemma2"]["template"];
  const std::string refusal = "{{ raise_exception('System role not supported') }}";
  gemma3.replace(gemma3.find(refusal), refusal.size(), "");
  BOOST_TEST(ChatTemplate::detect(gemma3, "", "").format() == ChatFormat::plain);
  // Qwen2.5's ChatML (tools, no thinking) stays ChatML with its default system prompt.
  std::string qwen3 = g["templates"]["qwen3"]["template"];
  BOOST_TEST(ChatTemplate::detect(qwen3, "", "").default_system().empty());
  for (size_t at; (at = qwen3.find("enable_thinking")) != std::string::npos;) qwen3.replace(at, 15, "thinking_off");
  BOOST_TEST(ChatTemplate::detect(qwen3, "", "").format() == ChatFormat::chatml);
}

BOOST_AUTO_TEST_CASE(end_of_turn_tokens_come_from_the_vocabulary) {
  const std::string dir = std::string(COROLLA_TEST_DATA) + "/tokenizers/";
  const Tokenizer smollm = Tokenizer::from_hf_dir(dir + "bpe-smollm");
  const auto chatml = ChatTemplate::for_tokenizer(smollm);
  BOOST_TEST(chatml.end_of_turn() == "<|im_end|>");
  BOOST_TEST(chatml.end_of_turn_id() == *smollm.find_token("<|im_end|>"));
  const Tokenizer llama3 = Tokenizer::from_hf_dir(dir + "bpe-llama3");
  BOOST_TEST(ChatTemplate::for_tokenizer(llama3).end_of_turn_id() == *llama3.find_token("<|eot_id|>"));
  // DeepSeek's turns end with EOS.
  const auto deepseek = ChatTemplate::for_tokenizer(Tokenizer::from_hf_dir(dir + "bpe-deepseek-llm"));
  BOOST_TEST(deepseek.format() == ChatFormat::deepseek);
  BOOST_TEST(deepseek.end_of_turn().empty());
  BOOST_TEST(deepseek.end_of_turn_id() == -1);
  const std::vector<ChatMessage> hello = {{"user", "Hi"}};
  BOOST_TEST(deepseek.render(hello, true) == "<｜begin▁of▁sentence｜>User: Hi\n\nAssistant:");
  // A format whose end-of-turn token the vocabulary lacks has none.
  const auto gemma = ChatTemplate::detect(golden()["templates"]["gemma2"]["template"].get<std::string>(), "", "");
  BOOST_TEST(gemma.end_of_turn() == "<end_of_turn>");
  BOOST_TEST(gemma.end_of_turn_id() == -1);
}

BOOST_AUTO_TEST_CASE(plain_fallback) {
  const auto t = ChatTemplate::detect("", "", "");
  const std::vector<ChatMessage> m = {{"system", "Be brief."}, {"user", "Hi"}};
  BOOST_TEST(t.render(m, true) == "System: Be brief.\nUser: Hi\nAssistant:");
}

// A template comes from the model file. Before: each "<|im_start|>system\n" searched again to the end for its
// "<|im_end|>", so 4 MB of them took minutes (quadratic; killed after 60 s); now one pass.
BOOST_AUTO_TEST_CASE(a_hostile_template_is_read_in_linear_time) {
  std::string jinja;
  while (jinja.size() < (size_t{4} << 20)) jinja += "<|im_start|>system\n";
  const auto start = std::chrono::steady_clock::now();
  const ChatTemplate t = ChatTemplate::detect(jinja, "<s>", "</s>");
  BOOST_TEST(t.format() == ChatFormat::chatml);
  BOOST_TEST(t.default_system().empty());
  // One far close after an expression: every opening's text ran to it.
  const ChatTemplate far = ChatTemplate::detect(jinja + "{<|im_end|>", "<s>", "</s>");
  BOOST_TEST(far.default_system().empty());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  BOOST_TEST(seconds < 5.0);
}
