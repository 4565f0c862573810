#include "model/tokenizer/bpe.hpp"

#include <algorithm>

namespace corolla::tok {

void MergeTable::grow() {
  const size_t capacity = keys_.empty() ? 1024 : keys_.size() * 2;
  std::vector<uint64_t> old_keys(capacity, kEmpty);
  std::vector<Merge> old_values(capacity);
  old_keys.swap(keys_);
  old_values.swap(values_);
  mask_ = capacity - 1;
  shift_ = 64 - __builtin_ctzll(capacity);
  for (size_t i = 0; i < old_keys.size(); ++i) {
    if (old_keys[i] == kEmpty) continue;
    size_t s = slot(old_keys[i]);
    while (keys_[s] != kEmpty) s = (s + 1) & mask_;
    keys_[s] = old_keys[i];
    values_[s] = old_values[i];
  }
}

void MergeTable::insert(int32_t left, int32_t right, int32_t rank, int32_t result) {
  if (left < 0 || right < 0 || result < 0) return;
  if ((count_ + 1) * 2 > keys_.size()) grow();  // load factor at most 1/2
  const uint64_t key = pack(left, right);
  size_t s = slot(key);
  while (keys_[s] != kEmpty) {
    if (keys_[s] == key) return;
    s = (s + 1) & mask_;
  }
  keys_[s] = key;
  values_[s] = {rank, result};
  ++count_;
}

namespace {

struct Node {
  int32_t id;  // -2 once merged into its left neighbour
  int32_t prev, next;
  uint32_t begin, len;
};

struct Candidate {
  int32_t rank;
  int32_t left;  // node index; nodes are in text order, so this orders ties leftmost first
  int32_t left_id, right_id, result;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
};

void emit_fallback(const Vocab& vocab, const BpeOptions& opt, std::string_view bytes, std::vector<int32_t>& out,
                   bool& last_unk) {
  if (opt.byte_fallback) {
    bool all = true;
    for (unsigned char b : bytes) all = all && vocab.byte_token(b) >= 0;
    if (all) {
      for (unsigned char b : bytes) out.push_back(vocab.byte_token(b));
      last_unk = false;
      return;
    }
  }
  if (opt.unk_id < 0) return;
  if (!(opt.fuse_unk && last_unk)) out.push_back(opt.unk_id);
  last_unk = true;
}

}  // namespace

void bpe_merge(const MergeTable& merges, const Vocab& vocab, const BpeOptions& options, std::string_view text,
               const std::vector<BpeSymbol>& symbols, std::vector<int32_t>& out) {
  const int32_t n = static_cast<int32_t>(symbols.size());
  if (n == 0) return;
  thread_local std::vector<Node> nodes;
  thread_local std::vector<Candidate> heap;
  nodes.resize(n);
  heap.clear();
  for (int32_t i = 0; i < n; ++i)
    nodes[i] = {symbols[i].id, i - 1, i + 1 < n ? i + 1 : -1, symbols[i].begin, symbols[i].len};

  auto consider = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = nodes[left].next;
    if (right < 0) return;
    if (const Merge* m = merges.find(nodes[left].id, nodes[right].id)) {
      heap.push_back({m->rank, left, nodes[left].id, nodes[right].id, m->result});
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Candidate c = heap.back();
    heap.pop_back();
    Node& l = nodes[c.left];
    if (l.id != c.left_id || l.next < 0) continue;  // stale: the left symbol changed
    Node& r = nodes[l.next];
    if (r.id != c.right_id) continue;  // stale: the right symbol changed
    l.id = c.result;
    l.len += r.len;
    l.next = r.next;
    if (r.next >= 0) nodes[r.next].prev = c.left;
    r.id = -2;
    consider(l.prev);
    consider(c.left);
  }

  bool last_unk = false;
  for (int32_t i = 0; i >= 0; i = nodes[i].next) {
    const Node& s = nodes[i];
    if (s.id >= 0) {
      out.push_back(s.id);
      last_unk = false;
    } else {
      emit_fallback(vocab, options, text.substr(s.begin, s.len), out, last_unk);
    }
  }
}

}  // namespace corolla::tok
