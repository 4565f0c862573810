// Unicode for the tokenizers: strict validation, lossy decoding (U+FFFD for ill-formed bytes, the way
// Rust's String::from_utf8_lossy and so Hugging Face tokenizers do it), and GPT-2's byte-to-unicode alphabet.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace corolla::tok {

// One step of UTF-8 decoding at the start of `s` (non-empty).
struct Utf8Step {
  char32_t cp = 0;  // the code point when valid
  size_t len = 1;   // bytes consumed: the whole character, or the maximal ill-formed subpart
  bool valid = false;
  bool truncated = false;  // ill-formed only because `s` ends inside a character that could still complete
};
Utf8Step utf8_step(std::string_view s);

// Throws std::invalid_argument naming the byte offset of the first ill-formed sequence.
void check_utf8(std::string_view s);

// Bytes to text: every maximal ill-formed subpart becomes U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// Length of the trailing bytes of `s` that begin a character that is not complete yet (0 to 3).
size_t utf8_incomplete_tail(std::string_view s);

// Length of the UTF-8 character whose first byte is `lead` in well-formed text (1 to 4).
inline size_t utf8_len(unsigned char lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

void append_utf8(std::string& out, char32_t cp);

// GPT-2's byte-level alphabet: each byte is shown as one printable code point ("Ġ" for a space).
const std::array<std::string, 256>& byte_to_unicode();
// The byte a code point of that alphabet stands for, or -1 when it is not one of them.
int unicode_to_byte(char32_t cp);

// Unicode normalization forms (Hugging Face's NFC, NFD, NFKC and NFKD normalizers), through ICU.
enum class NormalForm { nfc, nfd, nfkc, nfkd };
std::string unicode_normalize(std::string_view text, NormalForm form);

// Python's str.isspace (what Jinja's trim and str.strip remove).
bool is_python_space(char32_t cp);

}  // namespace corolla::tok
