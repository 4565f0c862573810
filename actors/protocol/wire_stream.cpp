#include "actors/protocol/wire_stream.hpp"

#include <capnp/common.h>

namespace corolla {
namespace {

// Sizes for people: MiB from 1 MiB up, bytes below.
std::string mb(size_t bytes) {
  if (bytes < (size_t{1} << 20)) return std::to_string(bytes) + " bytes";
  return std::to_string((bytes + (1 << 19)) >> 20) + " MiB";
}

// Broken streams are remembered (without their bytes) this many timeouts, so that a final message that comes
// late is told what happened rather than "unknown".
constexpr int kRememberBroken = 4;

std::string seconds(caf::timespan t) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(t).count() / 1000.0).substr(0, 4) + " s";
}

}  // namespace

std::vector<wire_chunk> cut_chunks(const wire_pieces& pieces, uint64_t id, size_t chunk_bytes) {
  chunk_bytes = std::max<size_t>(chunk_bytes, 1);
  std::vector<wire_chunk> out;
  uint64_t offset = 0;
  for (const auto& p : pieces.pieces)
    for (size_t at = 0; at < p.size; at += chunk_bytes) {
      const size_t n = std::min(chunk_bytes, p.size - at);
      out.push_back(wire_chunk{id, offset, pieces.size, p.data + at, n, pieces.keep, {}});
      offset += n;
    }
  return out;
}

std::string inbound_streams::room_for_stream(const caf::node_id& peer) const {
  // A peer opening stream after stream (broken ones are kept a while to answer their final messages) must not
  // grow the table without bound, nor fill it for everyone else.
  if (streams_.size() >= limits_.max_streams)
    return std::to_string(streams_.size()) + " streams are being received already (the limit)";
  auto it = peers_.find(peer);
  if (it != peers_.end() && it->second.streams >= limits_.max_streams_per_peer)
    return "its sender has " + std::to_string(it->second.streams) + " streams being received already (the limit " +
           "for one peer)";
  return {};
}

inbound_streams::iterator inbound_streams::open(const caf::actor_addr& from, uint64_t id, time_point now) {
  auto it = streams_.emplace(key{from, id}, entry{}).first;
  entry& e = it->second;
  e.last = now;
  e.peer = from ? from.node() : caf::node_id{};  // an anonymous sender has no node: all of them share one
  ++peers_[e.peer].streams;
  return it;
}

std::string inbound_streams::room_for_bytes(const entry& e) const {
  if (buffered_ + e.total > limits_.max_buffered_bytes)
    return mb(buffered_) + " of the " + mb(limits_.max_buffered_bytes) +
           " allowed for streams being received are taken";
  const size_t held = peers_.at(e.peer).bytes;
  if (held + e.total > limits_.max_buffered_bytes_per_peer)
    return "its sender holds " + mb(held) + " of the " + mb(limits_.max_buffered_bytes_per_peer) + " one peer may";
  return {};
}

void inbound_streams::reserve(entry& e) {
  e.bytes = std::make_shared<std::vector<char>>();
  e.bytes->reserve(e.total);  // reserved, not filled: the chunks are copied in once
  buffered_ += e.total;
  peers_.at(e.peer).bytes += e.total;
}

std::string inbound_streams::breaks(entry& e, std::string problem) {
  if (e.bytes) {
    buffered_ -= e.total;
    peers_.at(e.peer).bytes -= e.total;
  }
  e.bytes.reset();
  e.problem = problem;
  return problem;
}

void inbound_streams::forget(iterator it) {
  entry& e = it->second;
  if (e.bytes) breaks(e, {});
  auto peer = peers_.find(e.peer);
  if (--peer->second.streams == 0) peers_.erase(peer);
  streams_.erase(it);
}

std::string inbound_streams::add(const caf::actor_addr& from, const wire_chunk& c, time_point now) {
  const std::string name = "stream " + std::to_string(c.stream);
  auto it = streams_.find({from, c.stream});
  if (it == streams_.end()) {
    if (auto problem = room_for_stream(from ? from.node() : caf::node_id{}); !problem.empty())
      return name + ": " + problem;
    it = open(from, c.stream, now);
    entry& e = it->second;
    if (!c.wire_error.empty()) return breaks(e, name + ": garbled chunk: " + c.wire_error);
    e.total = c.total;
    if (c.offset != 0)
      return breaks(e, name + ": a chunk at byte " + std::to_string(c.offset) +
                           " came first; the start of the stream never arrived (or was dropped)");
    if (c.total > limits_.max_message_bytes)
      return breaks(e, name + " announces " + mb(c.total) + ", above the largest message accepted (" +
                           mb(limits_.max_message_bytes) + ")");
    if (c.total % sizeof(capnp::word) != 0)
      return breaks(e, name + " announces " + std::to_string(c.total) + " bytes, not whole 8-byte words");
    if (auto problem = room_for_bytes(e); !problem.empty())
      return breaks(e, name + " of " + mb(c.total) + " does not fit: " + problem);
    reserve(e);
  } else if (!c.wire_error.empty()) {
    entry& e = it->second;
    e.last = now;
    return e.problem.empty() ? breaks(e, name + ": garbled chunk: " + c.wire_error) : e.problem;
  }
  entry& e = it->second;
  e.last = now;
  if (!e.problem.empty()) return e.problem;
  const uint64_t have = e.bytes->size();
  if (c.total != e.total)
    return breaks(e, name + ": a chunk says the message has " + std::to_string(c.total) +
                         " bytes, the stream began with " + std::to_string(e.total));
  if (c.offset != have)
    return breaks(e, name + ": a chunk at byte " + std::to_string(c.offset) + " where byte " + std::to_string(have) +
                         " was due (a chunk was lost or reordered)");
  if (c.size > e.total - have)
    return breaks(e, name + ": a chunk of " + std::to_string(c.size) + " bytes at byte " + std::to_string(have) +
                         " runs past the message's " + std::to_string(e.total) + " bytes");
  e.bytes->insert(e.bytes->end(), c.data, c.data + c.size);
  return {};
}

std::string inbound_streams::take(const caf::actor_addr& from, uint64_t id, std::shared_ptr<std::vector<char>>& bytes) {
  const std::string name = "stream " + std::to_string(id);
  auto it = streams_.find({from, id});
  if (it == streams_.end())
    return name + " is unknown here: none of its chunks arrived, or it was dropped as abandoned";
  entry& e = it->second;
  std::string problem = e.problem;
  if (problem.empty() && e.bytes->size() != e.total)
    problem = name + " ended after " + std::to_string(e.bytes->size()) + " of its " + std::to_string(e.total) +
              " bytes (chunks were lost)";
  if (problem.empty()) bytes = e.bytes;
  forget(it);
  return problem;
}

void inbound_streams::expire(time_point now) {
  for (auto it = streams_.begin(); it != streams_.end();) {
    entry& e = it->second;
    const auto idle = now - e.last;
    if (idle < limits_.timeout || (!e.problem.empty() && idle < kRememberBroken * limits_.timeout)) {
      ++it;
    } else if (e.problem.empty()) {  // abandoned half way: free it, and say why if its final message comes late
      breaks(e, "stream " + std::to_string(it->first.second) + " was abandoned: no chunk for " +
                    seconds(limits_.timeout) + " after " + std::to_string(e.bytes->size()) + " of " +
                    std::to_string(e.total) + " bytes; it was dropped");
      e.last = now;
      ++it;
    } else {
      forget(it++);
    }
  }
}

}  // namespace corolla
