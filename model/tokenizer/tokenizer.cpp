#include "model/tokenizer/tokenizer.hpp"

#include <algorithm>
#include <stdexcept>

#include "model/tokenizer/sentencepiece.hpp"
#include "model/tokenizer/tokenizer_data.hpp"
#include "model/tokenizer/unicode.hpp"
#include "model/weights/gguf_file.hpp"

namespace corolla {
namespace tok {

bool WordCache::lookup(std::string_view word, std::vector<int32_t>& out) const {
  std::lock_guard lock(mutex_);
  auto it = map_.find(word);
  if (it == map_.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::store(std::string_view word, const int32_t* ids, size_t n) const {
  std::lock_guard lock(mutex_);
  if (map_.size() >= kMaxEntries) map_.clear();
  map_.try_emplace(std::string(word), ids, ids + n);
}

void TokenizerData::finish() {
  vocab.index_bytes();
  if (byte_level) {
    byte_symbol.assign(256, -1);
    for (int b = 0; b < 256; ++b) byte_symbol[b] = vocab.find_or(byte_to_unicode()[b], -1);
  }
  // EOS first, then the other end-of-generation tokens, each once.
  std::vector<int32_t> ids;
  if (eos >= 0) ids.push_back(eos);
  for (int32_t id : eos_ids)
    if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  eos_ids.swap(ids);
}

namespace {

// "<0xXX>" → XX, or -1.
int byte_piece_value(std::string_view p) {
  if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
  };
  const int hi = hex(p[3]), lo = hex(p[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size())
    out.append(s, pos, hit - pos).append(to);
  out.append(s, pos);
  s.swap(out);
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

}  // namespace
}  // namespace tok

using namespace tok;

Tokenizer::Tokenizer(std::shared_ptr<const TokenizerData> data) : d_(std::move(data)) {}

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path)) return from_hf_dir(path);
  if (path.filename() == "tokenizer.json") return from_hf_dir(path.parent_path().empty() ? "." : path.parent_path());
  if (!std::filesystem::exists(path)) throw std::runtime_error(path.string() + ": no such file or directory");
  return from_gguf(*GgufFile::open(path.string()));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, EncodeOptions options) const {
  check_utf8(text);
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (options.add_special) out.insert(out.end(), d_->prefix.begin(), d_->prefix.end());
  if (d_->added.empty()) {
    if (!text.empty()) encode_fragment(text, true, out);
  } else {
    std::vector<Fragment> fragments;
    d_->added.split(text, options.parse_special, fragments);
    for (const Fragment& f : fragments) {
      if (f.token >= 0)
        out.push_back(f.token);
      else
        encode_fragment(f.text, f.text.data() == text.data(), out);
    }
  }
  if (options.add_special) out.insert(out.end(), d_->suffix.begin(), d_->suffix.end());
  return out;
}

void Tokenizer::encode_fragment(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
  const TokenizerData& d = *d_;
  std::string buffer;
  std::string_view s = text;
  if (!d.normalize.empty() || d.metaspace.enabled || d.byte_level_prefix_space) {
    buffer.assign(text);
    for (const NormalizeStep& step : d.normalize) {
      switch (step.kind) {
        case NormalizeStep::prepend:
          if (!buffer.empty()) buffer.insert(0, step.a);
          break;
        case NormalizeStep::replace: replace_all(buffer, step.a, step.b); break;
        case NormalizeStep::unicode: buffer = unicode_normalize(buffer, step.form); break;
      }
    }
    if (d.metaspace.enabled) {
      replace_all(buffer, " ", d.metaspace.replacement);
      const bool prepend =
          d.metaspace.prepend == Prepend::always || (d.metaspace.prepend == Prepend::first && at_start);
      if (prepend && !starts_with(buffer, d.metaspace.replacement)) buffer.insert(0, d.metaspace.replacement);
    }
    if (d.byte_level_prefix_space && !starts_with(buffer, " ")) buffer.insert(0, " ");
    s = buffer;
  }
  thread_local std::vector<std::string_view> words;
  words.clear();
  if (d.spm_word_split)
    spm_split_words(s, words);
  else
    d.pre.split(s, words);
  // encode_word does not touch `words`, so the thread-local list stays valid through the loop.
  if (d.after_byte_level.empty()) {
    for (std::string_view w : words) encode_word(w, out);
    return;
  }
  // The remaining rules cut each word written in the byte alphabet; every piece they leave is whole characters of
  // that alphabet, so it maps back to a run of the word's bytes.
  std::string mapped;
  std::vector<size_t> byte_at;  // byte_at[offset in mapped] = index of the word's byte it starts
  std::vector<std::string_view> pieces;
  for (std::string_view w : words) {
    mapped.clear();
    byte_at.clear();
    for (size_t i = 0; i < w.size(); ++i) {
      const std::string& c = byte_to_unicode()[static_cast<unsigned char>(w[i])];
      byte_at.insert(byte_at.end(), c.size(), i);
      mapped += c;
    }
    byte_at.push_back(w.size());
    pieces.clear();
    d.after_byte_level.split(mapped, pieces);
    for (std::string_view p : pieces) {
      const size_t begin = byte_at[static_cast<size_t>(p.data() - mapped.data())];
      const size_t end = byte_at[static_cast<size_t>(p.data() - mapped.data()) + p.size()];
      encode_word(w.substr(begin, end - begin), out);
    }
  }
}

void Tokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  const TokenizerData& d = *d_;
  constexpr size_t kMaxCachedWord = 256;
  const bool cacheable = word.size() <= kMaxCachedWord;
  if (cacheable && d.cache.lookup(word, out)) return;
  const size_t before = out.size();
  thread_local std::vector<BpeSymbol> symbols;
  symbols.clear();
  if (d.byte_level) {
    if (d.ignore_merges) {
      std::string mapped;
      for (unsigned char b : word) mapped += byte_to_unicode()[b];
      if (auto id = d.vocab.find(mapped)) {
        out.push_back(*id);
        if (cacheable) d.cache.store(word, &*id, 1);
        return;
      }
    }
    for (size_t i = 0; i < word.size(); ++i)
      symbols.push_back({d.byte_symbol[static_cast<unsigned char>(word[i])], static_cast<uint32_t>(i), 1});
  } else {
    if (d.ignore_merges)
      if (auto id = d.vocab.find(word)) {
        out.push_back(*id);
        if (cacheable) d.cache.store(word, &*id, 1);
        return;
      }
    spm_symbols(d.vocab, word, symbols);
  }
  bpe_merge(d.merges, d.vocab, d.bpe, word, symbols, out);
  if (cacheable) d.cache.store(word, out.data() + before, out.size() - before);
}

