// One DHT RPC: the request relayed through the connector to the peer at `address` (resolving it on the way), then
// on_reply with the reply or on_error with an error (unreachable, timed out, refused, or a malformed reply), all
// within `timeout`; nothing waits forever (a peer that dies does not fail requests in flight).
#pragma once

#include <caf/all.hpp>
#include <string>

#include "actors/dht/dht_messages.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"

namespace corolla {

template <class Reply, class Self, class Request, class OnReply, class OnError>
void dht_call(Self* self, const caf::actor& connector, const std::string& address, caf::timespan timeout, Request req,
              OnReply on_reply, OnError on_error) {
  self->request(connector, timeout, relay_atom::value, address, caf::make_message(std::move(req)))
      .then(
          [=](Reply& r) mutable {
            if (!r.wire_error.empty())
              on_error(make_error(errc::bad_request, address + ": " + r.wire_error));
            else
              on_reply(r);
          },
          [=](caf::error& e) mutable { on_error(std::move(e)); });
}

}  // namespace corolla
