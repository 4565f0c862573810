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
    if (t.substr(b, 1) == "\n") b += 1;
    else if (t.substr(b, 2) == "\\n") b += 2;
    else continue;
    if (!close_known || next_close < b) next_close = t.find(close, b), close_known = true;
    if (next_close == std::string_view::npos) break;  // no later opening has a close either
    if (!expression_known || next_expression < b) next_expression = t.find_first_of(expression, b), expression_known = true;
    if (next_expression < next_close) continue;  // built from expressions
    return unescape(t.substr(b, next_close - b));
  }
  return {};
}

void check_alternation(const ChatMessage& m, size_t index) {
  if ((m.role == "user") != (index % 2 == 0)) throw std::invalid_argument(kAlternate);
}

}  // namespace

std::string_view to_string(ChatFormat f) {
  switch (f) {
    case ChatFormat::chatml: return "chatml";
    case ChatFormat::llama3: return "llama3";
    case ChatFormat::llama2: return "llama2";
    case ChatFormat::mistral: return "mistral";
    case ChatFormat::plain: return "plain";
  }
  return "plain";
}

std::ostream& operator<<(std::ostream& os, ChatFormat format) { return os << to_string(format); }

ChatTemplate ChatTemplate::detect(std::string_view jinja, std::string bos, std::string eos) {
  ChatTemplate t;
  t.bos_ = std::move(bos);
  t.eos_ = std::move(eos);
  if (jinja.find("<|im_start|>") != std::string_view::npos) {
    t.format_ = ChatFormat::chatml;
    t.default_system_ = chatml_default_system(jinja);
  } else if (jinja.find("<|start_header_id|>") != std::string_view::npos) {
    t.format_ = ChatFormat::llama3;
  } else if (jinja.find("[INST]") != std::string_view::npos) {
    t.format_ = jinja.find("<<SYS>>") != std::string_view::npos ? ChatFormat::llama2 : ChatFormat::mistral;
  }
  return t;
}

ChatTemplate ChatTemplate::for_tokenizer(const Tokenizer& tok) {
  const std::string bos = tok.bos_id() >= 0 ? tok.piece(tok.bos_id()) : "";
  const std::string eos = tok.eos_id() >= 0 ? tok.piece(tok.eos_id()) : "";
  return detect(tok.chat_template(), bos, eos);
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string out;
  switch (format_) {
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
        if (turns[i].role == "user") out += bos_ + "[INST] " + py_strip(content) + " [/INST]";
        else if (turns[i].role == "assistant") out += " " + py_strip(content) + " " + eos_;
      }
      break;
    }

    case ChatFormat::mistral:
      out += bos_;
      for (size_t i = 0; i < messages.size(); ++i) {
        check_alternation(messages[i], i);
        if (messages[i].role == "user") out += "[INST] " + messages[i].content + " [/INST]";
        else if (messages[i].role == "assistant") out += messages[i].content + eos_;
        else throw std::invalid_argument("Only user and assistant roles are supported!");
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
