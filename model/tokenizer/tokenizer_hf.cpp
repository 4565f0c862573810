// Tokenizer from a Hugging Face directory: tokenizer.json (model, normalizer, pre-tokenizer, post-processor,
// decoder, added tokens), tokenizer_config.json (special tokens, add_bos_token/add_eos_token, chat template),
// chat_template.jinja and generation_config.json. Only the parts used by BPE language models are supported;
// anything else is refused with a message naming it.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "model/bounded_file.hpp"
#include "model/config.hpp"
#include "model/tokenizer/sentencepiece.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/tokenizer/tokenizer_data.hpp"

namespace corolla {

using namespace tok;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& path) {
  return read_bounded_file(path.string(), kMaxTokenizerFileBytes, "a tokenizer file");
}

json read_json(const fs::path& path) {
  try {
    return json::parse(read_text(path));
  } catch (const json::parse_error& e) {
    throw std::runtime_error(path.string() + ": not valid JSON: " + e.what());
  }
}

// A token id from a file: an integer in the vocabulary's range, refused before nlohmann would narrow it to int32.
int32_t token_id_of(const json& v) {
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() >= uint64_t(kMaxVocabSize)) ||
      (!v.is_number_unsigned() && (v.get<int64_t>() < 0 || v.get<int64_t>() >= kMaxVocabSize)))
    throw std::runtime_error("token id " + v.dump() + " is not an integer in 0.." + std::to_string(kMaxVocabSize - 1));
  return static_cast<int32_t>(v.get<int64_t>());
}

[[noreturn]] void unsupported(const std::string& what, const json& node) {
  throw std::runtime_error("unsupported " + what + " '" + node.value("type", std::string("?")) + "'");
}

// A pattern object {"String": s} or {"Regex": r}; returns the text and whether it is literal.
std::pair<std::string, bool> pattern_of(const json& p) {
  if (p.contains("String")) return {p.at("String").get<std::string>(), true};
  if (p.contains("Regex")) return {p.at("Regex").get<std::string>(), false};
  throw std::runtime_error("pattern is neither String nor Regex");
}

// A special token written as a string or as {"content": ...}; empty when absent or null.
std::string token_text(const json& cfg, const char* key) {
  if (!cfg.contains(key) || cfg.at(key).is_null()) return {};
  const json& v = cfg.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v.at("content").get<std::string>();
  return {};
}

Prepend prepend_scheme(const json& node) {
  if (node.contains("prepend_scheme")) {
    const auto s = node.at("prepend_scheme").get<std::string>();
    if (s == "always") return Prepend::always;
    if (s == "first") return Prepend::first;
    if (s == "never") return Prepend::never;
    throw std::runtime_error("unknown Metaspace prepend_scheme '" + s + "'");
  }
  return node.value("add_prefix_space", true) ? Prepend::always : Prepend::never;
}

void parse_normalizer(const json& n, TokenizerData& d) {
  if (n.is_null()) return;
  const std::string type = n.value("type", "");
  if (type == "Sequence") {
    for (const json& step : n.at("normalizers")) parse_normalizer(step, d);
  } else if (type == "Prepend") {
    d.normalize.push_back({NormalizeStep::prepend, n.at("prepend").get<std::string>(), ""});
  } else if (type == "Replace") {
    auto [pattern, literal] = pattern_of(n.at("pattern"));
    if (!literal) unsupported("normalizer (Replace with a regex)", n);
    d.normalize.push_back({NormalizeStep::replace, pattern, n.at("content").get<std::string>()});
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    const NormalForm form = type == "NFC"    ? NormalForm::nfc
                            : type == "NFD"  ? NormalForm::nfd
                            : type == "NFKC" ? NormalForm::nfkc
                                             : NormalForm::nfkd;
    d.normalize.push_back({NormalizeStep::unicode, "", "", form});
  } else {
    unsupported("normalizer", n);
  }
}

