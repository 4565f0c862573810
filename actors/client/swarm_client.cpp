// The swarm client: knows the servers (from the DHT, or by asking the initial peers for their info), plans
// routes and opens inference sessions over them, and keeps the servers' reputations: its sessions report how
// each request went, failures ban a server (with exponential backoff), and routes skip banned servers.
#include <caf/all.hpp>
#include <iostream>
#include <map>

#include "actors/client/head_batcher.hpp"
#include "actors/client/client_api.hpp"
#include "actors/client/inference_session.hpp"
#include "actors/client/reputation_book.hpp"
#include "actors/client/session_messages.hpp"
#include "actors/client/training_session.hpp"
#include "actors/dht/announcer.hpp"
#include "actors/dht/dht_node.hpp"
#include "actors/log/node_log.hpp"
#include "actors/dht/read_swarm.hpp"
#include "actors/net/connector.hpp"
#include "actors/net/pings.hpp"
#include "actors/protocol/errors.hpp"

namespace corolla {
namespace {

struct client_state {
  swarm_client_options opt;
  std::shared_ptr<const ClientHead> head;
  caf::actor head_batcher;  // the sessions' LM head, one product for the rows that come together
  caf::actor connector;
  dht_node_actor dht;  // client-mode DHT node, when joining through the DHT
  bool bootstrapped = false;
  std::string bootstrap_error;  // why joining the DHT failed last (a refused certificate, say), for no_route
  std::vector<server_info> servers;
  std::shared_ptr<rtt_table> rtts = std::make_shared<rtt_table>();  // smoothed round trips to servers (routing)
  std::unique_ptr<ReputationBook> book;
  // Servers that answered too_busy (a quota of ours there), until when (now_ms) they are left out of routes. Not
  // failures: a busy server keeps its reputation.
  std::map<std::string, int64_t> busy_until;
  std::map<std::string, std::string> last_failure;  // per peer, since the client started (reputation_atom)
  uint64_t sessions_opened = 0;                     // numbers the sessions' seeds
  std::set<std::string> checked;  // servers a spot check of this client has covered (the others: on first use)
  // Wall-clock milliseconds at actor-clock zero, fixed at start: bans are stored as wall-clock times (they
  // outlive the process) but counted on the actor clock, so that they expire in virtual time in the simulator.
  int64_t epoch_offset_ms = 0;
  // The sessions opened, shared with the exit handler (which runs after the state is gone).
  std::shared_ptr<std::vector<caf::actor_addr>> sessions = std::make_shared<std::vector<caf::actor_addr>>();
  ~client_state() {
    try {
      if (book) book->flush();
    } catch (const std::exception&) {  // the store went away; nothing to save it to
    }
  }
  static inline const char* name = "swarm_client";
};

// How often learned reputations are written to the store (failures are written at once).
constexpr auto kReputationFlushPeriod = std::chrono::seconds(10);

// The store behind the reputation book, or none (in memory) when there is no data_dir or it cannot be opened
// (another client process holds it).
std::shared_ptr<NodeStore> open_reputation_store(const std::string& dir) {
  if (dir.empty()) return nullptr;
  try {
    return std::make_shared<NodeStore>(dir);
  } catch (const std::exception& e) {
    std::cerr << "warning: server reputations are kept in memory only: " << e.what() << "\n";
    return nullptr;
  }
}

// The client's whole interface: its users' and its sessions' (swarm_client_internal), and its own timer.
using swarm_client_impl = swarm_client_internal::extend<caf::reacts_to<sweep_atom>>;
using client_actor = swarm_client_impl::stateful_base<client_state>;

int64_t clock_ms(client_actor* self) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(self->clock().now().time_since_epoch()).count();
}
// Now, for the reputation book: wall-clock milliseconds advancing with the actor clock.
int64_t now_ms(client_actor* self) { return self->state.epoch_offset_ms + clock_ms(self); }

// The servers routes leave out while others cover their blocks: the banned, and the busy until their hint is up.
std::set<std::string> unwelcome_peers(client_actor* self) {
  const int64_t now = now_ms(self);
  auto out = self->state.book->banned_peers(now);
  auto& busy = self->state.busy_until;
  for (auto it = busy.begin(); it != busy.end();) {
    if (it->second <= now) {
      it = busy.erase(it);
    } else {
      out.insert(it->first);
      ++it;
    }
  }
  return out;
}

// A route over [first, last) that skips banned and busy servers and `avoid`, and charges the others their reputation
// penalty. When bans leave no route, earlier bans give way (a restarted server may be back); `avoid` (the
// servers that just failed this session) never does.
route_plan plan_avoiding(client_actor* self, const std::vector<server_info>& infos, int64_t first, int64_t last,
                         int64_t min_cache, const std::set<std::string>& avoid, bool strict = false) {
  auto excluded = unwelcome_peers(self);
  excluded.insert(avoid.begin(), avoid.end());
  const auto& rtt_ms = self->state.rtts->ms;
  const auto penalty = self->state.book->penalties();  // unreliable servers cost their expected failure time
  route_plan plan = plan_route(infos, first, last, excluded, min_cache, penalty, rtt_ms);
  if (!plan.ok() && !strict) {
    route_plan relaxed = plan_route(infos, first, last, avoid, min_cache, penalty, rtt_ms);
    if (relaxed.ok()) plan = std::move(relaxed);
  }
  for (auto& hop : plan.hops) hop.unchecked = !self->state.checked.count(peer_id(hop));
  return plan;
}

// The servers that hold a LoRA adapter (all of them for none).
std::vector<server_info> with_adapter(std::vector<server_info> infos, const std::string& adapter) {
  if (adapter.empty()) return infos;
  std::erase_if(infos, [&](const server_info& s) {
    return std::find(s.adapters.begin(), s.adapters.end(), adapter) == s.adapters.end();
  });
  return infos;
}

// " with adapter 'NAME'" when one is asked for: what a no_route message adds.
std::string adapter_note(const std::string& adapter) {
  return adapter.empty() ? std::string() : " with adapter '" + adapter + "'";
}

// A session's seed: the client's random DHT id and the session's number, so that the simulator (which draws the
// ids from its seed) replays it.
uint64_t session_seed(const std::array<uint8_t, 20>& dht_id, uint64_t n) {
  uint64_t h = 1469598103934665603ull ^ n;
  for (uint8_t b : dht_id) h = (h ^ b) * 1099511628211ull;
  return h;
}

// Remembers a session so that it ends with the client.
void track_session(client_actor* self, const caf::actor_addr& session) {
  auto& live = *self->state.sessions;
  live.erase(std::remove_if(live.begin(), live.end(),
                            [](const caf::actor_addr& a) { return !caf::actor_cast<caf::actor>(a); }),
             live.end());
  live.push_back(session);
}

// Asks every initial peer for its info; peers that do not answer are left out.
void poll_peers(client_actor* self, std::function<void(std::vector<server_info>)> done) {
  auto& st = self->state;
  auto infos = std::make_shared<std::vector<server_info>>();
  auto pending = std::make_shared<size_t>(st.opt.initial_peers.size());
  if (*pending == 0) return done({});
  auto one_done = [=] {
    if (--*pending == 0) done(*infos);
  };
  for (const auto& peer : st.opt.initial_peers)
    self->request(st.connector, st.opt.request_timeout, resolve_atom::value, peer)
        .then(
            [=](caf::actor gate) {
              self->request(gate, self->state.opt.request_timeout, info_request{})
                  .then(
                      [=](server_info& info) {
                        if (info.wire_error.empty() && server_info_problem(info).empty()) {
                          if (info.address.empty()) info.address = peer;
                          infos->push_back(std::move(info));
                        }
                        one_done();
                      },
                      [=](caf::error&) { one_done(); });
            },
            [=](caf::error&) { one_done(); });
}

// Reads the swarm's keys from the DHT (read_swarm.hpp); only online servers can take sessions.
void read_dht(client_actor* self, std::function<void(std::vector<server_info>)> done) {
  auto& st = self->state;
  read_swarm(self, st.dht, st.opt.model_prefix, st.head->config().num_layers, st.opt.request_timeout,
             [done](std::vector<server_info> all) {
               std::vector<server_info> online;
               for (auto& info : all)
                 if (info.state == "online") online.push_back(std::move(info));
               done(std::move(online));
             });
}

// The servers of the swarm, from the DHT (bootstrapping the client's node the first time) or the initial peers.
void refresh(client_actor* self, std::function<void(std::vector<server_info>)> done) {
  auto& st = self->state;
  auto keep = [=](std::vector<server_info> infos) {
    self->state.servers = infos;
    done(std::move(infos));
  };
  if (!st.dht) return poll_peers(self, keep);
  if (st.bootstrapped) return read_dht(self, keep);
  self->request(st.dht, st.opt.request_timeout, dht_bootstrap{st.opt.initial_peers})
      .then(
          [=](const dht_bootstrap_reply&) {
            self->state.bootstrapped = true;
            self->state.bootstrap_error.clear();
            read_dht(self, keep);
          },
          [=](caf::error& e) {
            self->state.bootstrap_error = describe(e);
            keep({});
          });
}

// The deep prompts of a session as [blocks, batch, P, hidden] (undefined: none), or what is wrong with them.
std::string session_prompts(const ModelConfig& c, const open_session_request& req, Tensor& out) {
  const Tensor& p = req.prompts;
  if (!p.defined() || p.numel() == 0) return {};
  const std::string want = "f32[" + std::to_string(c.num_layers) + ", prompt_len, " + std::to_string(c.hidden_size) +
                           "] or f32[" + std::to_string(c.num_layers) + ", " + std::to_string(req.batch) +
                           ", prompt_len, " + std::to_string(c.hidden_size) + "]";
  const bool three = p.rank() == 3, four = p.rank() == 4 && p.dim(1) == req.batch;
  if (p.dtype() != DType::f32 || (!(three && req.batch == 1) && !four) || p.dim(0) != c.num_layers ||
      p.dim(p.rank() - 1) != c.hidden_size)
    return "deep prompts must be " + want + " (one per block), got " + p.describe();
  const int64_t len = p.dim(p.rank() - 2);
  if (len > req.max_length)
    return "deep prompts of length " + std::to_string(len) + " exceed the session's max_length " +
           std::to_string(req.max_length);
  out = three ? p.reshaped({p.dim(0), 1, len, p.dim(2)}) : p;
  return {};
}

// How many times opening a session reads the swarm again when the first view has no route (DHT lookups that
// met a dead node, a record between expiry and republishing).
constexpr int kOpenAttempts = 3;

void open_on_view(client_actor* self, open_session_request req, caf::typed_response_promise<inference_session_actor> rp,
                  int attempt, std::vector<server_info> infos);

// Plans a route over the whole model from a fresh view of the swarm (the round trips to its servers measured
// first: routes take the least expected latency) and opens a session on it.
void open_session(client_actor* self, open_session_request req, caf::typed_response_promise<inference_session_actor> rp,
                  int attempt) {
  refresh(self, [=](std::vector<server_info> infos) mutable {
    auto& st = self->state;
    std::vector<std::string> addresses;
    for (const auto& s : infos) addresses.push_back(s.address);
    const auto ping_timeout = std::min<caf::timespan>(st.opt.request_timeout, std::chrono::seconds(2));
    ping_peers(self, st.connector, addresses, st.rtts, ping_timeout,
               [=]() mutable { open_on_view(self, req, rp, attempt, std::move(infos)); });
  });
}

void open_on_view(client_actor* self, open_session_request req, caf::typed_response_promise<inference_session_actor> rp,
                  int attempt, std::vector<server_info> infos) {
  auto& st = self->state;
  const int64_t blocks = st.head->config().num_layers;
  route_plan plan = plan_avoiding(self, with_adapter(infos, req.adapter), 0, blocks, req.max_length * req.batch, {});
  if (!plan.ok() && attempt + 1 < kOpenAttempts) return open_session(self, req, rp, attempt + 1);
  if (infos.empty()) {
    const std::string why = st.bootstrap_error.empty() ? "" : "; joining the DHT failed: " + st.bootstrap_error;
    rp.deliver(make_error(errc::no_route, st.dht ? "no server of swarm '" + st.opt.model_prefix +
                                                       "' is announced in the DHT (initial peers: " +
                                                       std::to_string(st.opt.initial_peers.size()) + why + ")"
                                                 : std::string("none of the initial peers answered")));
    return;
  }
  if (!plan.ok()) {
    rp.deliver(make_error(errc::no_route, plan.error + adapter_note(req.adapter)));
    return;
  }
  session_options so{st.opt.mode,
                     st.opt.request_timeout,
                     req.max_length,
                     req.batch,
                     st.opt.recovery_timeout,
                     req.adapter,
                     {},
                     st.opt.spot_checks,
                     st.opt.streams,
                     session_seed(st.opt.dht_id, ++st.sessions_opened)};
  session_prompts(st.head->config(), req, so.prompts);  // checked when the request came
  auto session = spawn_inference_session(self->home_system(), st.head, st.head_batcher, st.connector,
                                         caf::actor_cast<swarm_client_internal>(self), so, plan.hops);
  track_session(self, session.address());
  self->request(session, st.opt.request_timeout * 4, open_atom::value)
      .then([=](const ack&) mutable { rp.deliver(inference_session_actor{session}); },
            [=](caf::error& e) mutable {
              self->send_exit(session, caf::exit_reason::user_shutdown);
              rp.deliver(std::move(e));
            });
}

// Opens a training session over a fresh view of the swarm, reading it again when the first view has no route
// (as open_session does).
void open_training(client_actor* self, open_training_request req,
                   caf::typed_response_promise<training_session_actor> rp, int attempt) {
  refresh(self, [=](std::vector<server_info> infos) mutable {
    auto& st = self->state;
    auto session = open_training_session(
        self->home_system(), st.connector, caf::actor_cast<swarm_client_internal>(self), std::move(infos),
        unwelcome_peers(self), req, st.opt.request_timeout, st.head->config().num_layers, st.opt.streams,
        st.opt.spot_checks, session_seed(st.opt.dht_id, ++st.sessions_opened));
    if (!session && is(session.error(), errc::no_route) && attempt + 1 < kOpenAttempts)
      return open_training(self, req, rp, attempt + 1);
    if (!session) {
      rp.deliver(session.error());
      return;
    }
    track_session(self, session->address());
    rp.deliver(*session);
  });
}

swarm_client_impl::behavior_type swarm_client(client_actor* self, swarm_client_options opt,
                                              std::shared_ptr<const ClientHead> head, caf::actor connector) {
  auto& st = self->state;
  st.opt = std::move(opt);
  st.head = std::move(head);
  st.book = std::make_unique<ReputationBook>(st.opt.bans, open_reputation_store(st.opt.data_dir));
  st.epoch_offset_ms = ReputationBook::now_ms() - clock_ms(self);
  st.head_batcher = spawn_head_batcher(self->home_system(), st.head);
  // Sessions need their client (for replacement routes) and its head; they end with it.
  self->attach_functor([sessions = st.sessions, head_batcher = st.head_batcher](const caf::error&) {
    for (auto& s : *sessions)
      if (auto a = caf::actor_cast<caf::actor>(s)) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(head_batcher, caf::exit_reason::user_shutdown);
  });
  self->delayed_send(self, kReputationFlushPeriod, sweep_atom::value);
  if (connector) {
    st.connector = connector;
  } else {  // our own: it ends with us (pending connects would otherwise keep it alive until they time out)
    st.connector = spawn_connector(self->home_system());
    self->link_to(st.connector);
  }
  if (!st.opt.model_prefix.empty()) {
    dht_options dopt;
    dopt.id = st.opt.dht_id;
    dopt.client_mode = true;
    dopt.wall = st.opt.wall;
    dopt.rpc_timeout = std::chrono::seconds(5);
    st.dht = spawn_dht_node(self->home_system(), dopt, st.connector);
    self->link_to(st.dht);
  }
  return {
      [=](refresh_atom) -> caf::result<std::vector<server_info>> {
        auto rp = self->make_response_promise<std::vector<server_info>>();
        refresh(self, [=](std::vector<server_info> infos) mutable { rp.deliver(std::move(infos)); });
        return rp;
      },
      [=](const open_session_request& req) -> caf::result<inference_session_actor> {
        Tensor prompts;
        if (auto problem = session_prompts(self->state.head->config(), req, prompts); !problem.empty())
          return make_error(errc::bad_request, problem);
        auto rp = self->make_response_promise<inference_session_actor>();
        open_session(self, req, rp, 0);
        return rp;
      },
      // A replacement route: from the servers known already when they cover the blocks (a recovery should not
      // wait for DHT lookups, which may be querying the very node that died), then the view is refreshed.
      [=](const replan_request& req) -> caf::result<std::vector<planned_hop>> {
        auto& st = self->state;
        route_plan cached = plan_avoiding(self, with_adapter(st.servers, req.adapter), req.first, req.last,
                                          req.min_cache_tokens, req.avoid, req.strict);
        if (cached.ok() || req.strict) {  // a verifier is not worth a wait for the DHT
          refresh(self, [](std::vector<server_info>) {});
          if (!cached.ok()) return make_error(errc::no_route, cached.error + adapter_note(req.adapter));
          return std::move(cached.hops);
        }
        auto rp = self->make_response_promise<std::vector<planned_hop>>();
        refresh(self, [=](std::vector<server_info> infos) mutable {
          route_plan plan = plan_avoiding(self, with_adapter(std::move(infos), req.adapter), req.first, req.last,
                                          req.min_cache_tokens, req.avoid, req.strict);
          if (plan.ok())
            rp.deliver(std::move(plan.hops));
          else
            rp.deliver(make_error(errc::no_route, plan.error + adapter_note(req.adapter)));
        });
        return rp;
      },
      // Training: a session over the swarm's blocks (actors/client/training_session.hpp). It asks this client
      // for replacement routes (replan_request) and reports how each server did (peer_report).
      [=](const open_training_request& req) -> caf::result<training_session_actor> {
        auto rp = self->make_response_promise<training_session_actor>();
        open_training(self, req, rp, 0);
        return rp;
      },
      [=](const peer_report& r) {
        auto& book = *self->state.book;
        if (r.checked) {  // no latency sample: the check's success is not a request's
          self->state.checked.insert(r.peer);
          return;
        }
        if (r.ok)
          book.record_success(r.peer, r.latency_ms);
        else if (r.busy_ms > 0)
          self->state.busy_until[r.peer] = now_ms(self) + r.busy_ms;
        else {
          const auto ban = book.record_failure(r.peer, now_ms(self));
          log::warn(log::Part::client, [&] {
            return "server banned: " + r.peer + "; for " + std::to_string(ban.count()) + " ms; after " +
                   r.what.substr(0, 300);
          });
          auto& why = self->state.last_failure;
          if (why.size() < 4096 || why.count(r.peer)) why[r.peer] = r.what.substr(0, 500);
        }
      },
      [=](reputation_atom) -> std::vector<peer_standing> {
        auto& st = self->state;
        const int64_t now = now_ms(self);
        std::vector<peer_standing> out;
        for (const auto& [peer, r] : st.book->all()) {
          auto why = st.last_failure.find(peer);
          out.push_back({peer, r.successes, r.failures, r.banned_until_ms, r.banned_until_ms > now,
                         why == st.last_failure.end() ? std::string() : why->second});
        }
        return out;
      },
      [=](sweep_atom) {
        self->state.book->flush();
        self->delayed_send(self, kReputationFlushPeriod, sweep_atom::value);
      },
  };
}

}  // namespace

swarm_client_actor spawn_swarm_client(caf::actor_system& sys, swarm_client_options options,
                                      std::shared_ptr<const ClientHead> head, caf::actor connector) {
  return sys.spawn(swarm_client, std::move(options), std::move(head), std::move(connector));
}

}  // namespace corolla
