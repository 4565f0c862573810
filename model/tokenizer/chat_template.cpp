#include "model/tokenizer/chat_template.hpp"

#include <ostream>
#include <stdexcept>

#include "model/tokenizer/tokenizer.hpp"
#include "model/tokenizer/unicode.hpp"

namespace corolla {
namespace {

constexpr const char* kAlternate = "Conversation roles must alternate user/assistant/user/assistant/...";

// Python's str.strip() (Jinja's trim filter and .strip()).
std::string py_strip(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e) {
    const tok::Utf8Step st = tok::utf8_step(s.substr(b));
    if (!st.valid || !tok::is_python_space(st.cp)) break;
    b += st.len;
  }
  while (e > b) {
    size_t start = e - 1;
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    const tok::Utf8Step st = tok::utf8_step(s.substr(start, e - start));
    if (!st.valid || !tok::is_python_space(st.cp)) break;
    e = start;
  }
  return std::string(s.substr(b, e - b));
}

// Python's str.strip('\n'), lstrip('\n') and rstrip('\n').
std::string_view strip_newlines(std::string_view s, bool left, bool right) {
  while (left && !s.empty() && s.front() == '\n') s.remove_prefix(1);
  while (right && !s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

// Jinja string-literal escapes in a piece of template text.
std::string unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    out += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
  }
  return out;
}

// ChatML's default system prompt: a literal "<|im_start|>system\n...<|im_end|>" whose text is plain (not built
// from the messages).
std::string chatml_default_system(std::string_view t) {
  constexpr std::string_view open = "<|im_start|>system", close = "<|im_end|>", expression = "'\"{}+";
  // The next close and the next expression character after a position are remembered, not searched again for
  // every opening: a template from a model file is read in one pass whatever it holds.
  size_t next_close = 0, next_expression = 0;
  bool close_known = false, expression_known = false;
  for (size_t at = t.find(open); at != std::string_view::npos; at = t.find(open, at + 1)) {
    size_t b = at + open.size();
    if (t.substr(b, 1) == "\n")
      b += 1;
    else if (t.substr(b, 2) == "\\n")
      b += 2;
    else
      continue;
    if (!close_known || next_close < b) next_close = t.find(close, b), close_known = true;
    if (next_close == std::string_view::npos) break;  // no later opening has a close either
    if (!expression_known || next_expression < b)
      next_expression = t.find_first_of(expression, b), expression_known = true;
    if (next_expression < next_close) continue;  // built from expressions
    return unescape(t.substr(b, next_close - b));
  }
  return {};
}

void check_alternation(const ChatMessage& m, size_t index) {
  if ((m.role == "user") != (index % 2 == 0)) throw std::invalid_argument(kAlternate);
}

// Qwen3's answers: the reasoning and the answer of a message that holds "</think>" (Python's
// content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n'), and the text after the last
// "</think>" without its leading newlines); without it, no reasoning and the whole content.
struct Reasoned {
  std::string_view reasoning, answer;
};
Reasoned split_reasoning(std::string_view content) {
  constexpr std::string_view close = "</think>", open = "<think>";
  const size_t first_close = content.find(close);
  if (first_close == std::string_view::npos) return {{}, content};
  std::string_view before = strip_newlines(content.substr(0, first_close), false, true);
  if (const size_t o = before.rfind(open); o != std::string_view::npos) before.remove_prefix(o + open.size());
  return {strip_newlines(before, true, false),
          strip_newlines(content.substr(content.rfind(close) + close.size()), true, false)};
}

void render_qwen3(std::span<const ChatMessage> messages, bool add_generation_prompt, const ChatOptions& options,
                  std::string& out) {
  if (!messages.empty() && messages[0].role == "system")
    out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";
  // The last question: the last user message that is not a tool's response.
  size_t last_query = messages.size() - 1;  // (wraps for no messages; then nothing below reads it)
  for (size_t i = messages.size(); i-- > 0;) {
    const std::string& c = messages[i].content;
    if (messages[i].role == "user" && !(c.starts_with("<tool_response>") && c.ends_with("</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" || (m.role == "system" && i > 0)) {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      const Reasoned r = split_reasoning(m.content);
      out += "<|im_start|>assistant\n";
      if (i > last_query && (i + 1 == messages.size() || !r.reasoning.empty())) {
        out += "<think>\n";
        out += strip_newlines(r.reasoning, true, true);
        out += "\n</think>\n\n";
      }
      out += r.answer;
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      throw std::invalid_argument("tool messages are not supported");
    }
  }
  if (add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (!options.enable_thinking) out += "<think>\n\n</think>\n\n";
  }
}

}  // namespace

std::string_view to_string(ChatFormat f) {
  switch (f) {
    case ChatFormat::chatml: return "chatml";
    case ChatFormat::llama3: return "llama3";
    case ChatFormat::llama2: return "llama2";
    case ChatFormat::mistral: return "mistral";
    case ChatFormat::qwen3: return "qwen3";
    case ChatFormat::gemma: return "gemma";
    case ChatFormat::phi3: return "phi3";
    case ChatFormat::phi3_original: return "phi3_original";
    case ChatFormat::phi4_mini: return "phi4_mini";
    case ChatFormat::phi4: return "phi4";
    case ChatFormat::deepseek: return "deepseek";
    case ChatFormat::falcon: return "falcon";
    case ChatFormat::plain: return "plain";
  }
  return "plain";
}

std::ostream& operator<<(std::ostream& os, ChatFormat format) { return os << to_string(format); }

ChatTemplate ChatTemplate::detect(std::string_view jinja, std::string bos, std::string eos) {
  ChatTemplate t;
  t.bos_ = std::move(bos);
  t.eos_ = std::move(eos);
  // Markers are read with Jinja's escapes undone: templates write a newline as "\n" or as the character itself.
  const std::string text = unescape(jinja);
  auto has = [&](std::initializer_list<std::string_view> markers) {
    for (std::string_view m : markers)
      if (text.find(m) == std::string::npos) return false;
    return true;
  };
  // The formats made of several fragments first: a template that only mentions another format's token in a
  // string (a system prompt, say) has none of its code.
  if (has({"<|im_start|>", "'<think>\n\n</think>\n\n'", "enable_thinking", "last_query_index", "reasoning_content"})) {
    t.format_ = ChatFormat::qwen3;
  } else if (has({"'<|im_start|>user<|im_sep|>", "<|im_start|>assistant<|im_sep|>'"})) {
    t.format_ = ChatFormat::phi4;
    t.user_opens_turn_ = has({"'<|im_end|><|im_start|>assistant<|im_sep|>'"});
  } else if (has({"'<start_of_turn>' + role", "'<start_of_turn>model\n'", "<end_of_turn>",
                  "raise_exception('System role not supported')"})) {
    t.format_ = ChatFormat::gemma;
  } else if (has({"'<|' + message['role'] + '|>' + message['content'] + '<|end|>'", "'<|assistant|>'"})) {
    t.format_ = ChatFormat::phi4_mini;
  } else if (has({"'<|system|>\n'", "'<|user|>\n'", "'<|assistant|>\n'", "'<|end|>\n'", "add_generation_prompt"})) {
    t.format_ = ChatFormat::phi3;
    t.skip_empty_system_ = has({"message['role'] == 'system' and message['content']"});
  } else if (has({"'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'",
                  "message['content'] + '<|end|>' + '\n'"}) &&
             !has({"<|system|>"})) {
    t.format_ = ChatFormat::phi3_original;
    t.bos_first_ = has({"{{ bos_token }}"});
  } else if (has({"'User: ' + message['content'] + '\n\n'", "'Assistant: ' + message['content'] + eos_token",
                  "'Assistant:'"})) {
    t.format_ = ChatFormat::deepseek;
  } else if (has({"'User: \n' + message['content']", "'Falcon:\n'", "'Falcon:'"})) {
    t.format_ = ChatFormat::falcon;
  } else if (has({"<|im_start|>"})) {
    t.format_ = ChatFormat::chatml;
    t.default_system_ = chatml_default_system(jinja);
  } else if (has({"<|start_header_id|>"})) {
    t.format_ = ChatFormat::llama3;
  } else if (has({"[INST]"})) {
    t.format_ = has({"<<SYS>>"}) ? ChatFormat::llama2 : ChatFormat::mistral;
  }
  return t;
}

std::string_view ChatTemplate::end_of_turn() const {
  switch (format_) {
    case ChatFormat::chatml:
    case ChatFormat::qwen3:
    case ChatFormat::phi4: return "<|im_end|>";
    case ChatFormat::llama3: return "<|eot_id|>";
    case ChatFormat::gemma: return "<end_of_turn>";
    case ChatFormat::phi3:
    case ChatFormat::phi3_original:
    case ChatFormat::phi4_mini: return "<|end|>";
    default: return "";  // EOS ends the turn
  }
}

ChatTemplate ChatTemplate::for_tokenizer(const Tokenizer& tok) {
  const std::string bos = tok.bos_id() >= 0 ? tok.piece(tok.bos_id()) : "";
  const std::string eos = tok.eos_id() >= 0 ? tok.piece(tok.eos_id()) : "";
  ChatTemplate t = detect(tok.chat_template(), bos, eos);
  if (!t.end_of_turn().empty()) t.end_of_turn_id_ = tok.find_token(t.end_of_turn()).value_or(-1);
  return t;
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                 const ChatOptions& options) const {
  std::string out;
  switch (format_) {
    case ChatFormat::qwen3: render_qwen3(messages, add_generation_prompt, options, out); break;

    case ChatFormat::gemma:
      if (!messages.empty() && messages[0].role == "system") throw std::invalid_argument("System role not supported");
      out += bos_;
      for (size_t i = 0; i < messages.size(); ++i) {
        check_alternation(messages[i], i);
        const std::string role = messages[i].role == "assistant" ? "model" : messages[i].role;
        out += "<start_of_turn>" + role + "\n" + py_strip(messages[i].content) + "<end_of_turn>\n";
      }
      if (add_generation_prompt) out += "<start_of_turn>model\n";
      break;

    case ChatFormat::phi3:
      for (const ChatMessage& m : messages) {
        const bool shown =
            m.role == "system" ? !(skip_empty_system_ && m.content.empty()) : m.role == "user" || m.role == "assistant";
        if (shown) out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
      }
      out += add_generation_prompt ? "<|assistant|>\n" : eos_;
      break;

    case ChatFormat::phi3_original:  // the generation prompt is always there: each user turn opens the answer
      if (bos_first_) out += bos_;
      for (const ChatMessage& m : messages) {
        if (m.role == "user")
          out += "<|user|>\n" + m.content + "<|end|>\n<|assistant|>\n";
        else if (m.role == "assistant")
          out += m.content + "<|end|>\n";
      }
      break;

    case ChatFormat::phi4_mini:
      for (const ChatMessage& m : messages) out += "<|" + m.role + "|>" + m.content + "<|end|>";
      out += add_generation_prompt ? "<|assistant|>" : eos_;
      break;

    case ChatFormat::phi4:
      for (const ChatMessage& m : messages) {
        if (m.role != "system" && m.role != "user" && m.role != "assistant") continue;
        if (user_opens_turn_ && m.role == "user")
          out += "<|im_start|>user<|im_sep|>" + m.content + "<|im_end|><|im_start|>assistant<|im_sep|>";
        else if (user_opens_turn_ && m.role == "assistant")
          out += m.content + "<|im_end|>";
        else
          out += "<|im_start|>" + m.role + "<|im_sep|>" + m.content + "<|im_end|>";
      }
      if (add_generation_prompt && !user_opens_turn_) out += "<|im_start|>assistant<|im_sep|>";
      break;

    case ChatFormat::deepseek:
      out += bos_;
      for (const ChatMessage& m : messages) {
        if (m.role == "user")
          out += "User: " + m.content + "\n\n";
        else if (m.role == "assistant")
          out += "Assistant: " + m.content + eos_;
        else if (m.role == "system")
          out += m.content + "\n\n";
      }
      if (add_generation_prompt) out += "Assistant:";
      break;

    case ChatFormat::falcon:
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "user")
          out += "User: \n" + m.content + "\n";
        else if (m.role == "system")
          out += "System: " + m.content + "\n";
        else if (m.role == "assistant")
          out += "Falcon:\n" + m.content + "\n";
        if (add_generation_prompt && i + 1 == messages.size()) out += "Falcon:\n";
      }
      break;

    case ChatFormat::chatml:
      for (size_t i = 0; i < messages.size(); ++i) {
        if (i == 0 && messages[0].role != "system" && !default_system_.empty())
          out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
        out += "<|im_start|>" + messages[i].role + "\n" + messages[i].content + "<|im_end|>\n";
      }
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;

    case ChatFormat::llama3:
      for (size_t i = 0; i < messages.size(); ++i) {
        if (i == 0) out += bos_;
        out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n" + py_strip(messages[i].content) +
               "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;

    case ChatFormat::llama2: {
      const bool has_system = !messages.empty() && messages[0].role == "system";
      const auto turns = messages.subspan(has_system ? 1 : 0);
      for (size_t i = 0; i < turns.size(); ++i) {
        check_alternation(turns[i], i);
        std::string content = turns[i].content;
        if (i == 0 && has_system) content = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n" + content;
        if (turns[i].role == "user")
          out += bos_ + "[INST] " + py_strip(content) + " [/INST]";
        else if (turns[i].role == "assistant")
          out += " " + py_strip(content) + " " + eos_;
      }
      break;
    }

    case ChatFormat::mistral:
      out += bos_;
      for (size_t i = 0; i < messages.size(); ++i) {
        check_alternation(messages[i], i);
        if (messages[i].role == "user")
          out += "[INST] " + messages[i].content + " [/INST]";
        else if (messages[i].role == "assistant")
          out += messages[i].content + eos_;
        else
          throw std::invalid_argument("Only user and assistant roles are supported!");
      }
      break;

    case ChatFormat::plain:
      for (const ChatMessage& m : messages) {
        std::string role = m.role;
        if (!role.empty() && role[0] >= 'a' && role[0] <= 'z') role[0] = static_cast<char>(role[0] - 'a' + 'A');
        out += role + ": " + m.content + "\n";
      }
      if (add_generation_prompt) out += "Assistant:";
      break;
  }
  return out;
}

}  // namespace corolla
