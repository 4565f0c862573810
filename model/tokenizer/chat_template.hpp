// Chat templates: renders a conversation the way the model's own Jinja template does, for the formats Corolla
// knows. The format is recognised from the template string in the model's metadata (tokenizer.chat_template in
// GGUF, chat_template in tokenizer_config.json) by the code fragments that make it, not by a single marker that a
// string of another template could mention; no Jinja interpreter is involved.
//
//   chatml    <|im_start|>role\ncontent<|im_end|>\n   (SmolLM2, Qwen2; with the template's default system
//             prompt when the conversation has none)
//   qwen3     ChatML without a default system prompt; reasoning (<think>...</think>) is dropped from the answers
//             before the last question and kept after it; enable_thinking = false adds an empty think block
//             after the generation prompt
//   llama3    <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>, BOS first, content trimmed
//   llama2    <s>[INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] assistant </s>
//   mistral   <s>[INST] user [/INST]assistant</s>   (no system role)
//   gemma     <bos><start_of_turn>user\ncontent<end_of_turn>\n<start_of_turn>model\n...   (Gemma, Gemma 2: the
//             assistant is "model", content trimmed, no system role, roles alternate)
//   phi3      <|system|>\n...<|end|>\n<|user|>\n...<|end|>\n<|assistant|>\n   (Phi-3 mini/medium as published
//             since mid-2024, Phi-3.5 which leaves out an empty system message; EOS when no generation prompt)
//   phi3_original  <s><|user|>\n...<|end|>\n<|assistant|>\n...<|end|>\n   (the first Phi-3-mini and Phi-3-medium:
//             each user turn opens the assistant's, system messages dropped; Phi-3-medium without BOS)
//   phi4_mini <|role|>content<|end|>...<|assistant|>   (Phi-4-mini; EOS when no generation prompt)
//   phi4      <|im_start|>role<|im_sep|>content<|im_end|>   (Phi-4; as first released, each user turn opened the
//             assistant's)
//   deepseek  <BOS>system\n\nUser: ...\n\nAssistant: ...<EOS>   (DeepSeek-LLM chat)
//   falcon    System: ...\nUser: \n...\nFalcon:\n...\n   (Falcon 2; Falcon-7B/40B-instruct publish no template)
//   plain     "Role: content" lines, for models without a template
#pragma once

#include <cstdint>
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

// What the caller may pass to a template besides the messages (transformers' apply_chat_template kwargs).
struct ChatOptions {
  bool enable_thinking = true;  // Qwen3's switch; false asks for an answer without reasoning
};

enum class ChatFormat {
  chatml,
  qwen3,
  llama3,
  llama2,
  mistral,
  gemma,
  phi3,
  phi3_original,
  phi4_mini,
  phi4,
  deepseek,
  falcon,
  plain
};
std::string_view to_string(ChatFormat format);
std::ostream& operator<<(std::ostream& os, ChatFormat format);

class ChatTemplate {
 public:
  // Recognises the format of a Jinja template (empty or unknown: plain). `bos` and `eos` are the texts of the
  // model's BOS and EOS tokens, which some formats write.
  static ChatTemplate detect(std::string_view jinja, std::string bos, std::string eos);
  // The tokenizer's template, BOS and EOS, and the id of the format's end-of-turn token in its vocabulary.
  static ChatTemplate for_tokenizer(const Tokenizer& tokenizer);

  ChatFormat format() const { return format_; }
  // ChatML's system prompt for conversations that bring none (empty when the template has none).
  const std::string& default_system() const { return default_system_; }
  // The token that closes a turn ("<|im_end|>", "<end_of_turn>", "<|end|>", ...; empty where EOS does): a model
  // answering in this format stops there, whatever its configuration lists as EOS.
  std::string_view end_of_turn() const;
  // Its id in the tokenizer's vocabulary (for_tokenizer), or -1.
  int32_t end_of_turn_id() const { return end_of_turn_id_; }

  // The prompt text; tokenize it with special-token parsing on and without adding BOS (the text has it when
  // the format wants it). Throws std::invalid_argument where the template raises an exception (roles out of
  // order, a role the format does not support), with the template's message.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                     const ChatOptions& options = {}) const;

 private:
  ChatFormat format_ = ChatFormat::plain;
  std::string bos_, eos_, default_system_;
  bool bos_first_ = false;          // phi3_original: the template writes BOS (Phi-3-mini's did, Phi-3-medium's not)
  bool skip_empty_system_ = false;  // phi3: Phi-3.5 leaves out a system message without content
  bool user_opens_turn_ = false;    // phi4: each user turn ends by opening the assistant's (first release)
  int32_t end_of_turn_id_ = -1;
};

}  // namespace corolla
