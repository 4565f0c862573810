// Chat templates: renders a conversation the way the model's own Jinja template does, for the formats Corolla
// knows. The format is recognised from the template string in the model's metadata (tokenizer.chat_template in
// GGUF, chat_template in tokenizer_config.json) by its distinctive markers; no Jinja interpreter is involved.
//
//   chatml   <|im_start|>role\ncontent<|im_end|>\n   (SmolLM2, Qwen2; with the template's default system
//            prompt when the conversation has none)
//   llama3   <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>, BOS first, content trimmed
//   llama2   <s>[INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] assistant </s>
//   mistral  <s>[INST] user [/INST]assistant</s>   (no system role)
//   plain    "Role: content" lines, for models without a template
#pragma once

#include <iosfwd>
#include <span>
#include <string>
#include <string_view>

namespace corolla {

class Tokenizer;

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatFormat { chatml, llama3, llama2, mistral, plain };
std::string_view to_string(ChatFormat format);
std::ostream& operator<<(std::ostream& os, ChatFormat format);

class ChatTemplate {
 public:
  // Recognises the format of a Jinja template (empty or unknown: plain). `bos` and `eos` are the texts of the
  // model's BOS and EOS tokens, which some formats write.
  static ChatTemplate detect(std::string_view jinja, std::string bos, std::string eos);
  // The tokenizer's template, BOS and EOS.
  static ChatTemplate for_tokenizer(const Tokenizer& tokenizer);

  ChatFormat format() const { return format_; }
  // ChatML's system prompt for conversations that bring none (empty when the template has none).
  const std::string& default_system() const { return default_system_; }

  // The prompt text; tokenize it with special-token parsing on and without adding BOS (the text has it when
  // the format wants it). Throws std::invalid_argument where the template raises an exception (roles out of
  // order, a role the format does not support), with the template's message.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

 private:
  ChatFormat format_ = ChatFormat::plain;
  std::string bos_, eos_, default_system_;
};

}  // namespace corolla
