// What the tokenizer fuzz targets do with a tokenizer a file described: encode a few texts (plain, with special
// tokens, bytes outside ASCII) and decode what came out and every id of a small range, none of which may crash.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "model/tokenizer/tokenizer.hpp"

namespace corolla::fuzz {

inline void exercise(const Tokenizer& t) {
  for (std::string_view text : {"Hello world", " the  cat\n\n<s></s><|im_end|>", "\xc3\xa9t\xc3\xa9 \xe2\x96\x81 \xf0\x9f\x98\x80", ""}) {
    const std::vector<int32_t> ids = t.encode(text);
    for (int32_t id : ids)
      if (id < 0 || static_cast<size_t>(id) >= t.vocab_size()) __builtin_trap();
    (void)t.decode(ids);
    (void)t.decode(ids, true);
  }
  std::vector<int32_t> range;
  for (size_t id = 0; id < t.vocab_size() && id < 64; ++id) range.push_back(static_cast<int32_t>(id));
  (void)t.decode(range);
}

}  // namespace corolla::fuzz
