// Large messages as streams of chunks (actors/protocol/wire_stream.hpp), without actors: a message's pieces are its
// flat bytes with the tensors referenced in place; its chunks, through CAF's serializer, reassemble into the same
// message (read in place from the reassembled buffer); and every way a stream breaks (a lost, repeated or
// misplaced chunk, inconsistent sizes, a message above the limits, an early end, an abandoned stream) is refused
// with a message that names the problem, and frees what the stream held.
#define BOOST_TEST_MODULE wire_stream
#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <cstring>

#include "actors/system/system_config.hpp"
#include "actors/protocol/wire_stream.hpp"

using namespace corolla;
using namespace std::chrono_literals;

namespace {

Tensor ramp(Shape shape, float scale) {
  Tensor t = Tensor::empty(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = scale * static_cast<float>(i % 1013);
  return t;
}

backward_request big_request() {
  std::vector<int32_t> positions(4 * 96);
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i % 96);
  return backward_request{
      ramp({4, 96, 64}, 0.5f), ramp({4, 96, 64}, -0.25f), positions, ramp({2, 4, 8, 64}, 2.f), 1, 3, "lora-mlp", 0, {}};
}

std::vector<char> joined(const wire_pieces& p) {
  std::vector<char> out;
  for (const auto& piece : p.pieces) out.insert(out.end(), piece.data, piece.data + piece.size);
  return out;
}

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), static_cast<size_t>(a.nbytes())) == 0;
}

// A chunk as the receiver sees it: written by CAF's serializer and read back, as across processes.
wire_chunk through_caf(caf::actor_system& sys, const wire_chunk& c) {
  std::vector<char> buf;
  caf::binary_serializer sink(sys, buf);
  wire_chunk copy = c;
  BOOST_REQUIRE(!sink(copy));
  wire_chunk out;
  caf::binary_deserializer source(sys, buf);
  BOOST_REQUIRE(!source(out));
  return out;
}

struct fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::actor_addr peer;  // chunks are keyed by sender; one sender suffices here
  inbound_streams::time_point t0{};
  fixture() {
    add_corolla_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

stream_limits small_limits() {
  stream_limits l;
  l.chunk_bytes = 4096;
  l.max_message_bytes = 1 << 20;
  l.max_buffered_bytes = 1 << 21;
  l.timeout = 1s;
  return l;
}

void contains(const std::string& text, const std::string& fragment) {
  BOOST_TEST(text.find(fragment) != std::string::npos, "'" << text << "' lacks '" << fragment << "'");
}

}  // namespace

BOOST_AUTO_TEST_CASE(pieces_are_the_encoding_with_tensors_referenced_in_place) {
  const backward_request req = big_request();
  const wire_pieces p = pieces(req);
  BOOST_TEST(joined(p) == encode(req));
  BOOST_TEST(p.size == encode(req).size());
  bool hidden_in_place = false;
  for (const auto& piece : p.pieces)
    hidden_in_place |= piece.data == static_cast<const char*>(req.hidden.data()) &&
                       piece.size == static_cast<size_t>(req.hidden.nbytes());
  BOOST_TEST(hidden_in_place);  // the tensor's own bytes, not a copy
  // Chunks never cross a piece's end and never exceed their size.
  const auto chunks = cut_chunks(p, 7, 5000);
  uint64_t at = 0;
  for (const auto& c : chunks) {
    BOOST_TEST(c.offset == at);
    BOOST_TEST(c.size <= 5000u);
    BOOST_TEST(c.total == p.size);
    at += c.size;
  }
  BOOST_TEST(at == p.size);
}

BOOST_AUTO_TEST_CASE(chunks_through_caf_reassemble_the_message_read_in_place) {
  fixture f;
  inbound_streams in(small_limits());
  const backward_request req = big_request();
  const auto chunks = cut_chunks(pieces(req), 3, 4096);
  BOOST_TEST(chunks.size() > 10u);
  for (const auto& c : chunks) BOOST_TEST(in.add(f.peer, through_caf(*f.sys, c), f.t0) == "");
  BOOST_TEST(in.buffered_bytes() == static_cast<size_t>(chunks.front().total));
  backward_request got;
  got.stream = 3;
  BOOST_TEST(stream_in(in, f.peer, got) == "");
  BOOST_TEST(got.wire_error == "");
  BOOST_TEST(got.stream == 0u);
  BOOST_TEST(same(got.hidden, req.hidden));
  BOOST_TEST(same(got.grad_output, req.grad_output));
  BOOST_TEST(same(got.prompts, req.prompts));
  BOOST_TEST(got.positions == req.positions);
  BOOST_TEST((got.first_block == 1 && got.last_block == 3 && got.adapter == "lora-mlp"));
  BOOST_TEST(got.hidden.owner() != nullptr);  // a view into the reassembled buffer, which it keeps alive
  BOOST_TEST(in.open_streams() == 0u);
  BOOST_TEST(in.buffered_bytes() == 0u);
  // A message that names no stream is left as it is.
  forward_reply plain{ramp({1, 2, 64}, 1.f), 0, {}, {}, {}};
  BOOST_TEST(stream_in(in, f.peer, plain) == "");
  BOOST_TEST(plain.hidden.numel() == 128);
}

