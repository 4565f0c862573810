// Large messages as streams of chunks. A forward or backward request or reply above a threshold (a 4x2048x8192
// f32 batch is 256 MB) does not cross processes as one CAF message: its flat Cap'n Proto bytes are cut into
// wire_chunk messages (cut where they lie: tensors and segments are referenced, not copied), each a request the
// receiver acknowledges, at most window_bytes unacknowledged at a time; then comes the message itself, empty but
// for `stream` naming the chunks. The receiver reassembles the chunks into one word-aligned buffer and reads the
// message in place from it (tensors are views into it), so handlers see the message as if it had arrived whole.
// Requests and their replies stream alike: chunks first, then the request (or the response) that triggers the work.
//
// Why not one message, and why a window: CAF's middleman counts a connection as alive only when a whole message
// arrives, so one that takes longer than the connection timeout (1 s here, for failure detection) to cross gets
// the connection dropped (bench_hops: one message of 200-256 MiB often fails); and a sender that queued every
// chunk at once would hold the whole message again in its send buffer, with heartbeats waiting behind it.
//
// The receiver's memory is bounded: a stream announces its total size in every chunk; one above
// max_message_bytes, or beyond max_buffered_bytes with the streams already open, is refused. One peer (a node) may
// hold only a share of that (max_streams_per_peer, max_buffered_bytes_per_peer), so it cannot take every other
// peer's room. A broken stream
// (a chunk missing or out of order, inconsistent sizes, too large) frees its bytes at once; the chunk that broke it,
// later ones and its final message are answered with the problem. A stream that gets no chunk for `timeout` is
// dropped, freeing its bytes.
//
// In one process nothing is serialized (messages share their tensors), so messages stream only to other processes
// (unless limits.in_process asks for it: the tests use that to run the real path in one process).
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_clock.hpp>
#include <caf/atom.hpp>
#include <caf/result.hpp>
#include <caf/timespan.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/protocol/errors.hpp"
#include "actors/protocol/messages.hpp"

namespace corolla {

// Messages above this many bytes travel as streams: below it one message costs less than its chunks' overhead.
inline constexpr size_t kStreamThreshold = size_t{4} << 20;
// The size of a chunk: large enough that per-message costs vanish, small enough that the receiver copies it
// while it is in cache.
inline constexpr size_t kStreamChunkBytes = size_t{1} << 20;

struct stream_limits {
  size_t threshold = kStreamThreshold;
  size_t chunk_bytes = kStreamChunkBytes;
  size_t window_bytes = 8 * kStreamChunkBytes;  // sent and not yet acknowledged
  size_t max_message_bytes = size_t{1} << 30;   // the largest message a receiver reassembles
  size_t max_buffered_bytes = size_t{2} << 30;  // all the streams a receiver reassembles at once
  size_t max_streams = 1024;         // streams a receiver tracks at once, broken ones included (each costs an entry)
  size_t max_streams_per_peer = 64;  // of those, the streams of one sending node
  size_t max_buffered_bytes_per_peer = size_t{1} << 30;  // of max_buffered_bytes, what one sending node holds
  caf::timespan timeout = std::chrono::seconds(30);      // a stream without a chunk for this long is dropped
  bool in_process = false;                               // stream to actors of this process too (tests)
};

using stream_sweep_atom = caf::atom_constant<caf::atom("strmsweep")>;

// The receiving side: streams being reassembled, per sender and stream id.
class inbound_streams {
 public:
  using time_point = caf::actor_clock::time_point;
  explicit inbound_streams(stream_limits limits = {}) : limits_(limits) {}

  const stream_limits& limits() const { return limits_; }
  // Takes a chunk from `from`. Returns "" or the problem, which breaks the stream: its bytes are freed, later chunks
  // are ignored and its final message is refused with the problem.
  std::string add(const caf::actor_addr& from, const wire_chunk& chunk, time_point now);
  // The reassembled bytes of stream `id` from `from` (the stream is then forgotten), or the problem.
  std::string take(const caf::actor_addr& from, uint64_t id, std::shared_ptr<std::vector<char>>& bytes);
  // Breaks streams that got no chunk for limits().timeout (freeing their bytes) and forgets broken ones a few
  // timeouts later.
  void expire(time_point now);

  size_t open_streams() const { return streams_.size(); }
  size_t buffered_bytes() const { return buffered_; }
  // True the first time it is asked after a sweep: whoever asks schedules the next sweep.
  bool arm_sweep() { return !armed_ && (armed_ = true); }
  void swept() { armed_ = false; }

 private:
  struct entry {
    uint64_t total = 0;
    std::shared_ptr<std::vector<char>> bytes;  // reserved for `total`, filled in order
    std::string problem;                       // set: broken
    time_point last;
    caf::node_id peer;  // the sending node, whose share the stream counts against
  };
  // What one sending node holds.
  struct share {
    size_t streams = 0;
    size_t bytes = 0;
  };
  using key = std::pair<caf::actor_addr, uint64_t>;
  using iterator = std::map<key, entry>::iterator;
  // "" or why a new stream from `peer` cannot be tracked.
  std::string room_for_stream(const caf::node_id& peer) const;
  iterator open(const caf::actor_addr& from, uint64_t id, time_point now);
  // "" or why `e` cannot reserve its total.
  std::string room_for_bytes(const entry& e) const;
  void reserve(entry& e);
  std::string breaks(entry& e, std::string problem);
  void forget(iterator it);

