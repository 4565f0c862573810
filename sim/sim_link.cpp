#include "sim/sim_link.hpp"

#include <caf/all.hpp>
#include <unordered_map>

#include "actors/protocol/errors.hpp"
#include "sim/sim_clock.hpp"
#include "sim/message_size.hpp"

namespace corolla::sim {
namespace {

using link_down_atom = caf::atom_constant<caf::atom("simlinkdn")>;

class sim_link final : public caf::monitorable_actor {
 public:
  sim_link(caf::actor_config& cfg, Network* net, sim_clock* clock, node_index from, node_index to,
           caf::strong_actor_ptr target, caf::strong_actor_ptr target_dht)
      : caf::monitorable_actor(cfg),
        net_(net),
        clock_(clock),
        from_(from),
        to_(to),
        target_(std::move(target)),
        target_dht_(std::move(target_dht)) {}

  using caf::monitorable_actor::enqueue;

  const char* name() const override { return "sim_link"; }
  node_index to() const { return to_; }
  const caf::strong_actor_ptr& target() const { return target_; }

  // The target ended. A link nobody monitors (the link back to a short-lived sender, such as a DHT lookup) goes
  // down at once: no one would see when, and what reaches it meanwhile would only find its target gone. A
  // watched one goes down one latency later, when the closed connection would be noticed.
  void target_ended(caf::actor_system& sys, caf::timespan latency, caf::error reason) {
    if (down_) return;
    if (!attachables_head_) {
      target_gone_ = true;
      return go_down(std::move(reason), nullptr);
    }
    bring_link_down(sys, caf::actor_cast<caf::strong_actor_ptr>(this), latency, std::move(reason));
  }

  void enqueue(caf::mailbox_element_ptr x, caf::execution_unit* ctx) override {
    if (!x) return;
    auto& content = x->content();
    if (!x->sender && x->mid.is_async() && content.size() == 2 && content.match_element<link_down_atom>(0) &&
        content.match_element<caf::error>(1)) {
      go_down(caf::error(content.get_as<caf::error>(1)), ctx);
      return;
    }
    auto& sys = home_system();
    if (down_) {
      if (target_gone_) {  // the connection is up: the message still crosses it, to find nobody there
        const message_weight w = weigh(content);
        net_->deliver(from_, to_, w.bytes, w.kind, sys.clock().now(), w.records);
      }
      return bounce(x);
    }
    const message_weight w = weigh(content);
    auto delay = net_->deliver(from_, to_, w.bytes, w.kind, sys.clock().now(), w.records);
    if (!delay) return;  // lost: a request times out at its sender
    // One connection carries a link's messages in order (CAF's guarantee between two actors, TCP's on the wire):
    // a message does not overtake the one before it, whatever their sizes or a latency spike's end.
    const auto arrives = std::max(sys.clock().now() + *delay, last_arrival_);
    last_arrival_ = arrives;
    if (x->mid.is_response() && clock_) clock_->drop_answered(target_, x->mid, arrives);
    caf::strong_actor_ptr sender = x->mid.is_response() ? std::move(x->sender) : reverse_of(x->sender);
    auto msg = caf::make_mailbox_element(std::move(sender), x->mid, std::move(x->stages), x->move_content_to_message());
    const bool to_dht = w.kind == traffic_kind::dht && target_dht_ && !x->mid.is_response();
    const caf::strong_actor_ptr& receiver = to_dht ? target_dht_ : target_;
    if (clock_ && x->mid.is_request() && x->sender)
      if (const auto requester = origin_of(x->sender).actor)
        clock_->note_crossing(requester->id(), x->mid.response_id(),
                              {caf::actor_cast<caf::weak_actor_ptr>(receiver), name_of(receiver), from_, to_,
                               net_->faults(), sys.clock().now()});
    sys.clock().schedule_message(arrives, receiver, std::move(msg));
  }

 private:
  static const char* name_of(const caf::strong_actor_ptr& actor) {
    auto* a = dynamic_cast<caf::monitorable_actor*>(actor->get());
    return a ? a->name() : "actor";
  }

  // The actor behind a sender, and its node: the sender itself on this link's node, or the target of the link it
  // is (a message relayed from another node; none when that link is down).
  struct origin {
    node_index node;
    caf::strong_actor_ptr actor;
  };
  origin origin_of(const caf::strong_actor_ptr& sender) const {
    if (auto* l = dynamic_cast<sim_link*>(caf::actor_cast<caf::abstract_actor*>(sender))) return {l->to(), l->target()};
    return {from_, sender};
  }