BOOST_AUTO_TEST_CASE(a_lost_or_reordered_chunk_breaks_the_stream) {
  fixture f;
  inbound_streams in(small_limits());
  const auto chunks = cut_chunks(pieces(big_request()), 1, 4096);
  BOOST_TEST(in.add(f.peer, chunks[0], f.t0) == "");
  contains(in.add(f.peer, chunks[2], f.t0), "where byte " + std::to_string(chunks[1].offset) + " was due");
  BOOST_TEST(in.buffered_bytes() == 0u);  // freed at once
  // Later chunks are ignored; the final message gets the first problem.
  contains(in.add(f.peer, chunks[1], f.t0), "was lost or reordered");
  backward_request got;
  got.stream = 1;
  contains(stream_in(in, f.peer, got), "stream 1: a chunk at byte");
  BOOST_TEST(in.open_streams() == 0u);
  // A stream whose start never came.
  contains(in.add(f.peer, chunks[3], f.t0), "the start of the stream never arrived");
}

// A peer sending chunks of ever new streams (each broken at once: its start never came) filled the table of
// streams, which keeps broken ones a while to answer their final messages; now it stops at max_streams.
BOOST_AUTO_TEST_CASE(a_peer_cannot_grow_the_table_of_streams_without_bound) {
  fixture f;
  inbound_streams in(small_limits());
  const auto chunks = cut_chunks(pieces(big_request()), 1, 4096);
  for (uint64_t id = 0; id < 3000; ++id) {
    wire_chunk c = chunks[1];
    c.stream = id;
    BOOST_TEST(!in.add(f.peer, c, f.t0).empty());
  }
  BOOST_TEST(in.open_streams() == in.limits().max_streams_per_peer);  // and below max_streams in all
}

// Two senders counted as two peers: anonymous messages (no node) and an actor of this node (which has a node id
// only with the middleman loaded).
struct two_peers {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  inbound_streams::time_point t0{};
  two_peers() {
    add_corolla_types(cfg);
    cfg.load<caf::io::middleman>();
    sys = std::make_unique<caf::actor_system>(cfg);
    actor_b = sys->spawn([] { return caf::behavior{[](int) {}}; });
    b = caf::actor_cast<caf::actor_addr>(actor_b);
  }
  caf::actor actor_b;
  caf::actor_addr a, b;
  ~two_peers() { caf::anon_send_exit(actor_b, caf::exit_reason::user_shutdown); }
};

// One peer opening stream after stream filled the whole table (max_streams), so no other peer could stream at all
// until its entries expired; now a peer holds at most max_streams_per_peer of them.
BOOST_AUTO_TEST_CASE(one_peer_cannot_take_the_table_of_streams_from_the_others) {
  two_peers p;
  inbound_streams in(small_limits());
  const auto chunks = cut_chunks(pieces(big_request()), 1, 4096);
  for (uint64_t id = 0; id < 3000; ++id) {
    wire_chunk c = chunks[1];  // its start never came: broken at once, but remembered
    c.stream = id;
    in.add(p.a, c, p.t0);
  }
  BOOST_TEST(in.add(p.b, chunks[0], p.t0) == "");
}

// Nor may one peer reserve every byte the receiver gives streams.
BOOST_AUTO_TEST_CASE(one_peer_holds_at_most_its_share_of_the_bytes) {
  two_peers p;
  stream_limits limits = small_limits();
  limits.max_buffered_bytes_per_peer = limits.max_buffered_bytes / 2;
  inbound_streams in(limits);
  const auto chunks = cut_chunks(pieces(big_request()), 1, 4096);
  size_t refused = 0;
  for (uint64_t id = 0; id < 20; ++id) {
    wire_chunk c = chunks[0];
    c.stream = id;
    refused += !in.add(p.a, c, p.t0).empty();
  }
  BOOST_TEST(refused > 0u);
  BOOST_TEST(in.buffered_bytes() <= limits.max_buffered_bytes_per_peer);
  wire_chunk more = chunks[0];
  more.stream = 100;
  contains(in.add(p.a, more, p.t0), "one peer may");
  BOOST_TEST(in.add(p.b, chunks[0], p.t0) == "");
  // What a peer's streams held is its own again once they are taken or dropped.
  in.expire(p.t0 + 10 * limits.timeout);
  in.expire(p.t0 + 20 * limits.timeout);
  BOOST_TEST(in.open_streams() == 0u);
  BOOST_TEST(in.buffered_bytes() == 0u);
  more.stream = 101;
  BOOST_TEST(in.add(p.a, more, p.t0 + 20 * limits.timeout) == "");
}