void Tokenizer::check_id(int32_t id) const {
  if (!d_->vocab.contains(id))
    throw std::invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                                std::to_string(d_->vocab.size()) + ")");
}

bool Tokenizer::is_special(int32_t id) const {
  check_id(id);
  const TokenKind k = d_->vocab.kind(id);
  return k == TokenKind::control || k == TokenKind::unknown;
}

std::string Tokenizer::token_bytes(int32_t id, bool skip_special) const {
  if (skip_special && is_special(id)) return {};
  check_id(id);
  const std::string& p = d_->vocab.piece(id);
  if (d_->decode_mode == DecodeMode::byte_level) {
    // Every character through the byte alphabet; a piece with any other character stays as it is.
    std::string bytes;
    for (size_t i = 0; i < p.size();) {
      const Utf8Step st = utf8_step(std::string_view(p).substr(i));
      const int b = st.valid ? unicode_to_byte(st.cp) : -1;
      if (b < 0) return p;
      bytes += static_cast<char>(b);
      i += st.len;
    }
    return bytes;
  }
  const int b = d_->decode_byte_fallback ? byte_piece_value(p) : -1;
  if (b >= 0) return std::string(1, static_cast<char>(b));
  std::string text = p;
  replace_all(text, kSpmSpace, " ");
  return text;
}

bool Tokenizer::strips_leading_space() const { return d_->decode_strip_space; }

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  for (int32_t id : ids) check_id(id);
  std::string out;
  if (d_->decode_mode == DecodeMode::byte_level) {
    std::string bytes;
    for (int32_t id : ids) bytes += token_bytes(id, skip_special);
    out = utf8_lossy(bytes);
  } else {
    // Runs of byte tokens form one string each; a run that is not valid UTF-8 gives one U+FFFD per byte.
    std::string run;
    auto flush = [&] {
      if (run.empty()) return;
      if (utf8_lossy(run) == run) {
        out += run;
      } else {
        for (size_t i = 0; i < run.size(); ++i) out += "\xEF\xBF\xBD";
      }
      run.clear();
    };
    for (int32_t id : ids) {
      if (skip_special && is_special(id)) continue;
      const int b = d_->decode_byte_fallback ? byte_piece_value(d_->vocab.piece(id)) : -1;
      if (b >= 0) {
        run += static_cast<char>(b);
        continue;
      }
      flush();
      out += token_bytes(id);
    }
    flush();
  }
  if (d_->decode_strip_space && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

const std::string& Tokenizer::piece(int32_t id) const {
  check_id(id);
  return d_->vocab.piece(id);
}

int32_t Tokenizer::bos_id() const { return d_->bos; }
int32_t Tokenizer::eos_id() const { return d_->eos; }
const std::vector<int32_t>& Tokenizer::eos_ids() const { return d_->eos_ids; }
bool Tokenizer::is_eos(int32_t id) const {
  return std::find(d_->eos_ids.begin(), d_->eos_ids.end(), id) != d_->eos_ids.end();
}
bool Tokenizer::adds_bos() const {
  return d_->bos >= 0 && std::find(d_->prefix.begin(), d_->prefix.end(), d_->bos) != d_->prefix.end();
}
bool Tokenizer::adds_eos() const {
  return d_->eos >= 0 && std::find(d_->suffix.begin(), d_->suffix.end(), d_->eos) != d_->suffix.end();
}
size_t Tokenizer::vocab_size() const { return d_->vocab.size(); }
std::optional<int32_t> Tokenizer::find_token(std::string_view piece) const { return d_->vocab.find(piece); }
const std::string& Tokenizer::chat_template() const { return d_->chat_template; }

}  // namespace corolla
