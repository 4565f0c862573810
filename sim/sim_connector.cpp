#include "sim/sim_connector.hpp"

#include <caf/all.hpp>
#include <functional>
#include <map>
#include <unordered_map>

#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "sim/sim_link.hpp"

namespace corolla::sim {
namespace {

using connect_done_atom = caf::atom_constant<caf::atom("simconnect")>;

// Like a link, an actor that is not scheduled: it answers each request as it is enqueued (a resolve of a known
// peer is one message, the reply, instead of a request and a reply through a mailbox), and what must wait a round
// trip or a timeout it schedules on the actor clock. Every DHT RPC resolves its peer first, so this is on the
// simulator's hottest path.
class sim_connector final : public caf::monitorable_actor {
 public:
  sim_connector(caf::actor_config& cfg, Network* net, node_index node)
      : caf::monitorable_actor(cfg), net_(net), node_(node) {}

  using caf::monitorable_actor::enqueue;

  const char* name() const override { return "sim_connector"; }

  void enqueue(caf::mailbox_element_ptr x, caf::execution_unit* ctx) override {
    if (!x) return;
    auto& content = x->content();
    if (content.match_elements<register_atom, std::string, caf::actor>()) {
      net_->publish(content.get_as<std::string>(1), node_, content.get_as<caf::actor>(2));
      return;
    }
    if (content.match_elements<connect_done_atom, uint64_t>()) {
      auto it = waits_.find(content.get_as<uint64_t>(1));
      if (it == waits_.end()) return;
      auto fn = std::move(it->second);
      waits_.erase(it);
      fn(ctx);
      return;
    }
    if (content.match_elements<resolve_atom, std::string>()) {
      answer_resolve(std::move(x), ctx);
      return;
    }
    if (content.match_elements<relay_atom, std::string, caf::message>()) {
      relay(std::move(x), ctx);
      return;
    }
    if (x->mid.is_request())
      reply(*x, caf::make_message(make_error(errc::bad_request, "unexpected message " + caf::to_string(content))), ctx);
  }

 private:
  // What a resolve comes to: the peer's actor (a link, or the actor itself on this node), or why not.
  using resolved = std::function<void(caf::expected<caf::actor>, caf::execution_unit*)>;

  // Resolves an address with no link yet: the actor itself on this node at once, else a new link after the
  // connection's round trip (or the refusal or timeout). Callers look in `links_` first.
  void connect(const std::string& address, caf::execution_unit* ctx, resolved done) {
    const auto peer = net_->lookup(address);
    if (!peer) return done(unreachable("cannot connect to " + address + ": nobody listens there"), ctx);
    if (peer->node == node_) return done(peer->actor, ctx);
    const double rtt = 2 * net_->latency_s(node_, peer->node);
    if (!net_->reachable(node_, peer->node)) {
      const bool refused = net_->crashed(peer->node);
      const double wait = refused ? rtt : net_->connection_timeout_s();
      return after(timespan_of(wait), [=](caf::execution_unit* c) {
        done(unreachable("cannot connect to " + address + ": " + (refused ? "connection refused" : "no answer")), c);
      });
    }
    after(timespan_of(rtt), [=, this](caf::execution_unit* c) {                            // the connection's handshake
      if (auto it = links_.find(address); it != links_.end()) return done(it->second, c);  // connected meanwhile
      auto now = net_->lookup(address);
      if (!now || !net_->reachable(node_, now->node))
        return done(unreachable("cannot connect to " + address + ": no answer"), c);
      caf::actor link = spawn_link(home_system(), *net_, node_, now->node, now->actor, now->dht);
      links_[address] = link;
      // A link that goes down leaves the table, so that the next resolve connects again.
      auto weak = caf::actor_cast<caf::weak_actor_ptr>(this);
      link->attach_functor([weak, address, addr = link.address()](const caf::error&) {
        if (auto me = weak.lock())
          static_cast<sim_connector*>(caf::actor_cast<caf::abstract_actor*>(me))->forget(address, addr);
      });
      done(link, c);
    });
  }

