// A server's gate behind a proxy actor that passes every message on and changes some replies before they go back:
// a hostile or broken server for the client under test. Register the proxy at the server's address in the
// connector (register_atom) and stop it when the test ends.
//
//   caf::behavior liar(caf::event_based_actor* self, caf::actor real) {
//     pass_on_the_rest(self, real);
//     return {tamper<step_request, step_reply>(self, real, [](step_reply& r) { ... })};
//   }
#pragma once

#include <caf/all.hpp>
#include <functional>

namespace corolla::test {

// Every message the proxy has no handler for goes on to `real`, whose reply goes back to the sender.
inline void pass_on_the_rest(caf::event_based_actor* self, caf::actor real) {
  self->set_default_handler([=](caf::scheduled_actor*, caf::message_view& x) -> caf::result<caf::message> {
    auto rp = self->make_response_promise();
    rp.delegate(real, x.move_content_to_message());
    return rp;
  });
}

// A handler that passes a Request on to `real` and changes its Reply before it goes back (errors go back as they are).
template <class Request, class Reply>
auto tamper(caf::event_based_actor* self, caf::actor real, std::function<void(Reply&)> change) {
  return [=](Request& req) -> caf::result<Reply> {
    auto rp = self->make_response_promise<Reply>();
    self->request(real, caf::infinite, std::move(req))
        .then(
            [=](Reply& r) mutable {
              change(r);
              rp.deliver(std::move(r));
            },
            [=](caf::error& e) mutable { rp.deliver(std::move(e)); });
    return rp;
  };
}

}  // namespace corolla::test