BOOST_AUTO_TEST_CASE(a_stream_that_ends_early_or_is_unknown_is_refused) {
  fixture f;
  inbound_streams in(small_limits());
  const auto chunks = cut_chunks(pieces(big_request()), 5, 4096);
  for (size_t i = 0; i + 1 < chunks.size(); ++i) BOOST_TEST(in.add(f.peer, chunks[i], f.t0) == "");
  backward_request got;
  got.stream = 5;
  contains(stream_in(in, f.peer, got), "stream 5 ended after " + std::to_string(chunks.back().offset) + " of its");
  BOOST_TEST(in.buffered_bytes() == 0u);
  got.stream = 6;
  contains(stream_in(in, f.peer, got), "stream 6 is unknown here");
  // Sizes that do not add up.
  wire_chunk first = chunks[0];
  first.stream = 8;
  BOOST_TEST(in.add(f.peer, first, f.t0) == "");
  wire_chunk second = chunks[1];
  second.stream = 8;
  second.total += 8;
  contains(in.add(f.peer, second, f.t0), "the stream began with");
  wire_chunk overlong = chunks[0];
  overlong.stream = 9;
  overlong.total = 64;
  contains(in.add(f.peer, overlong, f.t0), "runs past the message's 64 bytes");
}

BOOST_AUTO_TEST_CASE(streams_above_the_limits_are_refused_before_anything_is_held) {
  fixture f;
  inbound_streams in(small_limits());
  wire_chunk huge{1, 0, 2u << 20, nullptr, 0, nullptr, {}};
  contains(in.add(f.peer, huge, f.t0), "announces 2 MiB, above the largest message accepted (1 MiB)");
  BOOST_TEST(in.buffered_bytes() == 0u);
  // Two streams of 1 MiB fit the 2 MiB budget; a third does not until one is done.
  for (uint64_t id : {2, 3})
    BOOST_TEST(in.add(f.peer, wire_chunk{id, 0, 1u << 20, nullptr, 0, nullptr, {}}, f.t0) == "");
  BOOST_TEST(in.buffered_bytes() == size_t{2} << 20);
  contains(in.add(f.peer, wire_chunk{4, 0, 1u << 20, nullptr, 0, nullptr, {}}, f.t0),
           "does not fit: 2 MiB of the 2 MiB allowed");
  contains(in.add(f.peer, wire_chunk{5, 0, 12, nullptr, 0, nullptr, {}}, f.t0), "not whole 8-byte words");
  wire_chunk garbled;
  garbled.stream = 6;
  garbled.wire_error = "malformed message: truncated";
  contains(in.add(f.peer, garbled, f.t0), "stream 6: garbled chunk: malformed message: truncated");
}

BOOST_AUTO_TEST_CASE(an_abandoned_stream_is_dropped_after_the_timeout) {
  fixture f;
  inbound_streams in(small_limits());  // timeout 1 s
  const auto chunks = cut_chunks(pieces(big_request()), 2, 4096);
  BOOST_TEST(in.add(f.peer, chunks[0], f.t0) == "");
  in.expire(f.t0 + 900ms);  // still alive
  BOOST_TEST(in.buffered_bytes() > 0u);
  BOOST_TEST(in.add(f.peer, chunks[1], f.t0 + 900ms) == "");
  in.expire(f.t0 + 1800ms);  // 0.9 s since its last chunk
  BOOST_TEST(in.buffered_bytes() > 0u);
  in.expire(f.t0 + 2000ms);
  BOOST_TEST(in.buffered_bytes() == 0u);
  BOOST_TEST(in.open_streams() == 1u);  // remembered a while, to tell a late final message why
  backward_request got;
  got.stream = 2;
  contains(stream_in(in, f.peer, got), "stream 2 was abandoned: no chunk for 1.00 s");
  // Another stream abandoned and never finished is forgotten altogether a few timeouts later.
  BOOST_TEST(
      in.add(f.peer,
             wire_chunk{chunks[0].stream + 1, 0, chunks[0].total, chunks[0].data, chunks[0].size, chunks[0].keep, {}},
             f.t0) == "");
  in.expire(f.t0 + 1100ms);
  BOOST_TEST(in.buffered_bytes() == 0u);
  in.expire(f.t0 + 4000ms);
  BOOST_TEST(in.open_streams() == 1u);
  in.expire(f.t0 + 5200ms);
  BOOST_TEST(in.open_streams() == 0u);
}