  stream_limits limits_;
  std::map<key, entry> streams_;
  std::map<caf::node_id, share> peers_;
  size_t buffered_ = 0;
  bool armed_ = false;
};

// Whether `msg` (of `bytes` flat bytes) goes to `dest` as a stream.
inline bool should_stream(const caf::actor& dest, const caf::node_id& here, size_t bytes, const stream_limits& limits) {
  return dest && bytes > limits.threshold && (limits.in_process || dest.node() != here);
}

// The chunks of stream `id` over `pieces`, in order: at most chunk_bytes each, cut where pieces end (each points
// into one piece: nothing is copied).
std::vector<wire_chunk> cut_chunks(const wire_pieces& pieces, uint64_t id, size_t chunk_bytes);

// Sends `msg` to `dest` in the way its size asks, then calls `then` with what to send last: `msg` itself when it is
// small or `dest` is in this process; otherwise, once every chunk is acknowledged, the empty message naming the
// stream; or the error of a chunk the receiver refused (or that timed out). `next_stream` numbers the sender's
// streams. then: void(caf::expected<T>).
template <class T, class Self, class Then>
void stream_out(Self* self, const caf::actor& dest, T msg, const stream_limits& limits, uint64_t& next_stream,
                Then then) {
  if (!dest || (!limits.in_process && dest.node() == self->node())) return then(std::move(msg));
  wire_pieces p = pieces(msg);
  if (!should_stream(dest, self->node(), p.size, limits)) return then(std::move(msg));
  const uint64_t id = next_stream++;
  struct progress {
    std::vector<wire_chunk> chunks;
    size_t sent = 0, acked = 0;
    bool over = false;
    std::function<void()> pump;  // sends chunks while the window allows; cleared when the stream is over
  };
  auto st = std::make_shared<progress>();
  st->chunks = cut_chunks(p, id, limits.chunk_bytes);
  const size_t window = std::max<size_t>(1, limits.window_bytes / std::max<size_t>(1, limits.chunk_bytes));
  const caf::timespan timeout = limits.timeout;
  std::weak_ptr<progress> weak = st;  // the pump must not own its own state
  st->pump = [self, dest, window, timeout, id, weak, then]() mutable {
    auto st = weak.lock();
    if (!st) return;
    while (!st->over && st->sent < st->chunks.size() && st->sent - st->acked < window) {
      self->request(dest, timeout, st->chunks[st->sent++])
          .then(
              [st, id, then](const ack&) mutable {
                if (st->over) return;
                if (++st->acked < st->chunks.size()) return st->pump();
                st->over = true;
                st->pump = nullptr;
                T hollow;
                hollow.stream = id;
                then(std::move(hollow));
              },
              [st, then](caf::error& e) mutable {
                if (st->over) return;
                st->over = true;
                st->pump = nullptr;
                then(caf::expected<T>(std::move(e)));
              });
    }
  };
  st->pump();
}

// Replaces a message that names a stream by the message its chunks reassemble (read in place). Returns "" or the
// problem (the stream's, or the reassembled message's).
template <class T>
std::string stream_in(inbound_streams& in, const caf::actor_addr& from, T& msg) {
  if (msg.stream == 0) return {};
  std::shared_ptr<std::vector<char>> bytes;
  if (auto problem = in.take(from, msg.stream, bytes); !problem.empty()) return problem;
  T whole;
  decode(std::move(bytes), whole);
  if (!whole.wire_error.empty()) return "stream " + std::to_string(msg.stream) + ": " + whole.wire_error;
  if (whole.stream != 0) return "stream " + std::to_string(msg.stream) + " holds a message naming another stream";
  msg = std::move(whole);
  return {};
}

// An actor's handler for wire_chunk: takes the chunk (answering ack, or the stream's problem) and keeps a sweep
// scheduled while streams are open.
template <class Self>
caf::result<ack> receive_chunk(Self* self, inbound_streams& in, const wire_chunk& chunk) {
  auto problem = in.add(caf::actor_cast<caf::actor_addr>(self->current_sender()), chunk, self->clock().now());
  if (in.open_streams() > 0 && in.arm_sweep())
    self->delayed_send(self, in.limits().timeout / 2, stream_sweep_atom::value);
  if (!problem.empty()) return make_error(errc::bad_request, std::move(problem));
  return ack{};
}

// An actor's handler for stream_sweep_atom.
template <class Self>
void sweep_streams(Self* self, inbound_streams& in) {
  in.swept();
  in.expire(self->clock().now());
  if (in.open_streams() > 0 && in.arm_sweep())
    self->delayed_send(self, in.limits().timeout / 2, stream_sweep_atom::value);
}

}  // namespace corolla
