#include "actors/server/server_node.hpp"

#include <caf/all.hpp>
#include <chrono>
#include <filesystem>

#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/protocol/messages.hpp"
#include "actors/server/block_actor.hpp"
#include "actors/store/weights_cache.hpp"
#include "model/block.hpp"

namespace corolla {

server_node start_server_node(caf::actor_system& sys, const server_setup& setup, caf::actor connector,
                              std::shared_ptr<WeightSource> source, bool load_now) {
  if (!source) source = open_weights(setup.model);
  const ModelConfig& c = source->config();
  const bool chosen_later = setup.first_block == 0 && setup.last_block == 0;
  if (chosen_later && load_now) throw std::runtime_error("a server without a span cannot load its blocks now");
  if (!chosen_later)
    if (auto problem = c.span_problem(setup.first_block, setup.last_block)) throw std::runtime_error(*problem);
  server_node node;
  node.backend = setup.backend ? setup.backend : std::shared_ptr<Backend>(make_backend(setup.device, setup.threads));
  if (!node.backend->supports_kv(setup.kv_dtype))
    throw std::invalid_argument("kv_cache_dtype " + std::string(dtype_name(setup.kv_dtype)) + ": the " +
                                node.backend->name() + " backend keeps its KV caches in f32");
  gate_options& o = node.options;
  o.version = COROLLA_VERSION_STRING;
  o.model_name = std::filesystem::path(source->origin()).filename().string();
  o.public_name = setup.public_name;
  o.dtype = setup.dtype ? std::string(dtype_name(*setup.dtype)) : stored_dtype_name(*source);  // as stored
  o.device = setup.device;
  o.kv_dtype = dtype_name(setup.kv_dtype);
  o.first_block = setup.first_block;
  o.last_block = setup.last_block;
  o.total_blocks = c.num_layers;
  o.hidden_size = c.hidden_size;
  o.max_position = c.max_position;
  o.cache_tokens = setup.cache_tokens;
  for (int64_t i = 0; i < c.num_layers; ++i) o.attention_windows.push_back(c.attention_window(i));
  o.max_sessions = setup.max_sessions;
  o.max_batch_tokens = setup.max_batch_tokens;
  o.per_peer = setup.per_peer;
  o.faults = {setup.inject_step_errors_after, setup.inject_wrong_outputs};
  o.step_timeout = setup.step_timeout;
  o.session_timeout = setup.session_timeout;
  o.seed = setup.seed;
  o.identity = setup.identity;
  o.streams = setup.streams;
  for (const auto& dir : setup.adapters) o.adapters.push_back(adapter_name(dir));
  o.throughput = setup.throughput.throughput;
  o.inference_rps = setup.throughput.inference_rps;
  o.forward_rps = setup.throughput.forward_rps;
  o.network_rps = setup.throughput.network_rps;
  node.gate = spawn_span_gate(sys, o, node.backend, std::move(connector), setup.dht);
  if (load_now) load_server_blocks(sys, node, setup, *source);
  return node;
}

std::vector<caf::actor> load_block_actors(caf::actor_system& sys, const server_setup& setup, const WeightSource& source,
                                          const std::shared_ptr<Backend>& backend, int64_t first, int64_t last) {
  // The cache pays only where loading converts (measured: docs/PERFORMANCE.md, "Weights cache"); serving the
  // stored dtype uses the mapped file in place.
  const std::string first_weight = block_tensor_name(first, "mlp.up_proj.weight");
  const bool converts = setup.dtype && source.has(first_weight) && source.meta(first_weight).dtype != *setup.dtype;
  NodeStore* store = converts ? setup.store : nullptr;
  const std::string digest = store ? model_digest(source) : std::string();
  // The LoRA adapters' pairs for these blocks, shared by their actors.
  auto adapters = std::make_shared<adapter_set>();
  for (const auto& dir : setup.adapters) {
    auto adapter = LoraAdapter::load(dir, source.config(), first, last, *backend);
    (*adapters)[adapter->name()] = std::move(adapter);
  }
  std::vector<caf::actor> out;
  try {
    for (int64_t i = first; i < last; ++i) {
      std::shared_ptr<Block> block = store ? load_block_cached(store, digest, source, i, *backend, {setup.dtype})
                                           : load_block(source, i, *backend, {setup.dtype});
      out.push_back(caf::actor_cast<caf::actor>(spawn_block_actor(sys, std::move(block), backend, setup.cache_tokens,
                                                                  setup.kv_dtype, setup.detached, adapters)));
      if (setup.progress) setup.progress(i, i - first + 1, last - first);
    }
  } catch (...) {
    for (auto& a : out) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    throw;
  }
  return out;
}

caf::actor spawn_block_loader(caf::actor_system& sys, server_setup setup, std::shared_ptr<WeightSource> source,
                              std::shared_ptr<Backend> backend) {
  auto loader = [setup, source, backend](caf::event_based_actor* self) -> caf::behavior {
    return {
        [=](load_atom, int64_t first, int64_t last) -> caf::result<std::vector<caf::actor>> {
          if (auto problem = source->config().span_problem(first, last)) return make_error(errc::bad_request, *problem);
          try {
            const auto from = setup.fetch_span ? setup.fetch_span(first, last) : source;
            return load_block_actors(self->home_system(), setup, *from, backend, first, last);
          } catch (const std::exception& e) {
            return make_error(errc::internal,
                              "loading blocks " + std::to_string(first) + ":" + std::to_string(last) + ": " + e.what());
          }
        },
    };
  };
  if (!setup.detached) return sys.spawn(loader);
  return sys.spawn<caf::detached>(loader);
}

void load_server_blocks(caf::actor_system& sys, server_node& node, const server_setup& setup,
                        const WeightSource& source) {
  const auto t0 = std::chrono::steady_clock::now();
  node.blocks = load_block_actors(sys, setup, source, node.backend, setup.first_block, setup.last_block);
  caf::scoped_actor self{sys};
  caf::error failure;
  self->request(node.gate, caf::infinite, blocks_atom::value, node.blocks)
      .receive([](const ack&) {}, [&](caf::error& e) { failure = std::move(e); });
  if (failure) throw std::runtime_error("installing the blocks: " + caf::to_string(failure));
  node.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace corolla
