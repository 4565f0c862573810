// TextStream (apps/api/text_stream.hpp): the streamed text of a generation with stop sequences, token by token.
#define BOOST_TEST_MODULE text_stream
#include <boost/test/unit_test.hpp>

#include "apps/api/text_stream.hpp"

using namespace corolla;
using namespace corolla::api;

namespace {
// Byte-level tokenizer of 253 byte tokens and 3 special ones (ids 0-2); ids of ASCII text are its bytes + 3.
Tokenizer byte_tok() { return Tokenizer::load(std::string(COROLLA_TEST_DATA) + "/tokenizers/bpe-tiny256"); }

std::vector<int32_t> ids(const std::string& text) { return byte_tok().encode(text, {.add_special = false}); }

// A stream with its own decoder.
struct Stream {
  StreamDecoder decoder;
  TextStream text;
  Stream(Tokenizer t, bool skip_special, std::vector<std::string> stops, bool trim)
      : decoder(std::move(t), skip_special), text(decoder, std::move(stops), trim) {}
};

struct Run {
  std::vector<std::string> pieces;
  std::string shown;
  std::optional<size_t> stopped;
  size_t tokens = 0;
};

Run feed(Stream& st, const std::vector<int32_t>& in) {
  TextStream& s = st.text;
  Run r;
  for (int32_t id : in) {
    auto u = s.push(id);
    r.tokens++;
    r.pieces.push_back(u.text);
    r.shown += u.text;
    if (u.stopped) {
      r.stopped = u.stopped;
      return r;
    }
  }
  r.shown += s.finish();
  return r;
}
}  // namespace

BOOST_AUTO_TEST_CASE(trimmed_stop_sequence_is_never_shown) {
  Stream s(byte_tok(), true, {"\n\nUser:"}, true);
  auto r = feed(s, ids("Paris is the capital.\n\nUser: more"));
  BOOST_TEST(r.shown == "Paris is the capital.");
  BOOST_TEST(r.stopped.value_or(99) == 0u);
  BOOST_TEST(r.tokens == std::string("Paris is the capital.\n\nUser:").size());
  // The newlines were held back while they could start the stop sequence.
  for (const auto& p : r.pieces) BOOST_TEST(p.find('\n') == std::string::npos);
}

BOOST_AUTO_TEST_CASE(held_back_text_is_released_when_it_is_not_a_stop_sequence) {
  Stream s(byte_tok(), true, {"STOP"}, true);
  auto r = feed(s, ids("a STO b ST"));
  BOOST_TEST(!r.stopped);
  BOOST_TEST(r.shown == "a STO b ST");  // the trailing "ST" comes out at the end
  BOOST_TEST(r.pieces[4] == "");        // "a ST" then 'O' releases "STO"
}

BOOST_AUTO_TEST_CASE(the_earliest_of_several_stop_sequences_wins) {
  Stream s(byte_tok(), true, {"xyz", "y"}, true);
  auto r = feed(s, ids("abcxyz"));
  BOOST_TEST(r.shown == "abcx");
  BOOST_TEST(r.stopped.value_or(99) == 1u);
}

BOOST_AUTO_TEST_CASE(kept_stop_sequences_are_shown_petals_style) {
  Stream s(byte_tok(), false, {"</s>"}, false);
  auto r = feed(s, ids("Hi</s>there"));
  BOOST_TEST(r.shown == "Hi</s>");
  BOOST_TEST(r.stopped.value_or(99) == 0u);
  for (size_t i = 0; i < r.pieces.size(); ++i) BOOST_TEST(r.pieces[i].size() == 1u);  // nothing held back
}

BOOST_AUTO_TEST_CASE(special_tokens_are_kept_or_skipped) {
  Stream keep(byte_tok(), false, {}, false), skip(byte_tok(), true, {}, true);
  const std::vector<int32_t> in = {ids("a")[0], 2, ids("b")[0]};
  BOOST_TEST(feed(keep, in).shown == "a<|im_end|>b");
  BOOST_TEST(feed(skip, in).shown == "ab");
}

BOOST_AUTO_TEST_CASE(multibyte_characters_are_never_split) {
  Stream s(byte_tok(), true, {"é!"}, true);
  auto r = feed(s, ids("café!"));  // é is two byte tokens
  BOOST_TEST(r.shown == "caf");
  Stream t(byte_tok(), true, {}, true);
  auto u = feed(t, ids("né"));
  BOOST_TEST(u.pieces[1] == "");  // the first byte of é waits for the second
  BOOST_TEST(u.shown == "né");
}

BOOST_AUTO_TEST_CASE(an_incomplete_character_waits_for_the_next_stream_of_the_session) {
  StreamDecoder decoder(byte_tok(), false);
  const auto e = ids("é");  // two byte tokens
  TextStream first(decoder, {}, false);
  BOOST_TEST(first.push(ids("a")[0]).text == "a");
  BOOST_TEST(first.push(e[0]).text == "");
  BOOST_TEST(first.finish(false) == "");
  TextStream second(decoder, {}, false);
  BOOST_TEST(second.push(e[1]).text == "é");
}
