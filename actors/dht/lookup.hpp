// One iterative Kademlia lookup as a plain state machine (the lookup actor drives it with RPCs):
//   candidates are kept sorted by XOR distance to the target; at most `alpha` queries are in flight, always to
//   the closest candidates not yet asked among the k closest that have not failed; a reply adds the contacts it
//   names; the lookup is finished when nothing is in flight and each of the k closest live candidates answered.
//   A query still in flight at two consecutive mark_slow() calls is slow: passed over like a failure, so that a
//   lost message costs the lookup a tick, not its RPC timeout (Kademlia's lookups do the same), and taken back if
//   its answer comes after all.
//
// Hops: a contact known at the start is 1 hop away, a contact named in the reply of an h-hop contact is h+1 hops
// away (the shortest chain wins); hops() is the longest chain among the contacts that answered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "actors/dht/kbucket.hpp"

namespace corolla {

class Lookup {
 public:
  struct Options {
    size_t k = 20;
    size_t alpha = 3;
  };

  // `self` is never a candidate (a node does not ask itself).
  Lookup(const NodeId& target, Options o, const NodeId& self, const std::vector<Contact>& initial);

  // The contacts to ask now (marked in flight).
  std::vector<Contact> next();
  // `from` answered and named `learned`.
  void answered(const NodeId& from, const std::vector<Contact>& learned);
  // `from` did not answer (or answered nonsense).
  void failed(const NodeId& from);
  // A tick: queries in flight since before the previous tick become slow. Returns how many did.
  size_t mark_slow();

  bool finished() const;
  size_t in_flight() const { return in_flight_; }
  // The closest contacts that answered, closest first, at most n.
  std::vector<Contact> closest_answered(size_t n) const;
  // Whether the n closest candidates that have not failed have all answered (fewer when fewer are known): no
  // nearer node is still to hear from.
  bool nearest_answered(size_t n) const;
  int hops() const;
  size_t queries() const { return queries_; }
  const NodeId& target() const { return target_; }

 private:
  enum class State { fresh, in_flight, answered, failed, slow };
  struct Candidate {
    Contact contact;
    State state = State::fresh;
    int depth = 1;
    uint64_t asked_tick = 0;  // the tick it was asked in
  };
  static bool passed_over(State s) { return s == State::failed || s == State::slow; }
  void add(const Contact& c, int depth);
  Candidate* find(const NodeId& id);

  NodeId target_, self_;
  Options opt_;
  std::map<NodeId, Candidate, id_less> candidates_;  // keyed by XOR distance to the target: closest first
  size_t in_flight_ = 0, queries_ = 0;
  uint64_t tick_ = 0;
};

}  // namespace corolla
