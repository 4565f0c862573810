#include "actors/server/node_supervisor.hpp"

#include <caf/all.hpp>

#include "actors/protocol/atoms.hpp"
#include "actors/protocol/messages.hpp"

namespace corolla {
namespace {

struct supervisor_state {
  server_parts parts;
  static inline const char* name = "server_node";
};

caf::behavior node_supervisor(caf::stateful_actor<supervisor_state>* self, server_parts parts) {
  self->state.parts = parts;
  if (parts.gate) self->link_to(parts.gate);
  if (parts.announcer) self->link_to(parts.announcer);
  if (parts.balancer) self->link_to(parts.balancer);
  if (parts.dht) self->link_to(parts.dht);
  if (parts.loader) self->link_to(parts.loader);
  return {
      [=](const info_request& req) {
        self->delegate(self->state.parts.gate, req);
        return caf::delegated<server_info>{};
      },
      [=](close_atom) -> caf::result<ack> {
        auto rp = self->make_response_promise<ack>();
        if (auto& b = self->state.parts.balancer) {  // unlinked: its exit must not stop the rest before "offline"
          self->unlink_from(b);
          self->send_exit(b, caf::exit_reason::user_shutdown);
          b = balancer_handle{};
        }
        auto stop = [=]() mutable {
          rp.deliver(ack{});
          self->quit(caf::exit_reason::user_shutdown);  // the links take the gate, blocks and DHT node down
        };
        if (!self->state.parts.announcer) {
          stop();
          return rp;
        }
        self->request(self->state.parts.announcer, std::chrono::seconds(5), close_atom::value)
            .then([=](const ack&) mutable { stop(); }, [=](caf::error&) mutable { stop(); });
        return rp;
      },
  };
}

}  // namespace

caf::actor spawn_node_supervisor(caf::actor_system& sys, server_parts parts) {
  return sys.spawn(node_supervisor, std::move(parts));
}

supervised_server start_server_parts(caf::actor_system& sys, const server_node& node, const server_setup& setup,
                                     std::shared_ptr<WeightSource> source, dht_node_actor dht, caf::actor connector,
                                     announcer_options announce, std::optional<balancer_options> balance) {
  supervised_server out;
  out.parts.gate = node.gate;
  out.parts.dht = dht;
  out.parts.announcer = spawn_announcer(sys, std::move(announce), node.gate, dht, std::move(connector));
  if (balance) {
    out.parts.loader = spawn_block_loader(sys, setup, std::move(source), node.backend);
    out.parts.balancer =
        spawn_balancer(sys, std::move(*balance), node.gate, dht, out.parts.announcer, out.parts.loader);
  }
  out.supervisor = spawn_node_supervisor(sys, out.parts);
  return out;
}

}  // namespace corolla