  // The link from the peer's node back to `sender` (on its own node), made once per sender.
  caf::strong_actor_ptr reverse_of(const caf::strong_actor_ptr& sender) {
    if (!sender) return nullptr;
    const auto [node, origin] = origin_of(sender);
    if (!origin) return sender;  // down: nothing behind it
    const auto key = origin->id();
    if (auto it = reverse_.find(key); it != reverse_.end()) return it->second;
    auto r = caf::actor_cast<caf::strong_actor_ptr>(
        spawn_link(home_system(), *net_, to_, node, caf::actor_cast<caf::actor>(origin)));
    as_link(r)->made_by_ = caf::actor_cast<caf::weak_actor_ptr>(this);
    reverse_[key] = r;
    return r;
  }

 private:
  void go_down(caf::error reason, caf::execution_unit* ctx) {
    if (down_) return;
    down_ = true;
    // A link back leaves the map of the link that made it, which would otherwise keep it (a whole actor) for as
    // long as that one lives: most links back lead to short-lived senders (a DHT lookup per query), and a
    // 1,000-server hour ended with half its heap in such dead links.
    // That map may hold the last reference to this link: it is released when this function returns, after
    // which the callers touch nothing of the link.
    caf::strong_actor_ptr last_ref;
    if (auto maker = made_by_.lock(); maker && target_) {
      auto& map = as_link(maker)->reverse_;
      if (auto it = map.find(target_->id()); it != map.end() && it->second.get() == ctrl()) {
        last_ref = std::move(it->second);
        map.erase(it);
      }
    }
    made_by_.reset();
    target_.reset();
    target_dht_.reset();
    reverse_.clear();
    cleanup(std::move(reason), ctx);
  }

  static sim_link* as_link(const caf::strong_actor_ptr& p) {
    return static_cast<sim_link*>(caf::actor_cast<caf::abstract_actor*>(p));
  }

  void bounce(caf::mailbox_element_ptr& x) {
    monitorable_actor::bounce(x,
                              make_error(errc::peer_unavailable, "the connection to " + net_->name(to_) + " is down"));
  }

  Network* net_;
  sim_clock* clock_;  // null under another clock (nothing is taken off it then)
  node_index from_, to_;
  caf::strong_actor_ptr target_;
  caf::strong_actor_ptr target_dht_;  // the DHT node behind a gate: DHT requests go straight to it
  bool down_ = false;
  bool target_gone_ = false;                     // down because its target ended, not because the connection broke
  caf::actor_clock::time_point last_arrival_{};  // of the last message sent over it
  // Held here: the peer keeps only the sender's address (a monitor, say); a link back lives while this one does,
  // or until it goes down.
  std::unordered_map<caf::actor_id, caf::strong_actor_ptr> reverse_;
  caf::weak_actor_ptr made_by_;  // for a link back: the link whose reverse_ holds it
};

}  // namespace

std::string link_origin(const Network& net, const caf::strong_actor_ptr& sender) {
  if (auto* l = dynamic_cast<sim_link*>(caf::actor_cast<caf::abstract_actor*>(sender))) return net.name(l->to());
  return {};
}

void bring_link_down(caf::actor_system& sys, const caf::strong_actor_ptr& link, caf::timespan delay,
                     caf::error reason) {
  if (!link) return;
  sys.clock().schedule_message(
      sys.clock().now() + delay, link,
      caf::make_mailbox_element(nullptr, caf::make_message_id(), {}, link_down_atom::value, std::move(reason)));
}

caf::actor spawn_link(caf::actor_system& sys, Network& net, node_index from, node_index to, caf::actor target,
                      dht_rpc_actor target_dht) {
  caf::actor_config cfg;
  auto* clock = dynamic_cast<sim_clock*>(&sys.clock());
  auto ptr = caf::make_actor<sim_link, caf::strong_actor_ptr>(sys.next_actor_id(), sys.node(), &sys, cfg, &net, clock,
                                                              from, to, caf::actor_cast<caf::strong_actor_ptr>(target),
                                                              caf::actor_cast<caf::strong_actor_ptr>(target_dht));
  net.add_link(from, to, caf::actor_cast<caf::weak_actor_ptr>(ptr));
  // The peer's death reaches this node one latency later, as a closed connection.
  const auto latency = timespan_of(net.latency_s(to, from));
  caf::weak_actor_ptr weak = caf::actor_cast<caf::weak_actor_ptr>(ptr);
  caf::actor_system* sysp = &sys;
  target->attach_functor([weak, latency, sysp](const caf::error& reason) {
    if (auto link = weak.lock())
      static_cast<sim_link*>(caf::actor_cast<caf::abstract_actor*>(link))
          ->target_ended(*sysp, latency, reason ? reason : make_error(errc::peer_unavailable, "the peer ended"));
  });
  return caf::actor_cast<caf::actor>(ptr);
}

}  // namespace corolla::sim
