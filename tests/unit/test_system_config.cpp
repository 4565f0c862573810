// The composition root (actors/system/system_config.hpp): the scheduler follows the machine unless
// COROLLA_SCHEDULER_THREADS says otherwise, and the config carries the peer gateway's settings.
#define BOOST_TEST_MODULE system_config
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <thread>

#include "actors/system/system_config.hpp"

using namespace corolla;

namespace {

// Sets COROLLA_SCHEDULER_THREADS for the scope (unset with nullptr).
struct ThreadsVariable {
  explicit ThreadsVariable(const char* value) {
    if (value)
      setenv("COROLLA_SCHEDULER_THREADS", value, 1);
    else
      unsetenv("COROLLA_SCHEDULER_THREADS");
  }
  ~ThreadsVariable() { unsetenv("COROLLA_SCHEDULER_THREADS"); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(the_scheduler_follows_the_machine_unless_told) {
  const size_t machine = std::max<size_t>(2, std::thread::hardware_concurrency());
  {
    ThreadsVariable unset(nullptr);
    BOOST_TEST(scheduler_threads() == machine);
  }
  {
    ThreadsVariable three("3");
    BOOST_TEST(scheduler_threads() == 3u);
    corolla_config cfg;
    BOOST_TEST(caf::get_or(cfg, "scheduler.max-threads", size_t{0}) == 3u);
  }
  for (const char* bad : {"0", "-1", "2000", "4x", "many", ""}) {
    ThreadsVariable malformed(bad);
    BOOST_TEST(scheduler_threads() == machine, "COROLLA_SCHEDULER_THREADS=" << bad);
  }
}

BOOST_AUTO_TEST_CASE(the_config_carries_the_peer_gateways_settings) {
  corolla_config cfg;
  const auto* settings = dynamic_cast<const peer_gateway_settings*>(static_cast<const caf::actor_system_config*>(&cfg));
  BOOST_REQUIRE(settings != nullptr);
  BOOST_TEST(settings->tls == nullptr);  // plain TCP unless TLS is set
}
