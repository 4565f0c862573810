#include "actors/balance/balancer.hpp"

#include <caf/all.hpp>
#include <random>

#include "actors/balance/block_selection.hpp"
#include "actors/dht/read_swarm.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/protocol/messages.hpp"

namespace corolla {
namespace {

struct balancer_state {
  balancer_options opt;
  caf::actor gate, dht, announcer, loader;
  std::mt19937_64 rng;
  bool moving = false;
  static inline const char* name = "balancer";
};

using balancer_actor = caf::stateful_actor<balancer_state>;

void report(balancer_actor* self, const balancer_event& e) {
  if (self->state.opt.on_event) self->state.opt.on_event(e);
}

void fail(balancer_actor* self, caf::error e) {
  balancer_event ev;
  ev.kind = balancer_event::failed;
  ev.error = describe(e);
  report(self, ev);
  self->quit(std::move(e));
}

void schedule_check(balancer_actor* self) {
  const double mean = std::chrono::duration<double>(self->state.opt.mean_check_period).count();
  const double delay = std::uniform_real_distribution<double>(0, 2 * mean)(self->state.rng);
  self->delayed_send(self, std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(delay)),
                     balance_atom::value);
}

// Announces `state` and waits until it is stored, then calls next.
void announce(balancer_actor* self, const std::string& state, std::function<void()> next) {
  self->request(self->state.announcer, self->state.opt.request_timeout, state_atom::value, state)
      .then([=](const ack&) { next(); }, [=](caf::error& e) { fail(self, std::move(e)); });
}

// Moves the server to [first, first + num_blocks): offline (when it serves already), the gate to the new span,
// joining, load, install, online. Calls done with the new span once it is announced online.
void move_to(balancer_actor* self, int64_t first, int64_t last, bool serving, std::function<void()> done) {
  auto& st = self->state;
  st.moving = true;
  auto load = [=] {
    self->request(self->state.gate, self->state.opt.request_timeout, span_atom::value, first, last)
        .then(
            [=](const ack&) {
              announce(self, "online", [=] {  // "joining" under the new blocks while they load
                self->request(self->state.loader, caf::infinite, load_atom::value, first, last)
                    .then(
                        [=](std::vector<caf::actor>& blocks) {
                          self->request(self->state.gate, self->state.opt.request_timeout, blocks_atom::value,
                                        std::move(blocks))
                              .then(
                                  [=](const ack&) {
                                    announce(self, "online", [=] {
                                      self->state.moving = false;
                                      done();
                                    });
                                  },
                                  [=](caf::error& e) { fail(self, std::move(e)); });
                        },
                        [=](caf::error& e) { fail(self, std::move(e)); });
              });
            },
            [=](caf::error& e) { fail(self, std::move(e)); });
  };
  if (serving)
    announce(self, "offline", load);
  else
    load();
}

// The gate's info, then f(info).
void with_info(balancer_actor* self, std::function<void(server_info&)> f) {
  self->request(self->state.gate, self->state.opt.request_timeout, info_request{})
      .then([=](server_info& info) { f(info); }, [=](caf::error& e) { fail(self, std::move(e)); });
}

void place(balancer_actor* self) {
  with_info(self, [=](server_info& me) {
    const int64_t total = me.total_blocks, n = std::min(self->state.opt.num_blocks, me.total_blocks);
    const std::string address = me.address;
    read_swarm(self, self->state.dht, self->state.opt.model_prefix, total, self->state.opt.request_timeout,
               [=](std::vector<server_info> swarm) {
                 std::erase_if(swarm, [&](const server_info& s) { return s.address == address; });
                 const int64_t first = choose_first_block(block_throughputs(swarm, total), n);
                 move_to(self, first, first + n, false, [=] {
                   balancer_event ev;
                   ev.kind = balancer_event::placed;
                   ev.first = first;
                   ev.last = first + n;
                   report(self, ev);
                   schedule_check(self);
                 });
               });
  });
}

void check(balancer_actor* self) {
  if (self->state.moving) return;
  with_info(self, [=](server_info& me) {
    if (me.state != "online" || me.first_block >= me.last_block) return schedule_check(self);
    read_swarm(self, self->state.dht, self->state.opt.model_prefix, me.total_blocks,
               self->state.opt.request_timeout, [=](std::vector<server_info> swarm) {
                 // This server as it is now, whatever the DHT still holds about it.
                 std::erase_if(swarm, [&](const server_info& s) { return s.address == me.address; });
                 swarm.push_back(me);
                 balancer_event ev;
                 ev.kind = balancer_event::checked;
                 ev.check = check_rebalance(swarm, me.address, me.total_blocks, self->state.opt.balance_quality,
                                            self->state.rng);
                 ev.first = me.first_block;
                 ev.last = me.last_block;
                 report(self, ev);
                 if (!ev.check.move) return schedule_check(self);
                 const int64_t first = ev.check.new_first, last = first + (me.last_block - me.first_block);
                 move_to(self, first, last, true, [=] {
                   balancer_event moved = ev;
                   moved.kind = balancer_event::moved;
                   moved.first = first;
                   moved.last = last;
                   report(self, moved);
                   schedule_check(self);
                 });
               });
  });
}

caf::behavior balancer(balancer_actor* self, balancer_options opt, caf::actor gate, caf::actor dht,
                       caf::actor announcer, caf::actor loader) {
  auto& st = self->state;
  st.opt = std::move(opt);
  st.gate = std::move(gate);
  st.dht = std::move(dht);
  st.announcer = std::move(announcer);
  st.loader = std::move(loader);
  st.rng.seed(st.opt.seed);
  place(self);
  return {
      [=](balance_atom) { check(self); },
  };
}

}  // namespace

caf::actor spawn_balancer(caf::actor_system& sys, balancer_options options, caf::actor gate, caf::actor dht,
                          caf::actor announcer, caf::actor loader) {
  if (options.num_blocks < 1)
    throw std::invalid_argument("the balancer needs num_blocks >= 1, got " + std::to_string(options.num_blocks));
  if (!(options.balance_quality >= 0))
    throw std::invalid_argument("balance_quality must be >= 0, got " + std::to_string(options.balance_quality));
  return sys.spawn(balancer, std::move(options), std::move(gate), std::move(dht), std::move(announcer),
                   std::move(loader));
}

}  // namespace corolla
