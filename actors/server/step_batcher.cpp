#include "actors/server/step_batcher.hpp"

#include <algorithm>

#include "actors/protocol/errors.hpp"

namespace corolla {
// Rows [from, from + count) of each of the B sequences of hidden [B, T, D], one after the other, to rows from `row` of
// batch [M, D].
void StepBatcher::copy_tokens(const Tensor& hidden, int64_t from, int64_t count, Tensor& batch, int64_t row) const {
  const int64_t b = hidden.dim(0), t = hidden.dim(1);
  for (int64_t i = 0; i < b; ++i) host_.copy_host_rows(hidden, i * t + from, batch, row + i * count, count);
}

// The reverse: count tokens of each sequence from rows of a batch's output starting at `row` into rows
// [from, from + count) of out [B, T, D].
void StepBatcher::place_tokens(const Tensor& rows, int64_t row, int64_t from, int64_t count, Tensor& out) const {
  const int64_t b = out.dim(0), t = out.dim(1);
  for (int64_t i = 0; i < b; ++i) host_.copy_host_rows(rows, row + i * count, out, i * t + from, count);
}

bool StepBatcher::may_start(const group_state& g, time_point now) const {
  if (g.running || g.queue.empty()) return false;
  if (now >= g.hold_until || g.queue.front()->done_tokens > 0) return true;  // a prompt's next chunk never waits
  auto first = g.ran_at.find(g.queue.front()->session);
  if (first == g.ran_at.end()) return true;
  // Those that ran within the hold after it are expected within the hold; those further behind are not waited for
  // (on a ring of parts each is behind the others: only the nearer one waits).
  const time_point behind_until = first->second + g.hold;
  std::set<uint64_t> waiting;
  for (const auto& s : g.queue) waiting.insert(s->session);
  for (const auto& [session, at] : g.ran_at)
    if (at >= first->second && at <= behind_until && !waiting.contains(session)) return false;
  return true;
}

caf::timespan StepBatcher::hold_for(const group_state& g, uint64_t session, time_point now) {
  auto it = g.ran_at.find(session);
  if (it == g.ran_at.end()) return caf::timespan{0};
  return std::min({(now - it->second) / 2, g.last_duration, kMaxHold});
}

void StepBatcher::forget(uint64_t session) {
  for (auto& [group, g] : groups_) g.ran_at.erase(session);
}

void StepBatcher::push(const step_group& group, uint64_t session, std::string adapter, Tensor hidden,
                       std::vector<int32_t> positions, done_fn done, time_point now, std::vector<int32_t> hypo_ids) {
  group_state& g = groups_[group];
  if (!g.running && g.queue.empty()) {
    g.hold = hold_for(g, session, now);
    g.hold_until = now + g.hold;
  }
  auto s = std::make_shared<step>();
  s->session = session;
  s->adapter = std::move(adapter);
  s->hidden = std::move(hidden);
  s->positions = std::move(positions);
  s->hypo_ids = std::move(hypo_ids);
  s->done = std::move(done);
  g.queue.push_back(std::move(s));
}

std::vector<step_group> StepBatcher::due(time_point now) const {
  std::vector<step_group> out;
  for (const auto& [group, g] : groups_)
    if (may_start(g, now) || (max_batch_tokens_ <= 0 && !g.queue.empty())) out.push_back(group);
  return out;
}

std::optional<StepBatcher::time_point> StepBatcher::next_hold_end() const {
  std::optional<time_point> out;
  for (const auto& [group, g] : groups_)
    if (!g.running && !g.queue.empty() && (!out || g.hold_until < *out)) out = g.hold_until;
  return out;
}

size_t StepBatcher::waiting() const {
  size_t n = 0;
  for (const auto& [group, g] : groups_) n += g.queue.size();
  return n;
}

std::vector<StepBatcher::part> StepBatcher::plan(std::deque<std::shared_ptr<step>>& queue) const {
  std::vector<part> parts;
  int64_t row = 0;
  auto take = [&](const std::shared_ptr<step>& s, int64_t count) {
    parts.push_back({s, s->done_tokens, count, row});
    row += s->hidden.dim(0) * count;
    s->done_tokens += count;
  };
  if (max_batch_tokens_ <= 0) {  // batching off: the oldest step alone, whole
    take(queue.front(), queue.front()->hidden.dim(1));
    queue.pop_front();
    return parts;
  }
  int64_t budget = max_batch_tokens_;
  for (auto it = queue.begin(); it != queue.end();) {  // every step that fits whole, oldest first
    const step& s = **it;
    const int64_t rows = s.hidden.dim(0) * (s.hidden.dim(1) - s.done_tokens);
    if (rows > budget) {
      ++it;
      continue;
    }
    budget -= rows;
    take(*it, s.hidden.dim(1) - s.done_tokens);
    it = queue.erase(it);
  }
  if (!queue.empty()) {  // then a chunk of the oldest that did not fit: at least a token of each sequence
    const std::shared_ptr<step> s = queue.front();
    const int64_t left = s->hidden.dim(1) - s->done_tokens;
    take(s, std::clamp<int64_t>(budget / s->hidden.dim(0), 1, left));
    if (s->done_tokens == s->hidden.dim(1)) queue.pop_front();
  }
  return parts;
}

std::optional<StepBatcher::started> StepBatcher::start(const step_group& group, time_point now) {
  auto g = groups_.find(group);
  if (g == groups_.end() || g->second.queue.empty()) return std::nullopt;
  if (max_batch_tokens_ > 0 && !may_start(g->second, now)) return std::nullopt;
  std::vector<part> parts = plan(g->second.queue);
  const int64_t d = parts.front().s->hidden.dim(2);
  int64_t rows = 0;
  for (const part& p : parts) rows += p.s->hidden.dim(0) * p.count;
  started out;
  out.id = next_id_++;
  out.group = group;
  out.msg.hidden = host_.alloc_host(DType::f32, {rows, d});
  for (const part& p : parts) {
    const step& s = *p.s;
    const int64_t b = s.hidden.dim(0), t = s.hidden.dim(1);
    copy_tokens(s.hidden, p.from, p.count, out.msg.hidden, p.row);
    batch_item item{.session = s.session,
                    .row = p.row,
                    .batch = b,
                    .tokens = p.count,
                    .positions = {},
                    .adapter = s.adapter,
                    .error = {},
                    .hypo_ids = {}};
    if (p.from == 0) item.hypo_ids = s.hypo_ids;  // the reordering comes before the step's first token
    item.positions.reserve(static_cast<size_t>(b * p.count));
    for (int64_t i = 0; i < b; ++i)
      item.positions.insert(item.positions.end(), s.positions.begin() + i * t + p.from,
                            s.positions.begin() + i * t + p.from + p.count);
    out.msg.items.push_back(std::move(item));
  }
  g->second.running = true;
  if (max_batch_tokens_ > 0)
    for (const part& p : parts) g->second.ran_at[p.s->session] = now;
  running_[out.id] = {group, std::move(parts), now};
  return out;
}

void StepBatcher::end(step& s, caf::expected<Tensor> result) {
  if (s.ended) return;
  s.ended = true;
  auto done = std::move(s.done);
  s.hidden = {};
  s.out = {};
  done(std::move(result));
}

void StepBatcher::finish(uint64_t id, caf::expected<block_batch_msg> result, time_point now) {
  auto it = running_.find(id);
  if (it == running_.end()) return;  // failed meanwhile (fail_all)
  running_batch batch = std::move(it->second);
  running_.erase(it);
  auto g = groups_.find(batch.group);
  if (g != groups_.end()) {
    g->second.running = false;
    g->second.last_duration = now - batch.started_at;
    // Steps that came while it ran wait for the sessions behind them as long as if they arrived now.
    if (!g->second.queue.empty()) {
      g->second.hold = hold_for(g->second, g->second.queue.front()->session, now);
      g->second.hold_until = now + g->second.hold;
    }
  }
  auto drop_waiting = [&](const std::shared_ptr<step>& s) {  // a failed step's chunks still queued
    if (g == groups_.end()) return;
    auto& q = g->second.queue;
    q.erase(std::remove(q.begin(), q.end(), s), q.end());
  };
  for (size_t i = 0; i < batch.parts.size(); ++i) {
    part& p = batch.parts[i];
    step& s = *p.s;
    if (s.ended) continue;
    const int64_t b = s.hidden.dim(0), t = s.hidden.dim(1), d = s.hidden.dim(2);
    caf::error error;
    if (!result)
      error = result.error();
    else if (i >= result->items.size() || result->items[i].row != p.row)
      error = make_error(errc::internal, "the blocks answered a batch with other items than it held");
    else if (result->items[i].error)
      error = result->items[i].error;
    else if (result->hidden.rank() != 2 || result->hidden.dim(1) != d || result->hidden.dim(0) < p.row + b * p.count)
      error = make_error(errc::internal, "the blocks answered " + result->hidden.describe() + " for a batch");
    if (error) {
      drop_waiting(p.s);
      end(s, std::move(error));
      continue;
    }
    if (p.from == 0 && p.count == t) {  // in one piece: its rows of the batch's output, shared
      end(s, result->hidden.slice_rows(p.row, p.row + b * t).reshaped({b, t, d}));
      continue;
    }
    if (!s.out.data()) s.out = host_.alloc_host(DType::f32, s.hidden.shape());  // its first chunk
    place_tokens(result->hidden, p.row, p.from, p.count, s.out);
    if (p.from + p.count == t) end(s, std::move(s.out));
  }
  // An idle group keeps its state (when its sessions last ran sets its holds) while steps come; the gate has few.
}

void StepBatcher::fail_all(const caf::error& error) {
  std::vector<std::shared_ptr<step>> steps;
  for (auto& [group, g] : groups_)
    for (auto& s : g.queue) steps.push_back(s);
  for (auto& [id, batch] : running_)
    for (auto& p : batch.parts) steps.push_back(p.s);
  groups_.clear();
  running_.clear();
  for (auto& s : steps) end(*s, error);
}

}  // namespace corolla
