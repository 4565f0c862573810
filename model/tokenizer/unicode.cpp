#include "model/tokenizer/unicode.hpp"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <stdexcept>
#include <vector>

namespace corolla::tok {

Utf8Step utf8_step(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  Utf8Step r;
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return {b0, 1, true, false};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF)
    need = 1, cp = b0 & 0x1F;
  else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return r;  // a continuation byte or an impossible lead: one byte, ill-formed
  }
  for (size_t k = 1; k <= need; ++k) {
    if (k >= n) {
      r.len = k;
      r.truncated = true;
      return r;
    }
    const unsigned char b = p[k];
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      r.len = k;
      return r;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, need + 1, true, false};
}

void check_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step st = utf8_step(s.substr(i));
    if (!st.valid)
      throw std::invalid_argument("text is not valid UTF-8: ill-formed sequence at byte offset " + std::to_string(i));
    i += st.len;
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const Utf8Step st = utf8_step(bytes.substr(i));
    if (st.valid)
      out.append(bytes.substr(i, st.len));
    else
      out += "\xEF\xBF\xBD";
    i += st.len;
  }
  return out;
}

size_t utf8_incomplete_tail(std::string_view s) {
  // A lead byte within the last three bytes whose character runs past the end, and is well-formed so far.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    if (c < 0xC0) return 0;            // ASCII: nothing pending
    const Utf8Step st = utf8_step(s.substr(n - back));
    return st.truncated ? back : 0;
  }
  return 0;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {
// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes are shifted
// to U+0100 and up, in byte order.
struct ByteAlphabet {
  std::array<std::string, 256> to_unicode;
  std::vector<int16_t> to_byte = std::vector<int16_t>(0x200, -1);
  ByteAlphabet() {
    int shifted = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(0x100 + shifted++);
      append_utf8(to_unicode[b], cp);
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};
const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}
}  // namespace

const std::array<std::string, 256>& byte_to_unicode() { return alphabet().to_unicode; }

int unicode_to_byte(char32_t cp) {
  const auto& a = alphabet();
  return cp < a.to_byte.size() ? a.to_byte[cp] : -1;
}

std::string unicode_normalize(std::string_view text, NormalForm form) {
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);  // ASCII is the same in every form
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::nfc: n = icu::Normalizer2::getNFCInstance(status); break;
    case NormalForm::nfd: n = icu::Normalizer2::getNFDInstance(status); break;
    case NormalForm::nfkc: n = icu::Normalizer2::getNFKCInstance(status); break;
    case NormalForm::nfkd: n = icu::Normalizer2::getNFKDInstance(status); break;
  }
  if (U_FAILURE(status)) throw std::runtime_error(std::string("ICU normalizer unavailable: ") + u_errorName(status));
  const icu::UnicodeString in =
      icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  if (n->isNormalized(in, status) && U_SUCCESS(status)) return std::string(text);
  status = U_ZERO_ERROR;
  const icu::UnicodeString out = n->normalize(in, status);
  if (U_FAILURE(status)) throw std::runtime_error(std::string("Unicode normalization failed: ") + u_errorName(status));
  std::string result;
  out.toUTF8String(result);
  return result;
}

bool is_python_space(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  switch (c) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return c >= 0x2000 && c <= 0x200A;
  }
}

}  // namespace corolla::tok