SplitBehavior split_behavior(const std::string& s) {
  if (s == "Isolated") return SplitBehavior::isolated;
  if (s == "Removed") return SplitBehavior::removed;
  if (s == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (s == "MergedWithNext") return SplitBehavior::merged_with_next;
  throw std::runtime_error("unsupported split behavior '" + s + "'");
}

void parse_pre_tokenizer(const json& p, TokenizerData& d) {
  if (p.is_null()) return;
  const std::string type = p.value("type", "");
  // After ByteLevel, splitting rules read the words in its byte alphabet.
  PreTokenizer& rules = d.byte_level ? d.after_byte_level : d.pre;
  if (d.byte_level && type != "Sequence" && type != "Split" && type != "Digits" && type != "Punctuation")
    unsupported("pre_tokenizer after ByteLevel", p);
  if (type == "Sequence") {
    for (const json& step : p.at("pretokenizers")) parse_pre_tokenizer(step, d);
  } else if (type == "ByteLevel") {
    d.byte_level = true;
    d.byte_level_prefix_space = p.value("add_prefix_space", false);
    if (p.value("use_regex", true)) d.pre.add_split(patterns::gpt2, SplitBehavior::isolated);
  } else if (type == "Split") {
    auto [pattern, literal] = pattern_of(p.at("pattern"));
    rules.add_split(pattern, split_behavior(p.at("behavior").get<std::string>()), p.value("invert", false), literal);
  } else if (type == "Digits") {
    rules.add_split(p.value("individual_digits", false) ? patterns::single_digit : patterns::digit_runs,
                    SplitBehavior::isolated);
  } else if (type == "Punctuation") {
    // Each punctuation character is a delimiter; "Contiguous" keeps a run of them together.
    const std::string behavior = p.value("behavior", std::string("Isolated"));
    if (behavior == "Contiguous")
      rules.add_split(patterns::punctuation_runs, SplitBehavior::isolated);
    else
      rules.add_split(patterns::punctuation, split_behavior(behavior));
  } else if (type == "Metaspace") {
    d.metaspace.enabled = true;
    d.metaspace.replacement = p.value("replacement", std::string(kSpmSpace));
    d.metaspace.prepend = prepend_scheme(p);
    d.metaspace.split = p.value("split", true);
    if (d.metaspace.split) d.pre.add_split(d.metaspace.replacement, SplitBehavior::merged_with_next, false, true);
  } else if (type == "Whitespace") {
    d.pre.add_split(R"(\w+|[^\w\s]+)", SplitBehavior::removed, true);
  } else if (type == "WhitespaceSplit") {
    d.pre.add_split(R"(\s+)", SplitBehavior::removed);
  } else {
    unsupported("pre_tokenizer", p);
  }
}

void parse_decoder(const json& dec, TokenizerData& d) {
  if (dec.is_null()) {
    d.decode_mode = d.byte_level ? DecodeMode::byte_level : DecodeMode::sentencepiece;
    return;
  }
  const std::string type = dec.value("type", "");
  if (type == "ByteLevel") {
    d.decode_mode = DecodeMode::byte_level;
  } else if (type == "Metaspace") {
    d.decode_mode = DecodeMode::sentencepiece;
    d.decode_strip_space = prepend_scheme(dec) != Prepend::never;
  } else if (type == "Sequence") {
    d.decode_mode = DecodeMode::sentencepiece;
    for (const json& step : dec.at("decoders")) {
      const std::string t = step.value("type", "");
      if (t == "Strip") {
        // Compared as JSON values: converting a number such as 1e30 to int first would be undefined behaviour.
        const json start = step.value("start", json(0)), stop = step.value("stop", json(0));
        if (step.value("content", std::string(" ")) != " " || !(start == json(0) || start == json(1)) ||
            stop != json(0))
          unsupported("decoder (Strip other than one leading space)", step);
        d.decode_strip_space = start == json(1);
      } else if (t == "ByteLevel") {
        d.decode_mode = DecodeMode::byte_level;
      } else if (t == "ByteFallback") {
        d.decode_byte_fallback = true;
      } else if (t == "Replace") {
        auto [pattern, literal] = pattern_of(step.at("pattern"));
        if (!literal || pattern != kSpmSpace || step.value("content", "") != " ")
          unsupported("decoder (Replace other than \"▁\" by a space)", step);
      } else if (t != "Fuse") {
        unsupported("decoder", step);
      }
    }
  } else {
    unsupported("decoder", dec);
  }
}

void parse_post_processor(const json& p, TokenizerData& d) {
  if (p.is_null()) return;
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const json& step : p.at("processors")) parse_post_processor(step, d);
  } else if (type == "TemplateProcessing") {
    bool after = false;
    for (const json& item : p.at("single")) {
      if (item.contains("Sequence")) {
        after = true;
        continue;
      }
      const std::string name = item.at("SpecialToken").at("id").get<std::string>();
      for (const json& id : p.at("special_tokens").at(name).at("ids"))
        (after ? d.suffix : d.prefix).push_back(token_id_of(id));
    }
  } else if (type != "ByteLevel") {
    unsupported("post_processor", p);
  }
}

