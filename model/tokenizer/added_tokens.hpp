// Added and special tokens (Hugging Face's AddedVocabulary, GGUF's control/user-defined tokens): they are cut
// out of the text before normalization and pre-tokenization, the longest one first at each position.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace corolla::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // a control token: matched only when special-token text is parsed
  bool lstrip = false;       // swallows the whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // matches only when not inside a word
};

// A piece of the input: either text to tokenize, or an added token already identified.
struct Fragment {
  std::string_view text;
  int32_t token = -1;  // >= 0 for a token
};

class AddedTokenMatcher {
 public:
  void add(AddedToken token);
  bool empty() const { return tokens_.empty(); }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

  // Splits `text` into fragments. Special tokens are matched only when `parse_special`.
  void split(std::string_view text, bool parse_special, std::vector<Fragment>& out) const;

 private:
  std::vector<AddedToken> tokens_;
  std::vector<std::vector<uint32_t>> by_first_byte_ = std::vector<std::vector<uint32_t>>(256);  // longest first
};

}  // namespace corolla::tok
