// What the tokenizer fuzz targets do with a tokenizer a file described: encode a few texts (plain, with special
// tokens, bytes outside ASCII) and decode what came out and every id of a small range, and render a conversation
// in the chat template the file declares, none of which may crash.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "model/tokenizer/chat_template.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace corolla::fuzz {

inline void exercise(const Tokenizer& t) {
  for (std::string_view text :
       {"Hello world", " the  cat\n\n<s></s><|im_end|>", "\xc3\xa9t\xc3\xa9 \xe2\x96\x81 \xf0\x9f\x98\x80", ""}) {
    const std::vector<int32_t> ids = t.encode(text);
    for (int32_t id : ids)
      if (id < 0 || static_cast<size_t>(id) >= t.vocab_size()) __builtin_trap();
    (void)t.decode(ids);
    (void)t.decode(ids, true);
  }
  std::vector<int32_t> range;
  for (size_t id = 0; id < t.vocab_size() && id < 64; ++id) range.push_back(static_cast<int32_t>(id));
  (void)t.decode(range);
  const ChatTemplate chat = ChatTemplate::for_tokenizer(t);
  const std::vector<ChatMessage> conversation = {
      {"system", "s"}, {"user", " u "}, {"assistant", "<think>\nr</think>a"}, {"user", "v"}};
  try {
    (void)t.encode(chat.render(conversation, true, {.enable_thinking = false}), {.add_special = false});
  } catch (const std::invalid_argument&) {  // a template's refusal (Gemma's of a system message)
  }
}

}  // namespace corolla::fuzz
