#include "model/tokenizer/regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdexcept>

#include "model/tokenizer/unicode.hpp"

namespace corolla::tok {
namespace {

// Per-thread match data and JIT stack, shared by every pattern (a match only needs the first pair of offsets).
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  MatchScratch() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchScratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

// Hugging Face's tokenizers compile patterns with Oniguruma, where a class may hold a class: [^(\s|[.,!?])] (BLOOM's)
// is "none of (, whitespace, |, the marks in the inner class, )". PCRE reads a '[' in a class as a character, so
// the inner class is inlined (a union of its members, which is what it means there); a negated inner class has no
// such rewriting and is refused.
std::string flatten_nested_classes(const std::string& p) {
  std::string out;
  out.reserve(p.size());
  int depth = 0;  // 0 outside a class, 1 in one, 2+ in nested ones
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      out += c;
      out += p[++i];
      continue;
    }
    if (c == '[') {
      if (depth > 0 && i + 1 < p.size() && p[i + 1] == ':') {  // a POSIX class such as [:alpha:]
        const size_t end = p.find(":]", i + 2);
        if (end != std::string::npos) {
          out.append(p, i, end + 2 - i);
          i = end + 1;
          continue;
        }
      }
      if (depth == 0) {
        out += c;
        depth = 1;
        if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
        if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ']' is a member
        continue;
      }
      if (i + 1 < p.size() && p[i + 1] == '^')
        throw std::invalid_argument("bad pre-tokenizer regex '" + p + "': a negated class inside a class");
      ++depth;
      continue;
    }
    if (c == ']' && depth > 0) {
      if (--depth == 0) out += c;
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

Regex::Regex(const std::string& pattern_in, bool literal) : pattern_(pattern_in) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  // PCRE2 refuses PCRE2_UCP beside PCRE2_LITERAL (Unicode classes mean nothing in plain text): a String pattern
  // (Gemma's Split on " ", a Metaspace that splits) failed to compile with "invalid option bits".
  const uint32_t options = PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  const std::string pattern = literal ? pattern_in : flatten_nested_classes(pattern_in);
  auto* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err, &err_offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw std::invalid_argument("bad pre-tokenizer regex '" + pattern_in + "' at offset " + std::to_string(err_offset) +
                                ": " + reinterpret_cast<const char*>(msg));
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
  auto* code = static_cast<pcre2_code*>(code_);
  MatchScratch& s = scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    const int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), pos, 0, s.data, s.context)
                        : pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, s.data, s.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw std::runtime_error("pre-tokenizer regex '" + pattern_ + "' failed: " + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      matches.emplace_back(b, e);
      pos = e;
    } else {
      // An empty match: step over one character.
      if (b >= text.size()) break;
      pos = b + utf8_len(static_cast<unsigned char>(text[b]));
    }
  }
}

}  // namespace corolla::tok
