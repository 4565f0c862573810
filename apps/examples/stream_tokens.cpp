// A client scripted through Corolla's CAF actor API: join a swarm through the DHT, open an inference session,
// generate greedily and print each token id as the swarm produces it.
//
//   stream_tokens MODEL_DIR_OR_GGUF HOST:PORT[,HOST:PORT...] ID[,ID...] [MAX_NEW_TOKENS]
//
// HOST:PORT: any server or DHT node of the swarm (only one is needed).
//
// MODEL is the client's own copy of the model: only its embeddings, final norm and LM head are read.
#include <caf/all.hpp>
#include <iostream>
#include <random>
#include <sstream>

#include "actors/client/client_api.hpp"
#include "actors/dht/announcer.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/system/system_config.hpp"

using namespace corolla;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

// Receives (token_atom, id) from the session as soon as each token is chosen; (done_atom, n) is answered once
// n tokens are printed (tokens and the session's final reply travel separately).
struct printer_state {
  size_t printed = 0, expected = SIZE_MAX;
  caf::response_promise when_done;
};

caf::behavior printer(caf::stateful_actor<printer_state>* self) {
  auto finish_if_done = [=] {
    if (self->state.printed >= self->state.expected && self->state.when_done.pending()) {
      std::cout << std::endl;
      self->state.when_done.deliver(done_atom::value);
    }
  };
  return {
      [=](token_atom, int32_t id) {
        std::cout << id << " " << std::flush;
        ++self->state.printed;
        finish_if_done();
      },
      [=](done_atom, size_t n) {
        self->state.expected = n;
        self->state.when_done = self->make_response_promise();
        finish_if_done();
        return self->state.when_done;
      },
  };
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: stream_tokens MODEL HOST:PORT[,...] ID[,ID...] [MAX_NEW_TOKENS]\n";
    return 2;
  }
  auto backend = make_cpu_backend(1);
  auto head = std::make_shared<const ClientHead>(*open_weights(argv[1]), *backend);
  std::vector<int32_t> prompt;
  for (const auto& id : split(argv[3])) prompt.push_back(std::stoi(id));

  corolla_config cfg;  // the middleman, Corolla's message types and error category
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  swarm_client_options options;
  options.initial_peers = split(argv[2]);                               // any servers or DHT nodes of the swarm
  options.model_prefix = default_model_prefix(*open_weights(argv[1]));  // the swarm's DHT keys
  std::random_device rd;
  for (auto& byte : options.dht_id) byte = static_cast<uint8_t>(rd());
  auto client = spawn_swarm_client(sys, options, head);
  auto out = sys.spawn(printer);

  int rc = 0;
  self->request(client, caf::infinite, open_session_request{256, 1})
      .receive(
          [&](inference_session_actor session) {
            generate_request req{prompt, {}, out};
            req.params.max_new_tokens = argc > 4 ? std::stoi(argv[4]) : 16;
            req.params.stop_at_eos = false;
            self->request(session, caf::infinite, req)
                .receive(
                    [&](const generate_result& r) {
                      self->request(out, caf::infinite, done_atom::value, r.tokens.size())
                          .receive([](done_atom) {}, [](caf::error&) {});
                      std::cerr << r.tokens.size() << " tokens in " << r.seconds << " s\n";
                    },
                    [&](caf::error& e) { std::cerr << "generate: " << describe(e) << "\n", rc = 1; });
            self->send(session, close_atom::value);
          },
          [&](caf::error& e) { std::cerr << "open session: " << describe(e) << "\n", rc = 1; });
  self->send_exit(out, caf::exit_reason::user_shutdown);
  self->send_exit(client, caf::exit_reason::user_shutdown);
  return rc;
}