  // (resolve_atom, address): answered with the actor, or the error.
  void answer_resolve(caf::mailbox_element_ptr x, caf::execution_unit* ctx) {
    const std::string address = x->content().get_as<std::string>(1);
    if (auto it = links_.find(address); it != links_.end()) return reply(*x, caf::make_message(it->second), ctx);
    auto request = std::make_shared<caf::mailbox_element_ptr>(std::move(x));
    connect(address, ctx, [=, this](caf::expected<caf::actor> peer, caf::execution_unit* c) {
      reply(**request, peer ? caf::make_message(std::move(*peer)) : caf::make_message(std::move(peer.error())), c);
    });
  }

  // (relay_atom, address, message): the message goes to the peer as the sender's own request (its reply goes
  // straight back), or the sender gets the resolve's error.
  void relay(caf::mailbox_element_ptr x, caf::execution_unit* ctx) {
    const std::string address = x->content().get_as<std::string>(1);
    if (auto it = links_.find(address); it != links_.end()) return hand_over(*x, it->second, ctx);
    auto request = std::make_shared<caf::mailbox_element_ptr>(std::move(x));
    connect(address, ctx, [=, this](caf::expected<caf::actor> peer, caf::execution_unit* c) {
      if (!peer) return reply(**request, caf::make_message(std::move(peer.error())), c);
      hand_over(**request, *peer, c);
    });
  }

  void hand_over(caf::mailbox_element& x, const caf::actor& peer, caf::execution_unit* ctx) {
    caf::message payload = x.content().get_as<caf::message>(2);
    caf::actor_cast<caf::strong_actor_ptr>(peer)->enqueue(
        caf::make_mailbox_element(std::move(x.sender), x.mid, std::move(x.stages), std::move(payload)), ctx);
  }

  void forget(const std::string& address, const caf::actor_addr& link) {
    auto it = links_.find(address);
    if (it != links_.end() && it->second.address() == link) links_.erase(it);
  }

  static caf::error unreachable(std::string what) { return make_error(errc::peer_unavailable, std::move(what)); }

  // Answers the request `x` with `msg` (as a response promise does: to the next stage of a forwarding chain, else
  // to the requester).
  void reply(caf::mailbox_element& x, caf::message msg, caf::execution_unit* ctx) {
    if (!x.mid.is_request()) return;
    if (!x.stages.empty()) {
      auto next = std::move(x.stages.back());
      x.stages.pop_back();
      next->enqueue(caf::make_mailbox_element(std::move(x.sender), x.mid, std::move(x.stages), std::move(msg)), ctx);
      return;
    }
    if (x.sender) x.sender->enqueue(caf::strong_actor_ptr{ctrl()}, x.mid.response_id(), std::move(msg), ctx);
  }

  void after(caf::timespan delay, std::function<void(caf::execution_unit*)> fn) {
    const uint64_t id = next_wait_++;
    waits_[id] = std::move(fn);
    auto& clock = home_system().clock();
    clock.schedule_message(
        clock.now() + delay, caf::strong_actor_ptr{ctrl()},
        caf::make_mailbox_element(nullptr, caf::make_message_id(), {}, connect_done_atom::value, id));
  }

  Network* net_;
  node_index node_;
  std::unordered_map<std::string, caf::actor> links_;  // live links by address (never iterated: hashed)
  uint64_t next_wait_ = 1;
  std::map<uint64_t, std::function<void(caf::execution_unit*)>> waits_;
};

}  // namespace

caf::actor spawn_sim_connector(caf::actor_system& sys, Network& net, node_index node) {
  caf::actor_config cfg;
  return caf::actor_cast<caf::actor>(
      caf::make_actor<sim_connector, caf::strong_actor_ptr>(sys.next_actor_id(), sys.node(), &sys, cfg, &net, node));
}

}  // namespace corolla::sim
