#include "actors/client/training_session.hpp"

#include <caf/all.hpp>
#include <cstring>
#include <map>
#include <set>

#include "actors/client/batch_spread.hpp"
#include "actors/client/server_output.hpp"
#include "actors/client/session_messages.hpp"
#include "actors/protocol/block_span.hpp"
#include "actors/trust/identity_proof.hpp"
#include "actors/protocol/errors.hpp"
#include "model/train/span_training.hpp"

namespace corolla {
namespace {

// Passes kept for a backward; older ones are dropped (a forward that never gets its backward).
constexpr size_t kKeptPasses = 4;

// One server of a sub-batch's route and what its first block receives (kept for the backward, and for a
// replacement server).
struct hop_run {
  planned_hop plan;
  Tensor input;  // host [b, S, D]
};

struct part_state {
  int64_t b0 = 0, b1 = 0;  // the batch rows of this sub-batch
  std::vector<int32_t> positions;
  Tensor prompts;  // [L, b, P, D], or undefined
  std::vector<hop_run> route;
  Tensor output;        // forward: the last block's output
  Tensor grad_prompts;  // backward: [L, b, P, D]
};

struct pass_state {
  Shape shape;         // [B, S, D]
  Shape prompt_shape;  // [L, B, P, D] when prompts were sent
  bool prompts = false;
  int64_t unverified = 0;  // checks of its forward (then of its backward) that nobody could recompute
  std::vector<part_state> parts;
};
using pass_ptr = std::shared_ptr<pass_state>;

// A request in flight to a server, failed by hand when the server's connection dies (CAF would only time it out).
struct pending_call {
  std::shared_ptr<bool> settled;
  std::function<void(caf::error)> fail;
};

struct session_state {
  training_session_options opt;
  caf::actor connector;
  swarm_client_internal client;
  std::vector<server_info> servers;
  // Servers that failed a request of this session, by key (peer_id): a record that names another server's address
  // fails its identity proof, and must not take that server out of the session's routes with it.
  std::set<std::string> excluded;
  std::set<std::string> banned;  // servers the swarm client had banned when the session opened
  std::map<std::string, caf::actor> gates;
  std::map<caf::actor_addr, std::string> gate_names;
  std::map<std::string, std::vector<pending_call>> pending;
  std::map<uint64_t, pass_ptr> passes;
  uint64_t next_pass = 1;
  std::vector<std::string> last_routes;    // of the latest forward or backward, one line per sub-batch
  inbound_streams inbound;                 // large replies arriving in chunks
  uint64_t next_stream = 1;                // numbers the large requests sent in chunks
  std::set<std::string> checked;           // servers whose forwards this session has spot-checked
  std::set<std::string> checked_backward;  // servers whose backwards this session has spot-checked
  std::mt19937_64 rng;                     // which forwards and backwards are spot-checked (seeded from the options)
  static inline const char* name = "training_session";
};

using session_actor = training_session_internal::stateful_base<session_state>;
using tensor_cont = std::function<void(caf::expected<Tensor>)>;

// The servers a route may use: online, serving the adapter asked for.
std::vector<server_info> usable(const session_state& st) {
  std::vector<server_info> out;
  for (const auto& s : st.servers) {
    if (s.state != "online") continue;
    if (!st.opt.adapter.empty() && std::find(s.adapters.begin(), s.adapters.end(), st.opt.adapter) == s.adapters.end())
      continue;
    out.push_back(s);
  }
  return out;
}

// A route over [first, last) avoiding `avoid` when that is possible (to spread sub-batches), never using
// excluded servers.
route_plan plan(const session_state& st, int64_t first, int64_t last, const std::set<std::string>& avoid = {}) {
  const auto servers = usable(st);
  std::set<std::string> skip = st.excluded;
  skip.insert(avoid.begin(), avoid.end());
  route_plan p = plan_route(servers, first, last, skip);
  if (!p.ok() && !avoid.empty()) p = plan_route(servers, first, last, st.excluded);
  if (!p.ok() && !st.opt.adapter.empty()) p.error += " with adapter '" + st.opt.adapter + "'";
  return p;
}

bool replaceable(const caf::error& e) {
  // Our own bad input would fail on any server: report it instead of trying another.
  return !is(e, errc::bad_request);
}

// Sends `req` to the server at `address` (resolved once, then monitored). on_reply or on_error runs exactly once.
template <class Reply, class Request>
void ask_server(session_actor* self, const std::string& address, Request req, std::function<void(Reply&)> on_reply,
                std::function<void(caf::error)> on_error) {
  auto send = [=, req = std::move(req)](caf::actor gate) mutable {
    auto settled = std::make_shared<bool>(false);
    auto& calls = self->state.pending[address];
    calls.erase(std::remove_if(calls.begin(), calls.end(), [](const pending_call& c) { return *c.settled; }),
                calls.end());
    calls.push_back({settled, on_error});
    auto& st = self->state;
    // Large requests stream first; the request itself follows once its chunks are in (or fails with them).
    stream_out(self, gate, std::move(req), st.opt.streams, st.next_stream, [=](caf::expected<Request> out) {
      if (*settled) return;
      if (!out) {
        *settled = true;
        auto e = std::move(out.error());
        if (e == caf::sec::request_timeout) e = make_error(errc::timeout, "server " + address + " timed out");
        return on_error(std::move(e));
      }
      self->request(gate, self->state.opt.request_timeout, std::move(*out))
          .then(
              [=](Reply& r) {
                if (*settled) return;
                *settled = true;
                // A garbled reply is the server's (or the network's) failure, not ours.
                if (!r.wire_error.empty())
                  return on_error(
                      make_error(errc::peer_unavailable, "garbled reply from " + address + ": " + r.wire_error));
                if (auto problem = stream_in(self->state.inbound, gate.address(), r); !problem.empty())
                  return on_error(make_error(errc::peer_unavailable, "broken reply from " + address + ": " + problem));
                on_reply(r);
              },
              [=](caf::error& e) {
                if (*settled) return;
                *settled = true;
                if (e == caf::sec::request_timeout) e = make_error(errc::timeout, "server " + address + " timed out");
                on_error(std::move(e));
              });
    });
  };
  if (auto it = self->state.gates.find(address); it != self->state.gates.end()) return send(it->second);
  self->request(self->state.connector, self->state.opt.request_timeout, resolve_atom::value, address)
      .then(
          [=](caf::actor gate) mutable {
            auto& st = self->state;
            if (!st.gates.count(address)) {
              st.gates[address] = gate;
              st.gate_names[gate.address()] = address;
              self->monitor(gate);
            }
            send(st.gates[address]);
          },
          [=](caf::error& e) {
            on_error(make_error(errc::peer_unavailable, "server " + address + " is unreachable: " + describe(e)));
          });
}

Tensor prompt_slice(const part_state& part, const planned_hop& hop) {
  return has_prompts(part.prompts) ? part.prompts.slice_rows(hop.first, hop.last) : Tensor{};
}

// Leaves out the server of hop k of part j and re-plans its blocks over the others (with a fresh view of the swarm
// when the client can give one); cont(error, number of hops that replace it).
void replace_hop(session_actor* self, pass_ptr p, size_t j, size_t k, caf::error cause,
                 std::function<void(caf::error, size_t)> cont) {
  auto& st = self->state;
  const planned_hop failed = p->parts[j].route[k].plan;
  st.excluded.insert(peer_id(failed));
  if (st.client) self->send(st.client, failure_report(peer_id(failed), cause));
  auto splice = [=](caf::expected<std::vector<planned_hop>> hops) {
    if (!hops)
      return cont(make_error(errc::no_route, "server " + failed.address + " failed (" + describe(cause) +
                                                 ") and no other can take over: " + describe(hops.error())),
                  0);
    auto& route = p->parts[j].route;
    Tensor input = route[k].input;
    route.erase(route.begin() + static_cast<std::ptrdiff_t>(k));
    std::vector<hop_run> fresh;
    for (auto& h : *hops) fresh.push_back({h, {}});
    fresh.front().input = input;
    route.insert(route.begin() + static_cast<std::ptrdiff_t>(k), fresh.begin(), fresh.end());
    cont(caf::error{}, fresh.size());
  };
  if (!st.client) {
    route_plan again = plan(st, failed.first, failed.last);
    if (!again.ok()) return splice(make_error(errc::no_route, again.error));
    return splice(std::move(again.hops));
  }
  // The swarm client plans over its current view of the swarm, skipping the servers it bans.
  self->request(st.client, st.opt.request_timeout,
                replan_request{failed.first, failed.last, 0, st.excluded, st.opt.adapter, false})
      .then([=](std::vector<planned_hop>& hops) { splice(std::move(hops)); },
            [=](caf::error& e) { splice(std::move(e)); });
}

// Sends part j's `input` through the blocks of `hop` as one stateless forward. on_output gets the output once the
// reply proves the key the server's record names and is well formed; on_failure gets anything else (an error, a
// failed proof, a malformed output), all of them the server's failures but the client's own bad request.
void forward_once(session_actor* self, pass_ptr p, size_t j, const planned_hop& hop, Tensor input,
                  std::function<void(Tensor)> on_output, std::function<void(caf::error)> on_failure) {
  const part_state& part = p->parts[j];
  const std::string challenge = make_challenge();
  const Shape shape = input.shape();
  forward_request req{
      std::move(input), part.positions, prompt_slice(part, hop), hop.first, hop.last, self->state.opt.adapter, 0, {},
      challenge};
  ask_server<forward_reply>(
      self, hop.address, std::move(req),
      [=](forward_reply& r) {
        // A server routed to by its DHT record must hold the key that signed it (as when a session opens).
        if (!answered_by(hop.owner, challenge, r.owner, r.proof))
          return on_failure(make_error(errc::peer_unavailable,
                                       "the server at " + hop.address + " does not hold the key its DHT record names"));
        if (auto e = malformed_output(r.hidden, shape, hop.address, "hidden states")) return on_failure(std::move(e));
        on_output(std::move(r.hidden));
      },
      on_failure);
}

// Sends `input` forward through verifier hops [i, end) of `r->chain`; done gets the last one's output, or the first
// failure.
void forward_chain(session_actor* self, pass_ptr p, size_t j, std::shared_ptr<recomputation> r, size_t i, Tensor input,
                   recomputation_done done) {
  if (i == r->chain.size()) {
    r->hidden = std::move(input);
    return done(std::move(*r));
  }
  forward_once(
      self, p, j, r->chain[i], std::move(input),
      [=](Tensor out) { forward_chain(self, p, j, r, i + 1, std::move(out), done); },
      [=](caf::error e) { done(std::move(e)); });
}

// Checks hop k of part j by decide_check's rule: `run` does the hop's work again on a chain of other servers of its
// blocks (planned here, into r->chain), `differs` compares its result with the hop's. A verifier that a second one
// outvotes is left out of the session and reported.
void check_hop(session_actor* self, pass_ptr p, size_t j, size_t k,
               std::function<void(std::shared_ptr<recomputation> r, recomputation_done)> run,
               std::function<std::string(const recomputation&)> differs, std::function<void(check_result)> done) {
  const planned_hop checked = p->parts[j].route[k].plan;
  std::set<std::string> avoid = self->state.excluded;
  avoid.insert(self->state.banned.begin(), self->state.banned.end());
  avoid.insert(peer_id(checked));
  decide_check(
      std::move(avoid),
      [=](std::set<std::string> a, recomputation_done d) {
        route_plan verifiers = plan_route(usable(self->state), checked.first, checked.last, a);
        if (!verifiers.ok()) return d(make_error(errc::no_route, verifiers.error));
        auto r = std::make_shared<recomputation>();
        r->chain = std::move(verifiers.hops);
        run(r, d);
      },
      std::move(differs),
      [=](const planned_hop& v) {
        auto e = make_error(errc::wrong_output, "a spot check it answered disagreed with two servers");
        self->state.excluded.insert(peer_id(v));
        if (self->state.client) self->send(self->state.client, failure_report(peer_id(v), e));
      },
      std::move(done));
}

// Checks hop k of part j, whose forward output is `claimed`: its input recomputed on other servers of its blocks.
void check_forward(session_actor* self, pass_ptr p, size_t j, size_t k, Tensor claimed,
                   std::function<void(check_result)> done) {
  const planned_hop checked = p->parts[j].route[k].plan;
  const Tensor input = p->parts[j].route[k].input;
  check_hop(
      self, p, j, k,
      [=](std::shared_ptr<recomputation> r, recomputation_done d) { forward_chain(self, p, j, r, 0, input, d); },
      [=](const recomputation& r) { return compare_outputs(claimed, r.hidden, tolerance_for(checked, r.chain)); },
      std::move(done));
}

// Whether work of `hop` is checked: at random (1 / every), and always on a server not in `checked` yet (the servers
// whose forwards, or backwards, this session has checked).
bool wants_check(session_actor* self, const planned_hop& hop, const std::set<std::string>& checked) {
  auto& st = self->state;
  return !hops_to_check(st.opt.spot_checks, {checked.count(peer_id(hop)) == 0}, st.rng).empty();
}

// Runs hops [k, end) of part j forward, each from its kept input, keeping the input of the next; cont gets the
// output of hop end - 1. A failing server is replaced and the forward resumes from its input.
void forward_hops(session_actor* self, pass_ptr p, size_t j, size_t k, size_t end, tensor_cont cont) {
  const hop_run& hop = p->parts[j].route[k];
  const planned_hop plan = hop.plan;
  // The server of hop k failed (or lied about its key, or sent a malformed output): the forward resumes from its
  // input on the servers that replace it.
  auto replace = [=](caf::error e) {
    replace_hop(self, p, j, k, std::move(e), [=](caf::error re, size_t n) {
      if (re) return cont(std::move(re));
      forward_hops(self, p, j, k, end + n - 1, cont);
    });
  };
  auto accept = [=](Tensor out) {
    auto& route = p->parts[j].route;
    if (k + 1 < route.size()) route[k + 1].input = out;
    if (k + 1 == end) return cont(std::move(out));
    forward_hops(self, p, j, k + 1, end, cont);
  };
  forward_once(
      self, p, j, plan, hop.input,
      [=](Tensor claimed) {
        if (!wants_check(self, plan, self->state.checked)) return accept(std::move(claimed));
        check_forward(self, p, j, k, claimed, [=](check_result c) {
          if (c.verdict == check_result::lied)
            return replace(make_error(errc::wrong_output, "server " + plan.address + " (blocks " +
                                                              block_span(plan.first, plan.last) + "): " + c.why));
          if (c.verdict == check_result::unverified) ++p->unverified;
          // Checked, or nobody to check it on now: the new-server rule has had its turn (as for inference steps).
          // The swarm client is not told: an honest forward says nothing of the server's inference steps, whose
          // first checks the client's sessions still owe it (a server may lie in one kind of work only).
          self->state.checked.insert(peer_id(plan));
          accept(claimed);
        });
      },
      [=](caf::error e) {
        if (!replaceable(e)) return cont(std::move(e));
        replace(std::move(e));
      });
}

// A backward's results: the gradient of the input and, when the part has prompts, of the hop's prompts.
using backward_done = std::function<void(Tensor grad_input, Tensor grad_prompts)>;

// Sends part j's backward of `grad` (the gradient of the output of `hop`'s blocks for `input`) to hop's server.
// on_output gets the gradients once they are well formed (f32, the shapes of the input and of the hop's prompts);
// on_failure gets anything else, all of them the server's failures but the client's own bad request.
void backward_once(session_actor* self, pass_ptr p, size_t j, const planned_hop& hop, Tensor input, Tensor grad,
                   backward_done on_output, std::function<void(caf::error)> on_failure) {
  const part_state& part = p->parts[j];
  const Tensor prompts = prompt_slice(part, hop);
  const Shape shape = input.shape();
  const bool with_prompts = prompts.defined();
  const Shape prompt_shape = with_prompts ? prompts.shape() : Shape{};
  backward_request req{
      std::move(input), std::move(grad), part.positions, prompts, hop.first, hop.last, self->state.opt.adapter, 0, {}};
  ask_server<backward_reply>(
      self, hop.address, std::move(req),
      [=](backward_reply& r) {
        if (auto e = malformed_output(r.grad_input, shape, hop.address, "an input gradient"))
          return on_failure(std::move(e));
        if (with_prompts)
          if (auto e = malformed_output(r.grad_prompts, prompt_shape, hop.address, "prompt gradients"))
            return on_failure(std::move(e));
        on_output(std::move(r.grad_input), with_prompts ? std::move(r.grad_prompts) : Tensor{});
      },
      on_failure);
}

// The backward of verifier hops [0, i] of `r->chain` from `grad` (the gradient of hop i's output), hop h's input
// being inputs[h]; each hop's prompt gradients go to their rows of r->grad_prompts, whose first row is block
// `first`. done gets the gradient of hop 0's input in r->hidden, or the first failure.
void backward_chain(session_actor* self, pass_ptr p, size_t j, std::shared_ptr<recomputation> r,
                    std::shared_ptr<std::vector<Tensor>> inputs, size_t i, int64_t first, Tensor grad,
                    recomputation_done done) {
  const planned_hop hop = r->chain[i];
  backward_once(
      self, p, j, hop, (*inputs)[i], std::move(grad),
      [=](Tensor grad_input, Tensor grad_prompts) {
        if (grad_prompts.defined()) {
          Tensor dst = r->grad_prompts.slice_rows(hop.first - first, hop.last - first);
          std::memcpy(dst.data(), grad_prompts.data(), static_cast<size_t>(dst.nbytes()));
        }
        if (i > 0) return backward_chain(self, p, j, r, inputs, i - 1, first, std::move(grad_input), done);
        r->hidden = std::move(grad_input);
        done(std::move(*r));
      },
      [=](caf::error e) { done(std::move(e)); });
}

// Runs verifier hops [i, n - 1) of r->chain forward from (*inputs)[i], keeping each one's input, then the chain's
// backward from its last hop (backward_chain).
void recompute_backward(session_actor* self, pass_ptr p, size_t j, std::shared_ptr<recomputation> r,
                        std::shared_ptr<std::vector<Tensor>> inputs, size_t i, int64_t first, Tensor grad,
                        recomputation_done done) {
  if (i + 1 == r->chain.size()) return backward_chain(self, p, j, r, inputs, i, first, std::move(grad), done);
  forward_once(
      self, p, j, r->chain[i], (*inputs)[i],
      [=](Tensor out) {
        inputs->push_back(std::move(out));
        recompute_backward(self, p, j, r, inputs, i + 1, first, grad, done);
      },
      [=](caf::error e) { done(std::move(e)); });
}

// Checks the backward of hop k of part j, whose claimed gradients are `grad_input` and `grad_prompts` for `grad`:
// recomputed on other servers of its blocks from the hop's kept input (a chain of several runs its forward first,
// for each hop's input), as check_forward checks a forward.
void check_backward(session_actor* self, pass_ptr p, size_t j, size_t k, Tensor grad, Tensor grad_input,
                    Tensor grad_prompts, std::function<void(check_result)> done) {
  const planned_hop checked = p->parts[j].route[k].plan;
  const Tensor input = p->parts[j].route[k].input;
  check_hop(
      self, p, j, k,
      [=](std::shared_ptr<recomputation> r, recomputation_done d) {
        if (grad_prompts.defined()) r->grad_prompts = Tensor::empty(DType::f32, grad_prompts.shape());
        auto inputs = std::make_shared<std::vector<Tensor>>(std::vector<Tensor>{input});
        recompute_backward(self, p, j, r, inputs, 0, checked.first, grad, d);
      },
      [=](const recomputation& r) {
        const double tolerance = tolerance_for(checked, r.chain);
        std::string diff = compare_outputs(grad_input, r.hidden, tolerance);
        if (diff.empty() && grad_prompts.defined()) diff = compare_outputs(grad_prompts, r.grad_prompts, tolerance);
        return diff;
      },
      std::move(done));
}

// Runs hops k, k - 1, ..., 0 of part j backward from `grad` (the gradient of hop k's output); cont gets the
// gradient of the part's input. A failing server is replaced; its replacements recompute their forward from the
// kept input first.
void backward_hops(session_actor* self, pass_ptr p, size_t j, size_t k, Tensor grad, tensor_cont cont) {
  const hop_run& hop = p->parts[j].route[k];
  const planned_hop plan = hop.plan;
  // The server of hop k failed, sent malformed gradients or wrong ones: its replacements recompute their forward
  // from the kept input first (one replacement needs none: the backward request carries the input).
  auto replace = [=](caf::error e) {
    replace_hop(self, p, j, k, std::move(e), [=](caf::error re, size_t n) {
      if (re) return cont(std::move(re));
      if (n == 1) return backward_hops(self, p, j, k, grad, cont);
      forward_hops(self, p, j, k, k + n - 1, [=](caf::expected<Tensor> out) {
        if (!out) return cont(out.error());
        backward_hops(self, p, j, k + n - 1, grad, cont);
      });
    });
  };
  auto accept = [=](Tensor grad_input, Tensor grad_prompts) {
    if (grad_prompts.defined()) {
      Tensor dst = p->parts[j].grad_prompts.slice_rows(plan.first, plan.last);
      std::memcpy(dst.data(), grad_prompts.data(), static_cast<size_t>(dst.nbytes()));
    }
    if (k == 0) return cont(std::move(grad_input));
    backward_hops(self, p, j, k - 1, std::move(grad_input), cont);
  };
  backward_once(
      self, p, j, plan, hop.input, grad,
      [=](Tensor grad_input, Tensor grad_prompts) {
        // (A server's backwards are checked on their own: it may compute forwards honestly and lie in gradients.)
        if (!wants_check(self, plan, self->state.checked_backward))
          return accept(std::move(grad_input), std::move(grad_prompts));
        check_backward(self, p, j, k, grad, grad_input, grad_prompts, [=](check_result c) {
          if (c.verdict == check_result::lied)
            return replace(make_error(errc::wrong_output, "server " + plan.address + " (blocks " +
                                                              block_span(plan.first, plan.last) +
                                                              "), a backward: " + c.why));
          if (c.verdict == check_result::unverified) ++p->unverified;
          self->state.checked_backward.insert(peer_id(plan));
          accept(grad_input, grad_prompts);
        });
      },
      [=](caf::error e) {
        if (!replaceable(e)) return cont(std::move(e));
        replace(std::move(e));
      });
}

// Rows [b0, b1) of prompts [L, B, P, D] as a tensor of their own [L, b, P, D].
Tensor prompt_rows(const Tensor& prompts, int64_t b0, int64_t b1) {
  const int64_t l = prompts.dim(0), b = prompts.dim(1), row = prompts.dim(2) * prompts.dim(3);
  Tensor out = Tensor::empty(DType::f32, {l, b1 - b0, prompts.dim(2), prompts.dim(3)});
  for (int64_t i = 0; i < l; ++i)
    std::memcpy(out.data_as<float>() + i * (b1 - b0) * row, prompts.data_as<const float>() + (i * b + b0) * row,
                static_cast<size_t>((b1 - b0) * row) * 4);
  return out;
}

// Joins the parts' tensors (each [.., b, ...] along the batch dimension `batch_dim` 0 or 1) into one.
Tensor join_parts(const pass_state& p, const std::function<const Tensor&(const part_state&)>& get, Shape shape,
                  int batch_dim) {
  if (p.parts.size() == 1) return get(p.parts.front());
  Tensor out = Tensor::empty(DType::f32, shape);
  const int64_t outer = batch_dim == 0 ? 1 : shape[0], b = shape[batch_dim];
  const int64_t row = shape.numel() / outer / b;
  for (const auto& part : p.parts) {
    const Tensor& t = get(part);
    const int64_t n = part.b1 - part.b0;
    for (int64_t i = 0; i < outer; ++i)
      std::memcpy(out.data_as<float>() + (i * b + part.b0) * row, t.data_as<const float>() + i * n * row,
                  static_cast<size_t>(n * row) * 4);
  }
  return out;
}

std::vector<std::string> describe_routes(const pass_state& p) {
  std::vector<std::string> out;
  for (const auto& part : p.parts) {
    std::string line;
    for (const auto& h : part.route)
      line += (line.empty() ? "" : " ") + h.plan.address + " " + block_span(h.plan.first, h.plan.last);
    out.push_back(line);
  }
  return out;
}

// Calls each part's job concurrently; done(error) once all succeeded or at the first failure.
void for_each_part(pass_ptr p, std::function<void(size_t, std::function<void(caf::error)>)> job,
                   std::function<void(caf::error)> done) {
  auto left = std::make_shared<size_t>(p->parts.size());
  auto failed = std::make_shared<bool>(false);
  for (size_t j = 0; j < p->parts.size(); ++j)
    job(j, [=](caf::error e) {
      if (*failed) return;
      if (e) {
        *failed = true;
        return done(std::move(e));
      }
      if (--*left == 0) done(caf::error{});
    });
}

training_session_internal::behavior_type training_session(session_actor* self, caf::actor connector,
                                                          swarm_client_internal client,
                                                          std::vector<server_info> servers,
                                                          std::set<std::string> banned, training_session_options opt) {
  auto& st = self->state;
  st.opt = std::move(opt);
  st.connector = std::move(connector);
  st.client = std::move(client);
  st.servers = std::move(servers);
  st.banned = std::move(banned);
  st.inbound = inbound_streams(st.opt.streams);
  st.rng.seed(st.opt.seed);
  self->set_down_handler([=](caf::down_msg& m) {
    auto& st = self->state;
    auto name = st.gate_names.find(m.source);
    if (name == st.gate_names.end()) return;
    const std::string address = name->second;
    st.gate_names.erase(name);
    st.gates.erase(address);
    auto calls = std::move(st.pending[address]);
    st.pending.erase(address);
    for (auto& c : calls)
      if (!*c.settled) {
        *c.settled = true;
        c.fail(make_error(errc::peer_unavailable, "server " + address + " went away"));
      }
  });
  return {
      [=](blocks_forward& req) -> caf::result<blocks_forward_result> {
        auto& st = self->state;
        const Tensor& h = req.hidden;
        if (h.dtype() != DType::f32 || h.rank() != 3 || h.dim(0) < 1 || h.dim(1) < 1)
          return make_error(errc::bad_request, "hidden states must be f32[batch, tokens, hidden], got " + h.describe());
        if (static_cast<int64_t>(req.positions.size()) != h.dim(0) * h.dim(1))
          return make_error(errc::bad_request, std::to_string(req.positions.size()) + " positions for " +
                                                   std::to_string(h.dim(0) * h.dim(1)) + " tokens");
        if (auto problem = check_prompts(req.prompts, h, st.opt.num_blocks); !problem.empty())
          return make_error(errc::bad_request, problem);
        auto p = std::make_shared<pass_state>();
        p->shape = h.shape();
        p->prompts = has_prompts(req.prompts);
        if (p->prompts) p->prompt_shape = req.prompts.shape();
        // Sub-batches of at most max_batch_tokens tokens, each on the chain where it would finish earliest given
        // the others (in proportion to the servers' forward rates), avoiding the servers the client bans while
        // others cover the blocks.
        batch_plan spread;
        try {
          const int64_t max_rows = std::max<int64_t>(1, st.opt.max_batch_tokens / h.dim(1));
          std::set<std::string> avoid = st.excluded;
          avoid.insert(st.banned.begin(), st.banned.end());
          spread = spread_batch(usable(st), 0, st.opt.num_blocks, h.dim(0), h.dim(1), max_rows, avoid);
          if (!spread.ok())
            spread = spread_batch(usable(st), 0, st.opt.num_blocks, h.dim(0), h.dim(1), max_rows, st.excluded);
        } catch (const std::invalid_argument& e) {
          return make_error(errc::bad_request, e.what());
        }
        if (!spread.ok())
          return make_error(
              errc::no_route,
              spread.error + (st.opt.adapter.empty() ? std::string() : " with adapter '" + st.opt.adapter + "'"));
        for (const auto& planned : spread.parts) {
          part_state part;
          part.b0 = planned.begin;
          part.b1 = planned.end;
          part.positions.assign(req.positions.begin() + part.b0 * h.dim(1), req.positions.begin() + part.b1 * h.dim(1));
          if (p->prompts)
            part.prompts =
                part.b0 == 0 && part.b1 == h.dim(0) ? req.prompts : prompt_rows(req.prompts, part.b0, part.b1);
          for (const auto& hop : planned.hops) part.route.push_back({hop, {}});
          part.route.front().input = h.slice_rows(part.b0, part.b1);
          p->parts.push_back(std::move(part));
        }
        auto rp = self->make_response_promise<blocks_forward_result>();
        for_each_part(
            p,
            [=](size_t j, std::function<void(caf::error)> part_done) {
              forward_hops(self, p, j, 0, p->parts[j].route.size(), [=](caf::expected<Tensor> out) {
                if (!out) return part_done(out.error());
                p->parts[j].output = std::move(*out);
                part_done(caf::error{});
              });
            },
            [=](caf::error e) mutable {
              if (e) {
                rp.deliver(std::move(e));
                return;
              }
              auto& st = self->state;
              st.last_routes = describe_routes(*p);
              const uint64_t pass = st.next_pass++;
              st.passes[pass] = p;
              while (st.passes.size() > kKeptPasses) st.passes.erase(st.passes.begin());
              rp.deliver(blocks_forward_result{
                  join_parts(
                      *p, [](const part_state& s) -> const Tensor& { return s.output; }, p->shape, 0),
                  pass, p->unverified});
            });
        return rp;
      },
      [=](blocks_backward& req) -> caf::result<blocks_backward_result> {
        auto& st = self->state;
        auto it = st.passes.find(req.pass);
        if (it == st.passes.end())
          return make_error(errc::bad_request, "no forward pass " + std::to_string(req.pass) + " to back up");
        pass_ptr p = it->second;
        if (req.grad_output.dtype() != DType::f32 || req.grad_output.shape() != p->shape)
          return make_error(errc::bad_request, "the output gradient " + req.grad_output.describe() +
                                                   " does not match the forward's " + p->shape.str());
        st.passes.erase(it);
        p->unverified = 0;
        auto rp = self->make_response_promise<blocks_backward_result>();
        const Tensor grad = req.grad_output;
        for_each_part(
            p,
            [=](size_t j, std::function<void(caf::error)> part_done) {
              part_state& part = p->parts[j];
              if (p->prompts) part.grad_prompts = Tensor::empty(DType::f32, part.prompts.shape());
              backward_hops(self, p, j, part.route.size() - 1, grad.slice_rows(part.b0, part.b1),
                            [=](caf::expected<Tensor> g) {
                              if (!g) return part_done(g.error());
                              p->parts[j].output = std::move(*g);  // now the input gradient
                              part_done(caf::error{});
                            });
            },
            [=](caf::error e) mutable {
              if (e) {
                rp.deliver(std::move(e));
                return;
              }
              self->state.last_routes = describe_routes(*p);
              blocks_backward_result out;
              out.grad_input = join_parts(
                  *p, [](const part_state& s) -> const Tensor& { return s.output; }, p->shape, 0);
              if (p->prompts)
                out.grad_prompts = join_parts(
                    *p, [](const part_state& s) -> const Tensor& { return s.grad_prompts; }, p->prompt_shape, 1);
              out.unverified = p->unverified;
              rp.deliver(std::move(out));
            });
        return rp;
      },
      // The servers of the latest forward's or backward's routes, one line per sub-batch.
      [=](route_atom) -> std::vector<std::string> { return self->state.last_routes; },
      // Chunks of large replies (actors/protocol/wire_stream.hpp); the reply naming them follows.
      [=](const wire_chunk& chunk) { return receive_chunk(self, self->state.inbound, chunk); },
      [=](stream_sweep_atom) { sweep_streams(self, self->state.inbound); },
  };
}

}  // namespace

caf::expected<training_session_actor> open_training_session(
    caf::actor_system& sys, caf::actor connector, swarm_client_internal client, std::vector<server_info> servers,
    std::set<std::string> banned, const open_training_request& req, caf::timespan request_timeout, int64_t num_blocks,
    stream_limits streams, spot_check_options spot_checks, uint64_t seed) {
  if (req.max_batch_tokens < 1)
    return make_error(errc::bad_request,
                      "max_batch_tokens must be positive, got " + std::to_string(req.max_batch_tokens));
  training_session_options opt{request_timeout, req.adapter, req.max_batch_tokens, num_blocks, streams,
                               spot_checks,     seed};
  session_state probe;
  probe.opt = opt;
  probe.servers = servers;
  if (servers.empty()) return make_error(errc::no_route, "no server answered");
  if (route_plan r = plan(probe, 0, num_blocks); !r.ok()) return make_error(errc::no_route, r.error);
  return spawn_training_session(sys, std::move(connector), std::move(client), std::move(servers), std::move(banned),
                                std::move(opt));
}

training_session_internal spawn_training_session(caf::actor_system& sys, caf::actor connector,
                                                 swarm_client_internal client, std::vector<server_info> servers,
                                                 std::set<std::string> banned, training_session_options options) {
  return sys.spawn(training_session, std::move(connector), std::move(client), std::move(servers), std::move(banned),
                   std::move(options));
}

}  // namespace corolla
