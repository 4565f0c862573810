#include "actors/net/pings.hpp"

#include <caf/all.hpp>

#include "actors/protocol/atoms.hpp"
#include "actors/protocol/messages.hpp"

namespace corolla {

void ping_peers(caf::event_based_actor* self, const caf::actor& connector, const std::vector<std::string>& addresses,
                std::shared_ptr<rtt_table> table, caf::timespan timeout, std::function<void()> done) {
  if (addresses.empty()) return done();
  auto pending = std::make_shared<size_t>(addresses.size());
  // Shared, not copied into every handler: `done` may carry a whole view of the swarm.
  auto finish = [pending, done = std::make_shared<std::function<void()>>(std::move(done))] {
    if (--*pending == 0) (*done)();
  };
  for (const auto& address : addresses) {
    auto forget = [=](caf::error&) {
      table->ms.erase(address);
      finish();
    };
    self->request(connector, timeout, resolve_atom::value, address)
        .then(
            [=](caf::actor peer) {
              const auto t0 = self->clock().now();
              self->request(peer, timeout, info_request{})
                  .then(
                      [=](const server_info&) {
                        table->add(address,
                                   std::chrono::duration<double, std::milli>(self->clock().now() - t0).count());
                        finish();
                      },
                      forget);
            },
            forget);
  }
}

}  // namespace corolla
