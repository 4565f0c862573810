// The simulated network's delays (sim/network.hpp): latency plus bytes over the slower link, a sender's uplink
// shared by everything it sends, in the order it sends it, and a receiver's checks of signed records.
#define BOOST_TEST_MODULE sim_network
#include <boost/test/unit_test.hpp>

#include <chrono>

#include "actors/dht/dht_messages.hpp"
#include "sim/network.hpp"

using namespace corolla::sim;
using namespace std::chrono_literals;

namespace {

struct two_regions {
  Network net{[] {
                network_model m;
                m.regions = {{"eu"}, {"us"}};
                m.latencies = {{"eu", "us", 40}};
                m.local_ms = 2;
                m.bandwidth_mbps = 100;
                return m;
              }(),
              1};
  node_index server = net.add_node("server", "eu", 0);  // 100 Mbit/s: a MB takes 80 ms to leave
  node_index near = net.add_node("near", "eu", 0);
  node_index far = net.add_node("far", "us", 0);
  node_index slow = net.add_node("slow", "eu", 10);  // 10 Mbit/s
  caf::actor_clock::time_point t0 = caf::actor_clock::time_point{} + 1h;

  double delay_ms(node_index from, node_index to, uint64_t bytes, caf::actor_clock::time_point at) {
    auto d = net.deliver(from, to, bytes, traffic_kind::step, at);
    BOOST_REQUIRE(d);
    return std::chrono::duration<double, std::milli>(*d).count();
  }
};

constexpr uint64_t kMegabyte = 1'000'000;

}  // namespace

BOOST_FIXTURE_TEST_CASE(an_idle_link_costs_latency_and_bytes_over_the_slower_side, two_regions) {
  BOOST_TEST(delay_ms(server, near, kMegabyte, t0) == 2 + 80, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(delay_ms(near, far, kMegabyte, t0) == 40 + 80, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(delay_ms(far, slow, kMegabyte, t0) == 40 + 800, boost::test_tools::tolerance(1e-6));  // slow receiver
  BOOST_TEST(delay_ms(server, server, kMegabyte, t0) == 0);                                        // within one node
}

BOOST_FIXTURE_TEST_CASE(a_senders_messages_share_its_uplink_in_the_order_sent, two_regions) {
  // Three replies sent at once to three clients: each leaves after those before it.
  BOOST_TEST(delay_ms(server, near, kMegabyte, t0) == 2 + 80, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(delay_ms(server, far, kMegabyte, t0) == 80 + 40 + 80, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(delay_ms(server, near, kMegabyte, t0) == 160 + 2 + 80, boost::test_tools::tolerance(1e-6));
  // 100 ms later two of them are still leaving; by 240 ms the uplink is idle again.
  BOOST_TEST(delay_ms(server, near, 1000, t0 + 100ms) == 140 + 2 + 0.08, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(delay_ms(server, near, 1000, t0 + 300ms) == 2 + 0.08, boost::test_tools::tolerance(1e-6));
}

BOOST_FIXTURE_TEST_CASE(receivers_and_other_senders_do_not_wait, two_regions) {
  BOOST_TEST(delay_ms(server, near, kMegabyte, t0) == 2 + 80, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(delay_ms(far, near, kMegabyte, t0) == 40 + 80, boost::test_tools::tolerance(1e-6));    // another sender
  BOOST_TEST(delay_ms(near, server, kMegabyte, t0) == 2 + 80, boost::test_tools::tolerance(1e-6));  // the way back
}

BOOST_FIXTURE_TEST_CASE(lost_and_unreachable_messages_take_no_uplink_time, two_regions) {
  net.crash(far);
  BOOST_TEST(!net.deliver(server, far, kMegabyte, traffic_kind::step, t0));
  BOOST_TEST(delay_ms(server, near, kMegabyte, t0) == 2 + 80, boost::test_tools::tolerance(1e-6));
}

// Signed DHT records take effect once the receiver has checked the signatures new to it (43 µs each by default),
// one message's records after another's; records it has checked before cost nothing, nor do messages without any.
BOOST_FIXTURE_TEST_CASE(a_receiver_checks_the_signatures_of_records_new_to_it, two_regions) {
  auto record = [](int i) { return corolla::dht_item{"subkey", std::string(100, 'r') + std::to_string(i), 0}; };
  const std::vector<corolla::dht_item> three = {record(1), record(2), record(3)}, two = {record(3), record(4)};
  auto delay = [&](node_index from, const std::vector<corolla::dht_item>* records, caf::actor_clock::time_point at) {
    auto d = net.deliver(from, near, 1000, traffic_kind::dht, at, records);
    BOOST_REQUIRE(d);
    return std::chrono::duration<double, std::milli>(*d).count();
  };
  const double wire = 2 + 0.08;  // 1000 bytes from a node of the region
  BOOST_TEST(delay(server, &three, t0) == wire + 3 * 0.043, boost::test_tools::tolerance(1e-6));
  // The next message arrives 0.08 ms later, while the first's records are being checked: it waits for them, then
  // pays for its one new record.
  BOOST_TEST(delay(server, &two, t0) == wire + 3 * 0.043 + 0.043, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(delay(server, &three, t0 + 1s) == wire, boost::test_tools::tolerance(1e-6));  // all checked before
  BOOST_TEST(delay(server, nullptr, t0 + 2s) == wire, boost::test_tools::tolerance(1e-6));
  const traffic_counts t = net.traffic();
  BOOST_TEST(t.signature_checks == 4u);
  BOOST_TEST(t.signature_check_s == 4 * 43e-6, boost::test_tools::tolerance(1e-9));
}
