#include "actors/server/announcer.hpp"

#include <caf/all.hpp>

#include "actors/dht/announcer.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"

namespace corolla {
namespace {

struct announcer_state {
  announcer_options opt;
  caf::actor gate, dht;
  static inline const char* name = "announcer";
};

using announcer_actor = caf::stateful_actor<announcer_state>;

// Reads the gate's info, stamps the state, stores one record per block (plus the models list); calls done with
// the number of records stored.
void announce(announcer_actor* self, std::function<void(size_t)> done) {
  auto& st = self->state;
  self->request(st.gate, std::chrono::seconds(10), info_request{})
      .then(
          [=](server_info& info) {
            auto& st = self->state;
            info.state = st.opt.state;
            const DhtTime expiration = self->clock().now() + 2 * st.opt.period;
            std::vector<dht_put> puts;
            try {
              puts = announce_puts(st.opt.model_prefix, info, expiration);
            } catch (const std::exception&) {
              done(0);  // no address yet: the next round announces
              return;
            }
            puts.push_back(dht_put{kModelsKey, st.opt.model_prefix, std::to_string(info.total_blocks), expiration});
            auto pending = std::make_shared<size_t>(puts.size());
            auto stored = std::make_shared<size_t>(0);
            for (auto& put : puts)
              self->request(st.dht, std::chrono::seconds(30), std::move(put))
                  .then(
                      [=](const dht_put_reply&) {
                        ++*stored;
                        if (--*pending == 0) done(*stored);
                      },
                      [=](caf::error&) {
                        if (--*pending == 0) done(*stored);
                      });
          },
          [=](caf::error&) { done(0); });
}

caf::behavior announcer(announcer_actor* self, announcer_options opt, caf::actor gate, caf::actor dht) {
  self->state.opt = std::move(opt);
  self->state.gate = std::move(gate);
  self->state.dht = std::move(dht);
  self->send(self, refresh_atom::value);
  return {
      [=](refresh_atom) {
        announce(self, [](size_t) {});
        self->delayed_send(self, self->state.opt.period, refresh_atom::value);
      },
      [=](state_atom, const std::string& state) {
        self->state.opt.state = state;
        announce(self, [](size_t) {});
      },
      [=](close_atom) -> caf::result<ack> {
        self->state.opt.state = "offline";
        auto rp = self->make_response_promise<ack>();
        announce(self, [=](size_t) mutable {
          rp.deliver(ack{});
          self->quit();
        });
        return rp;
      },
  };
}

}  // namespace

caf::actor spawn_announcer(caf::actor_system& sys, announcer_options options, caf::actor gate, caf::actor dht) {
  return sys.spawn(announcer, std::move(options), std::move(gate), std::move(dht));
}

}  // namespace corolla
