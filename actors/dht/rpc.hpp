// One DHT RPC: resolve the peer's address through the connector, send the request, and call on_reply with the
// reply or on_error with an error (unreachable, timed out, refused, or a malformed reply). Each of the two steps
// has `timeout`; nothing waits forever (a peer that dies does not fail requests in flight).
#pragma once

#include <caf/all.hpp>
#include <string>

#include "actors/dht/dht_messages.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"

namespace corolla {

template <class Reply, class Self, class Request, class OnReply, class OnError>
void dht_call(Self* self, const caf::actor& connector, const std::string& address, caf::timespan timeout,
              Request req, OnReply on_reply, OnError on_error) {
  self->request(connector, timeout, resolve_atom::value, address)
      .then(
          [=](caf::actor peer) mutable {
            self->request(peer, timeout, std::move(req))
                .then(
                    [=](Reply& r) mutable {
                      if (!r.wire_error.empty()) on_error(make_error(errc::bad_request, address + ": " + r.wire_error));
                      else on_reply(r);
                    },
                    [=](caf::error& e) mutable { on_error(std::move(e)); });
          },
          [=](caf::error& e) mutable { on_error(std::move(e)); });
}

}  // namespace corolla