void parse_model(const json& m, TokenizerData& d) {
  if (m.value("type", std::string("BPE")) != "BPE") unsupported("model", m);
  if (!m.value("continuing_subword_prefix", json()).is_null() &&
      !m.at("continuing_subword_prefix").get<std::string>().empty())
    unsupported("model (BPE with continuing_subword_prefix)", m);
  if (!m.value("end_of_word_suffix", json()).is_null() && !m.at("end_of_word_suffix").get<std::string>().empty())
    unsupported("model (BPE with end_of_word_suffix)", m);
  for (const auto& [piece, id] : m.at("vocab").items()) d.vocab.set(token_id_of(id), piece);
  d.bpe.byte_fallback = m.value("byte_fallback", false);
  d.bpe.fuse_unk = m.value("fuse_unk", false);
  d.ignore_merges = m.value("ignore_merges", false);
  if (m.contains("unk_token") && m.at("unk_token").is_string()) {
    const auto unk = m.at("unk_token").get<std::string>();
    d.bpe.unk_id = d.vocab.find_or(unk, -1);
  }
  int32_t rank = 0;
  for (const json& merge : m.at("merges")) {
    std::string a, b;
    if (merge.is_array()) {
      a = merge.at(0).get<std::string>();
      b = merge.at(1).get<std::string>();
    } else {
      const auto s = merge.get<std::string>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) throw std::runtime_error("merge '" + s + "' is not two pieces separated by a space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    }
    const auto left = d.vocab.find(a), right = d.vocab.find(b), merged = d.vocab.find(a + b);
    // As Hugging Face: a merge of pieces the vocabulary lacks means a broken file, not one to load differently.
    if (!left || !right || !merged)
      throw std::runtime_error("merge " + std::to_string(rank) + " '" + a + " " + b + "' names a piece that is not " +
                               "in the vocabulary");
    d.merges.insert(*left, *right, rank, *merged);
    ++rank;
  }
}

void parse_tokenizer_json(const json& tj, TokenizerData& d) {
  parse_model(tj.at("model"), d);
  if (d.bpe.byte_fallback)
    for (size_t i = 0; i < d.vocab.size(); ++i) {
      const std::string& p = d.vocab.piece(static_cast<int32_t>(i));
      if (p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>')
        d.vocab.set_kind(static_cast<int32_t>(i), TokenKind::byte);
    }
  for (const json& a : tj.value("added_tokens", json::array())) {
    AddedToken t;
    t.id = token_id_of(a.at("id"));
    t.content = a.at("content").get<std::string>();
    t.special = a.value("special", false);
    t.lstrip = a.value("lstrip", false);
    t.rstrip = a.value("rstrip", false);
    t.single_word = a.value("single_word", false);
    d.vocab.set(t.id, t.content, t.special ? TokenKind::control : TokenKind::user_defined);
    d.added.add(std::move(t));
  }
  parse_normalizer(tj.value("normalizer", json()), d);
  parse_pre_tokenizer(tj.value("pre_tokenizer", json()), d);
  parse_decoder(tj.value("decoder", json()), d);
  parse_post_processor(tj.value("post_processor", json()), d);
  // SentencePiece-style text without a pre-tokenizer split is one long word; cut it where no merge can cross.
  if (!d.byte_level && !d.ignore_merges && d.pre.empty() &&
      (!d.metaspace.enabled || d.metaspace.replacement == kSpmSpace))
    d.spm_word_split = spm_words_are_independent(d.vocab);
}

// tokenizer_config.json: special tokens, BOS/EOS flags, chat template.
void apply_config(const json& cfg, TokenizerData& d) {
  if (auto bos = token_text(cfg, "bos_token"); !bos.empty()) d.bos = d.vocab.find_or(bos, -1);
  if (auto eos = token_text(cfg, "eos_token"); !eos.empty()) d.eos = d.vocab.find_or(eos, -1);
  auto set_flag = [](std::vector<int32_t>& ids, int32_t id, bool on, bool front) {
    std::erase(ids, id);
    if (on && id >= 0) ids.insert(front ? ids.begin() : ids.end(), id);
  };
  if (cfg.contains("add_bos_token") && cfg.at("add_bos_token").is_boolean())
    set_flag(d.prefix, d.bos, cfg.at("add_bos_token").get<bool>(), true);
  if (cfg.contains("add_eos_token") && cfg.at("add_eos_token").is_boolean())
    set_flag(d.suffix, d.eos, cfg.at("add_eos_token").get<bool>(), false);
  if (cfg.contains("chat_template")) {
    const json& t = cfg.at("chat_template");
    if (t.is_string()) {
      d.chat_template = t.get<std::string>();
    } else if (t.is_array()) {
      for (const json& named : t)
        if (named.value("name", "") == "default") d.chat_template = named.value("template", "");
    }
  }
}

// The tokenizer a tokenizer.json's text describes, before tokenizer_config.json and finish().
std::shared_ptr<TokenizerData> data_of_tokenizer_json(std::string_view text, const std::string& source) {
  auto d = std::make_shared<TokenizerData>();
  d->source = source;
  json tj;
  try {
    tj = json::parse(text);
  } catch (const json::parse_error& e) {
    throw std::runtime_error(source + ": not valid JSON: " + e.what());
  }
  try {
    parse_tokenizer_json(tj, *d);
  } catch (const std::exception& e) {
    throw std::runtime_error(source + ": " + e.what());
  }
  if (d->prefix.size() == 1) d->bos = d->prefix[0];
  if (d->suffix.size() == 1) d->eos = d->suffix[0];
  return d;
}

}  // namespace

Tokenizer Tokenizer::from_hf_json_text(std::string_view text, const std::string& source) {
  auto d = data_of_tokenizer_json(text, source);
  d->finish();
  return Tokenizer(std::move(d));
}

Tokenizer Tokenizer::from_hf_dir(const fs::path& dir) {
  const fs::path tj_path = dir / "tokenizer.json";
  if (!fs::exists(tj_path))
    throw std::runtime_error(tj_path.string() +
                             ": not found (a Hugging Face tokenizer directory needs tokenizer.json)");
  auto d = data_of_tokenizer_json(read_text(tj_path), tj_path.string());

  const fs::path cfg_path = dir / "tokenizer_config.json";
  if (fs::exists(cfg_path)) {
    try {
      apply_config(read_json(cfg_path), *d);
    } catch (const json::exception& e) {
      throw std::runtime_error(cfg_path.string() + ": " + e.what());
    }
  }
  if (fs::exists(dir / "chat_template.jinja")) d->chat_template = read_text(dir / "chat_template.jinja");
  const fs::path gen_path = dir / "generation_config.json";
  if (fs::exists(gen_path)) {
    const json gen = read_json(gen_path);
    if (gen.contains("eos_token_id")) {
      const json& e = gen.at("eos_token_id");
      try {
        if (e.is_number_integer())
          d->eos_ids.push_back(token_id_of(e));
        else if (e.is_array())
          for (const json& id : e) d->eos_ids.push_back(token_id_of(id));
      } catch (const std::exception& err) {
        throw std::runtime_error(gen_path.string() + ": eos_token_id: " + err.what());
      }
    }
  }
  d->finish();
  return Tokenizer(std::move(d));
}

}  // namespace corolla
