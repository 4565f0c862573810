// The simulator clock's queue of due times: entries (due time, insertion number, payload) taken out in order of
// due time, then insertion.
//
// A single binary heap of every pending timer (millions at 10,000 servers: request timeouts, network deliveries,
// receive timeouts) costs a cache miss per level on each pop, and popping was the clock's largest cost. Most
// timers fall due within seconds, and the simulation consumes them in time order, so the queue is a calendar:
//   - `near_`, a small heap, holds every entry of the current bucket of time and before (2^kBucketShift ns wide);
//   - `ring_` holds the next kBuckets buckets, each an unsorted vector that an insertion appends to;
//   - `far_`, a heap, holds what lies beyond (hourly refreshes, half-hourly checks).
// When `near_` runs dry, the next bucket moves into it. Entries of one due time are always in the same bucket, so
// the order is exactly that of one heap.
//
// Entries can go stale (a cancelled timer): the owner says which through `live`, and stale entries are dropped
// when they reach the front or their bucket moves, or all at once by `sweep` when they outnumber the live ones.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

namespace corolla::sim {

struct timer_entry {
  int64_t due;  // nanoseconds on the actor clock
  uint64_t seq;
  uint32_t slot;
  uint32_t generation;
  bool operator>(const timer_entry& o) const { return due != o.due ? due > o.due : seq > o.seq; }
};

class timer_queue {
 public:
  static constexpr int kBucketShift = 27;    // 2^27 ns: about 134 ms of virtual time per bucket
  static constexpr int64_t kBuckets = 4096;  // about 550 s ahead in the ring

  void push(const timer_entry& e) {
    ++size_;
    const int64_t b = bucket(e.due);
    if (b <= current_) return push_heap(near_, e);
    if (b <= current_ + kBuckets) {
      ring_[static_cast<size_t>(b & (kBuckets - 1))].push_back(e);
      ++in_ring_;
      return;
    }
    push_heap(far_, e);
  }

  // The first live entry, or nullptr when none is left. `live(entry)` says whether an entry still counts.
  template <class Live>
  const timer_entry* front(Live&& live) {
    for (;;) {
      while (!near_.empty() && !live(near_.front())) pop_heap(near_);
      if (!near_.empty()) return &near_.front();
      if (in_ring_ == 0 && far_.empty()) return nullptr;
      advance(live);
    }
  }

  // Takes out the entry front() returned.
  void pop() { pop_heap(near_); }

  // Entries held, stale ones included.
  size_t size() const { return size_; }

  // Drops every stale entry.
  template <class Live>
  void sweep(Live&& live) {
    auto dead = [&](const timer_entry& e) { return !live(e); };
    size_ -= std::erase_if(near_, dead);
    std::make_heap(near_.begin(), near_.end(), std::greater<>());
    for (auto& b : ring_) {
      const size_t n = std::erase_if(b, dead);
      size_ -= n;
      in_ring_ -= n;
    }
    size_ -= std::erase_if(far_, dead);
    std::make_heap(far_.begin(), far_.end(), std::greater<>());
  }

  void clear() {
    near_.clear();
    far_.clear();
    for (auto& b : ring_) b.clear();
    size_ = in_ring_ = 0;
  }

 private:
  static int64_t bucket(int64_t due) { return due >> kBucketShift; }

  void push_heap(std::vector<timer_entry>& h, const timer_entry& e) {
    h.push_back(e);
    std::push_heap(h.begin(), h.end(), std::greater<>());
  }
  void pop_heap(std::vector<timer_entry>& h) {
    std::pop_heap(h.begin(), h.end(), std::greater<>());
    h.pop_back();
    --size_;
  }

  // Moves on to the next bucket that holds anything: its live ring entries into `near_`, then the far entries that
  // now fall inside the ring into their buckets (after: the one due kBuckets later shares the slot just emptied).
  template <class Live>
  void advance(Live&& live) {
    if (in_ring_ == 0) current_ = std::max(current_, bucket(far_.front().due) - 1);  // skip the empty stretch
    ++current_;
    auto& b = ring_[static_cast<size_t>(current_ & (kBuckets - 1))];
    in_ring_ -= b.size();
    for (const timer_entry& e : b) {
      if (live(e)) {
        near_.push_back(e);
      } else {
        --size_;
      }
    }
    b.clear();
    std::make_heap(near_.begin(), near_.end(), std::greater<>());
    while (!far_.empty() && bucket(far_.front().due) <= current_ + kBuckets) {
      const timer_entry e = far_.front();
      pop_heap(far_);
      push(e);
    }
  }

  std::vector<timer_entry> near_;  // a min-heap (std heap functions with greater)
  std::array<std::vector<timer_entry>, kBuckets> ring_;
  std::vector<timer_entry> far_;     // a min-heap
  int64_t current_ = INT64_MIN / 2;  // the bucket `near_` reaches to (before the first timer: long ago)
  size_t size_ = 0;
  size_t in_ring_ = 0;
};

}  // namespace corolla::sim
