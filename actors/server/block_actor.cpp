#include "actors/server/block_actor.hpp"

#include <caf/all.hpp>
#include <unordered_map>
#include <vector>

#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/server/block_training.hpp"
#include "kernels/modelled_time.hpp"
#include "model/recorded_steps.hpp"
#include "model/train/span_training.hpp"

namespace corolla {
namespace {

struct block_state {
  std::shared_ptr<Backend> backend;  // first: everything below computes on it and is released before it
  std::shared_ptr<Block> block;
  std::shared_ptr<const adapter_set> adapters;
  std::shared_ptr<KvPool> pool;  // the pages of the sessions' caches: the server's cache budget for this block
  // This block's pairs of the adapter `name` (nullptr for none, or when it leaves this block alone); false when
  // the server has no such adapter.
  bool lora(const std::string& name, const BlockLora*& out) const {
    out = nullptr;
    if (name.empty()) return true;
    if (!adapters) return false;
    auto it = adapters->find(name);
    if (it == adapters->end()) return false;
    out = it->second->block(block->index());
    return true;
  }
  // The sessions' KV caches: ids in one small array scanned in order, caches beside it. A block holds a few
  // sessions at a time, and a step's lookup in a hash map costs two cache misses (bucket, then node) in a swarm of
  // thousands of blocks, more than scanning a few ids (docs/PERFORMANCE.md, "Simulator").
  std::vector<uint64_t> cache_sessions;
  std::vector<KVCache> caches;
  RecordedSteps recorded;                    // the sessions' decode steps, where the backend records them
  size_t index_of(uint64_t session) const {  // cache_sessions.size() when the session has none
    size_t i = 0;
    while (i < cache_sessions.size() && cache_sessions[i] != session) ++i;
    return i;
  }
  KVCache* cache_of(uint64_t session) {
    const size_t i = index_of(session);
    return i < caches.size() ? &caches[i] : nullptr;
  }
  void set_cache(uint64_t session, KVCache cache) {
    if (KVCache* held = cache_of(session)) {
      recorded.forget(*held);
      *held = std::move(cache);
      return;
    }
    cache_sessions.push_back(session);
    caches.push_back(std::move(cache));
  }
  void drop_cache(uint64_t session) {
    const size_t i = index_of(session);
    if (i == caches.size()) return;
    recorded.forget(caches[i]);
    cache_sessions[i] = cache_sessions.back();
    caches[i] = std::move(caches.back());
    cache_sessions.pop_back();
    caches.pop_back();
  }
  // Modelled compute (a backend that reports time instead of spending it): replies wait here until their work
  // would have finished.
  uint64_t next_pending = 1;
  struct held_reply {
    caf::response_promise rp;
    std::function<void()> then;
  };
  std::unordered_map<uint64_t, held_reply> pending;
  std::unordered_map<uint64_t, Tensor> prompts;  // deep prompts of the sessions that have some [B, P, D]
  static inline const char* name = "block";
};

using resume_atom = caf::atom_constant<caf::atom("resume")>;
// The block's whole interface: block_actor_handle, and its own timer for replies held until modelled work ends.
using block_actor_impl = block_actor_handle::extend<caf::reacts_to<resume_atom, uint64_t>>;
using block_self = block_actor_impl::stateful_base<block_state>;

static_assert(std::is_same_v<caf::actor_clock::time_point, ModelledTime::time_point>,
              "modelled device time is actor clock time");

// Runs `then` (which answers `rp`) once `delay` has passed, on this actor, in order with its other messages.
void after(block_self* self, caf::timespan delay, caf::response_promise rp, std::function<void()> then) {
  const uint64_t id = self->state.next_pending++;
  self->state.pending.emplace(id, block_state::held_reply{std::move(rp), std::move(then)});
  self->delayed_send(self, delay, resume_atom::value, id);
}

caf::error unknown_adapter(const std::string& name) {
  return make_error(errc::bad_request, "this server has no adapter '" + name + "'");
}

// Runs the block over the batch's items that no block before failed, each with its session's cache and deep
// prompts; an item this block cannot run gets its error, and a forward that throws fails every item it held.
void run_batch(block_state& st, block_batch_msg& m) {
  const std::string where = "block " + std::to_string(st.block->index());
  std::vector<BlockSegment> segments;
  std::vector<batch_item*> live;
  for (batch_item& item : m.items) {
    if (item.error) continue;
    KVCache* cache = nullptr;
    if (item.session != 0 && !(cache = st.cache_of(item.session))) {
      item.error =
          make_error(errc::unknown_session, where + " has no cache for session " + std::to_string(item.session));
      continue;
    }
    const BlockLora* lora = nullptr;
    if (!st.lora(item.adapter, lora)) {
      item.error = unknown_adapter(item.adapter);
      continue;
    }
    if (cache) {  // beam search: the sequences continue the hypotheses named, sharing pages until they write
      try {
        if (!item.hypo_ids.empty()) cache->reorder(item.hypo_ids);
        cache->make_writable(st.block->backend(), item.positions, item.tokens);
      } catch (const std::invalid_argument& e) {
        item.error = make_error(errc::bad_request, where + ": " + e.what());
        continue;
      } catch (const std::exception& e) {
        item.error = make_error(errc::internal, where + ": " + e.what());
        continue;
      }
    }
    segments.push_back({.row = item.row,
                        .batch = item.batch,
                        .tokens = item.tokens,
                        .positions = item.positions,
                        .cache = cache,
                        .lora = lora});
    live.push_back(&item);
  }
  if (segments.empty()) return;
  const int64_t d = m.hidden.rank() == 2 ? m.hidden.dim(1) : 0;
  try {
    for (size_t i = 0; i < live.size(); ++i)
      if (auto p = st.prompts.find(live[i]->session); live[i]->session != 0 && p != st.prompts.end()) {
        Tensor rows = m.hidden.slice_rows(segments[i].row, segments[i].row + segments[i].rows())
                          .reshaped({segments[i].batch, segments[i].tokens, d});
        add_prompts_at_positions(st.block->backend(), rows, p->second, live[i]->positions);
      }
    const BlockSegment& first = segments.front();
    if (segments.size() == 1 && first.row == 0 && first.rows() == m.hidden.dim(0)) {
      // One session alone: the path a backend may have recorded (a CUDA graph of its decode step).
      Tensor h = m.hidden.reshaped({first.batch, first.tokens, d});
      st.recorded.forward(*st.block, h, first.positions, first.cache, first.lora);
    } else {
      st.block->forward_batch(m.hidden, segments);
    }
  } catch (const std::invalid_argument& e) {
    for (batch_item* item : live) item->error = make_error(errc::bad_request, e.what());
  } catch (const std::exception& e) {
    for (batch_item* item : live) item->error = make_error(errc::internal, where + ": " + e.what());
  }
}

block_actor_impl::behavior_type block_actor(block_self* self, std::shared_ptr<Block> block,
                                            std::shared_ptr<Backend> backend, int64_t cache_pages, DType kv_dtype,
                                            std::shared_ptr<const adapter_set> adapters) {
  self->state.backend = std::move(backend);
  self->state.block = std::move(block);
  self->state.adapters = std::move(adapters);
  self->state.pool = self->state.block->make_pool(cache_pages, kKvPageTokens, kv_dtype);
  // A block that stops (its server moves to other blocks, or shuts down) answers the steps whose replies it still
  // holds, as a request still in its mailbox would be answered, rather than leave them to the requester's timeout.
  self->set_exit_handler([=](caf::exit_msg& m) {
    if (!m.reason) return;
    for (auto& [id, held] : self->state.pending)
      held.rp.deliver(make_error(errc::peer_unavailable, "block " + std::to_string(self->state.block->index()) +
                                                             " stopped before its step finished"));
    self->state.pending.clear();
    self->quit(m.reason);
  });
  return {
      [=](const block_open_msg& m) -> caf::result<void> {
        const std::string where = "block " + std::to_string(self->state.block->index());
        try {
          auto& st = self->state;
          st.drop_cache(m.session);  // a session opened again gives its old pages back first
          const int64_t window = st.block->kv_window();
          auto cache = KVCache::take(st.pool, m.batch, m.max_length, window);
          if (!cache)
            return make_error(errc::out_of_cache,
                              where + " has " + std::to_string(st.pool->free_pages()) + " free KV pages of " +
                                  std::to_string(st.pool->page_tokens()) + " tokens; the session needs " +
                                  std::to_string(m.batch * kv_pages_for(kv_slots_for(m.max_length, window))));
          st.set_cache(m.session, std::move(*cache));
          if (has_prompts(m.prompts)) st.prompts[m.session] = m.prompts;
        } catch (const std::exception& e) {
          return make_error(errc::out_of_cache, where + ": cannot allocate the KV cache: " + e.what());
        }
        return caf::unit;
      },
      [=](const block_close_msg& m) {
        self->state.drop_cache(m.session);
        self->state.prompts.erase(m.session);
      },
      [=](block_batch_msg& m) -> caf::result<block_batch_msg> {
        run_batch(self->state, m);
        // Where the device's time is modelled, the work queues on it; the step goes on to the next block at once
        // (noting when this work ends) and the last block holds the reply until the step's work ends.
        caf::timespan delay{0};
        const auto now = self->clock().now();
        if (auto end = modelled_end(self->state.block->backend(), std::max(now, m.ready_at))) {
          m.ready_at = *end;
          if (m.then.empty()) delay = *end - now;
        }
        if (m.then.empty() && delay.count() <= 0) return std::move(m);
        if (!m.then.empty()) {
          block_actor_handle next = m.then.front();
          m.then.erase(m.then.begin());
          self->delegate(next, std::move(m));
          return caf::delegated<block_batch_msg>{};
        }
        auto rp = self->make_response_promise();
        after(self, delay, rp, [rp, m = std::move(m)]() mutable { rp.deliver(std::move(m)); });
        return caf::delegated<block_batch_msg>{};
      },
      [=](resume_atom, uint64_t id) {
        auto it = self->state.pending.find(id);
        if (it == self->state.pending.end()) return;
        auto then = std::move(it->second.then);
        self->state.pending.erase(it);
        then();
      },
      [=](block_train_msg& m) -> caf::result<block_train_result> {
        const BlockLora* lora = nullptr;
        if (!self->state.lora(m.adapter, lora)) return unknown_adapter(m.adapter);
        return block_train_step(self, *self->state.block, lora, m);
      },
  };
}

}  // namespace

block_actor_handle spawn_block_actor(caf::actor_system& sys, std::shared_ptr<Block> block,
                                     std::shared_ptr<Backend> backend, int64_t cache_tokens, DType kv_dtype,
                                     bool detached, std::shared_ptr<const adapter_set> adapters) {
  const int64_t pages = kv_pool_pages(cache_tokens);
  if (!detached)
    return sys.spawn(block_actor, std::move(block), std::move(backend), pages, kv_dtype, std::move(adapters));
  return sys.spawn<caf::detached>(block_actor, std::move(block), std::move(backend), pages, kv_dtype,
                                  std::move(adapters));
}

}  // namespace corolla
