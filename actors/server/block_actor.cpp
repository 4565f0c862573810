#include "actors/server/block_actor.hpp"

#include <caf/all.hpp>
#include <unordered_map>

#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/server/block_training.hpp"
#include "model/train/span_training.hpp"

namespace corolla {
namespace {

struct block_state {
  std::shared_ptr<Block> block;
  std::shared_ptr<const adapter_set> adapters;
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
  std::unordered_map<uint64_t, KVCache> caches;
  std::unordered_map<uint64_t, Tensor> prompts;  // deep prompts of the sessions that have some [B, P, D]
  static inline const char* name = "block";
};

caf::error unknown_adapter(const std::string& name) {
  return make_error(errc::bad_request, "this server has no adapter '" + name + "'");
}

caf::behavior block_actor(caf::stateful_actor<block_state>* self, std::shared_ptr<Block> block,
                          std::shared_ptr<const adapter_set> adapters) {
  self->state.block = std::move(block);
  self->state.adapters = std::move(adapters);
  return {
      [=](const block_open_msg& m) -> caf::result<void> {
        try {
          self->state.caches[m.session] = self->state.block->make_cache(m.batch, m.max_length);
          if (has_prompts(m.prompts)) self->state.prompts[m.session] = m.prompts;
        } catch (const std::exception& e) {
          return make_error(errc::out_of_cache, "block " + std::to_string(self->state.block->index()) +
                                                    ": cannot allocate the KV cache: " + e.what());
        }
        return caf::unit;
      },
      [=](const block_close_msg& m) {
        self->state.caches.erase(m.session);
        self->state.prompts.erase(m.session);
      },
      [=](block_run_msg& m) -> caf::result<Tensor> {
        auto& st = self->state;
        KVCache* cache = nullptr;
        if (m.session != 0) {
          auto it = st.caches.find(m.session);
          if (it == st.caches.end())
            return make_error(errc::unknown_session, "block " + std::to_string(st.block->index()) +
                                                         " has no cache for session " + std::to_string(m.session));
          cache = &it->second;
        }
        const BlockLora* lora = nullptr;
        if (!st.lora(m.adapter, lora)) return unknown_adapter(m.adapter);
        try {
          if (auto p = st.prompts.find(m.session); m.session != 0 && p != st.prompts.end())
            add_prompts_at_positions(st.block->backend(), m.hidden, p->second, m.positions);
          st.block->forward(m.hidden, m.positions, cache, lora);
        } catch (const std::invalid_argument& e) {
          return make_error(errc::bad_request, e.what());
        } catch (const std::exception& e) {
          return make_error(errc::internal, "block " + std::to_string(st.block->index()) + ": " + e.what());
        }
        if (m.then.empty()) return std::move(m.hidden);
        caf::actor next = m.then.front();
        m.then.erase(m.then.begin());
        self->delegate(next, std::move(m));
        return caf::delegated<Tensor>{};
      },
      [=](block_train_msg& m) -> caf::result<block_train_result> {
        const BlockLora* lora = nullptr;
        if (!self->state.lora(m.adapter, lora)) return unknown_adapter(m.adapter);
        return block_train_step(self, *self->state.block, lora, m);
      },
  };
}

}  // namespace

caf::actor spawn_block_actor(caf::actor_system& sys, std::shared_ptr<Block> block, bool detached,
                             std::shared_ptr<const adapter_set> adapters) {
  if (!detached) return sys.spawn(block_actor, std::move(block), std::move(adapters));
  return sys.spawn<caf::detached>(block_actor, std::move(block), std::move(adapters));
}

}  // namespace corolla
