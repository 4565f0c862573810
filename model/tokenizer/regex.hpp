// A compiled Unicode-aware regular expression (PCRE2 with UTF and UCP, JIT-compiled when available), used by
// the pre-tokenizers. \p{L}, \p{N}, \s and friends follow the Unicode character properties, as in Hugging Face
// tokenizers (Oniguruma) and llama.cpp.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace corolla::tok {

class Regex {
 public:
  // `literal` matches the pattern as plain text. Throws std::invalid_argument naming the pattern on error.
  explicit Regex(const std::string& pattern, bool literal = false);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  const std::string& pattern() const { return pattern_; }

  // Every non-overlapping non-empty match in `text` (which must be valid UTF-8), as [begin, end) byte offsets.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
  bool jit_ = false;
};

}  // namespace corolla::tok
