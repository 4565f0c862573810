// Balancing across real processes: servers started with --num_blocks at the same time (so they may all take the
// same blocks first) spread out by themselves, and the swarm they settle into generates the golden tokens.
#define BOOST_TEST_MODULE balance_processes
#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>
#include <future>
#include <map>
#include <thread>

#include "actors/client/client_api.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/system/system_config.hpp"
#include "support/golden.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

using namespace corolla;
using namespace corolla::test;

namespace {

// A client of swarm `prefix` that knows only the bootstrap node.
struct swarm_reader {
  corolla_config cfg;
  // Declared before the actor system, so destroyed after it: its actors use this until they stop.
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  std::shared_ptr<const ClientHead> head =
      std::make_shared<const ClientHead>(*open_weights(model_dir("llama")), *backend);
  swarm_client_actor client;

  swarm_reader(const std::string& boot, const std::string& prefix) {
    swarm_client_options options;
    options.initial_peers = {boot};
    options.model_prefix = prefix;
    options.dht_id[0] = 7;
    client = spawn_swarm_client(sys, options, head);
  }
  ~swarm_reader() { self->send_exit(client, caf::exit_reason::user_shutdown); }

  // Polls the DHT view (every 300 ms, at most 30 s) until done(spans by address) holds; returns the last view.
  template <class Done>
  std::map<std::string, std::pair<int64_t, int64_t>> wait_for(Done done) {
    std::map<std::string, std::pair<int64_t, int64_t>> spans;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      self->request(client, std::chrono::seconds(30), refresh_atom::value)
          .receive(
              [&](std::vector<server_info>& v) {
                spans.clear();
                for (const auto& s : v) spans[s.address] = {s.first_block, s.last_block};
              },
              [&](caf::error& e) { BOOST_FAIL(describe(e)); });
      if (done(spans)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    return spans;
  }

  std::vector<int32_t> generate() {
    inference_session_actor session;
    self->request(client, caf::infinite, open_session_request{64, 1})
        .receive([&](inference_session_actor s) { session = s; },
                 [&](caf::error& e) { BOOST_FAIL("open: " << describe(e)); });
    generate_request req;
    req.prompt = Golden("llama").ids("input_ids");
    req.params.max_new_tokens = 32;
    req.params.stop_at_eos = false;
    std::vector<int32_t> out;
    self->request(session, caf::infinite, req)
        .receive([&](const generate_result& r) { out = r.tokens; }, [&](caf::error& e) { BOOST_FAIL(describe(e)); });
    self->send(session, close_atom::value);
    return out;
  }
};

using span = std::pair<int64_t, int64_t>;

std::vector<std::string> server_flags(const TempDir& dir, const std::string& boot, const std::string& name,
                                      std::vector<std::string> more) {
  std::vector<std::string> f{"--model",
                             model_dir("llama"),
                             "--port",
                             "0",
                             "--initial_peers",
                             boot,
                             "--data_dir",
                             dir.str() + "/" + name,
                             "--swarm_id",
                             "spread",
                             "--threads",
                             "1",
                             "--update_period",
                             "0.5",
                             "--throughput",
                             "10",
                             "--mean_balance_check_period",
                             "0.5"};
  f.insert(f.end(), more.begin(), more.end());
  return f;
}

}  // namespace

BOOST_AUTO_TEST_CASE(servers_started_together_with_num_blocks_spread_out) {
  TempDir dir;
  DhtProcess boot({"--port", "0", "--data_dir", dir.str() + "/boot"});
  // A fixed server for all 4 blocks, so that any of the others may move (a move never leaves a block without
  // another online server); then two servers of 2 blocks started at once.
  ServerProcess whole(server_flags(dir, boot.address(), "whole", {"--block_indices", "0:4"}));
  auto start = [&](const std::string& name) {
    return std::async(std::launch::async, [&, name] {
      return std::make_unique<ServerProcess>(server_flags(dir, boot.address(), name, {"--num_blocks", "2"}));
    });
  };
  auto fa = start("a"), fb = start("b");
  auto a = fa.get(), b = fb.get();
  swarm_reader r(boot.address(), "spread");
  auto settled = [&](std::map<std::string, span>& s) {
    return s.size() == 3 && s[a->address()] != s[b->address()] && s[whole.address()] == span{0, 4};
  };
  auto spans = r.wait_for(settled);
  BOOST_TEST_REQUIRE(settled(spans), "a: " << spans[a->address()].first << ":" << spans[a->address()].second << ", b: "
                                           << spans[b->address()].first << ":" << spans[b->address()].second);
  BOOST_TEST(r.generate() == Golden("llama").ids("greedy_ids"), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_server_moves_when_another_piles_onto_its_blocks) {
  TempDir dir;
  DhtProcess boot({"--port", "0", "--data_dir", dir.str() + "/boot"});
  ServerProcess whole(server_flags(dir, boot.address(), "whole", {"--block_indices", "0:4"}));
  // Blocks 0..3 are covered equally: the first window wins.
  ServerProcess mover(server_flags(dir, boot.address(), "mover", {"--num_blocks", "2"}));
  BOOST_TEST(mover.line().rfind("serving blocks 0:2 ", 0) == 0u, mover.line());
  // A fixed server joins on 0..1 too: blocks 0..1 at 30, 2..3 at 10. Moving to 2..3 makes every block 20.
  ServerProcess fixed(server_flags(dir, boot.address(), "fixed", {"--block_indices", "0:2"}));
  swarm_reader r(boot.address(), "spread");
  auto moved = [&](std::map<std::string, span>& s) { return s.size() == 3 && s[mover.address()] == span{2, 4}; };
  auto spans = r.wait_for(moved);
  BOOST_TEST_REQUIRE(moved(spans), "the server of 2 blocks serves " << spans[mover.address()].first << ":"
                                                                    << spans[mover.address()].second);
  BOOST_TEST(r.generate() == Golden("llama").ids("greedy_ids"), boost::test_tools::per_element());
}
