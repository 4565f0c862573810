// The BASP filter on frames CAF's own serializers write: what passes, what is dropped, what closes.
#define BOOST_TEST_MODULE basp_filter
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <set>

#include "actors/net/basp_filter.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/protocol/messages.hpp"
#include "actors/system/system_config.hpp"
#include "support/basp_frames.hpp"

using namespace corolla;
using namespace corolla::test;

namespace {

basp_node_id id_of(caf::actor_system& sys, const caf::node_id& n) {
  auto b = serialized(sys, n);
  basp_node_id id{};
  BOOST_REQUIRE_EQUAL(b.size(), id.size());
  std::memcpy(id.data(), b.data(), id.size());
  return id;
}

struct fixture {
  corolla_config cfg;
  caf::actor_system sys{cfg};
  caf::node_id self = fake_node(1), peer = fake_node(2), other = fake_node(3);
  std::set<basp_node_id> connected;

  BaspFilter make(basp_side side) {
    return BaspFilter(
        side, id_of(sys, self), basp_filter_limits{}, [this](const basp_node_id& n) { return connected.count(n) > 0; },
        [this](const basp_node_id& n) { return connected.insert(n).second; });
  }

  // Runs a whole frame through the filter.
  basp_verdict::kind_t judge(BaspFilter& f, const bytes& frame) {
    const auto* p = reinterpret_cast<const uint8_t*>(frame.data());
    auto h = f.on_header(p);
    if (h.verdict.kind != basp_verdict::pass || h.payload_bytes == 0) return h.verdict.kind;
    BOOST_REQUIRE_LE(kBaspHeaderSize + h.judge_bytes, frame.size());
    return f.on_payload(p + kBaspHeaderSize, h.judge_bytes).kind;
  }

  BaspFilter greeted() {
    auto f = make(basp_side::accepted);
    BOOST_REQUIRE_EQUAL(judge(f, client_handshake(sys, peer)), basp_verdict::pass);
    return f;
  }

  // A fresh connection from the same peer, as if the first had closed.
  BaspFilter greeted_again() {
    connected.clear();
    return greeted();
  }
};

constexpr auto passes = basp_verdict::pass;
constexpr auto dropped = basp_verdict::drop;
constexpr auto closes = basp_verdict::close;

}  // namespace

BOOST_FIXTURE_TEST_SUITE(basp_filter, fixture)

BOOST_AUTO_TEST_CASE(the_handshake_comes_first_and_names_another_node) {
  auto f = make(basp_side::accepted);
  BOOST_TEST(judge(f, direct_message(sys, 5, caf::make_message(ack{}))) == closes);
  auto g = make(basp_side::accepted);
  BOOST_TEST(judge(g, client_handshake(sys, self)) == closes);
  auto h = make(basp_side::accepted);
  BOOST_TEST(judge(h, server_handshake(sys, peer, 5)) == closes);  // only the connecting side gets one
  auto c = make(basp_side::connected);
  BOOST_TEST(judge(c, server_handshake(sys, peer, 5)) == passes);
  BOOST_TEST(judge(c, server_handshake(sys, peer, 5)) == closes);
  BOOST_TEST(c.peer().has_value());
}

BOOST_AUTO_TEST_CASE(a_second_handshake_must_name_the_same_node) {
  auto f = greeted();
  BOOST_TEST(judge(f, client_handshake(sys, peer, 0x02)) == passes);
  BOOST_TEST(judge(f, client_handshake(sys, other)) == closes);
}

BOOST_AUTO_TEST_CASE(a_node_already_connected_is_quarantined) {
  auto first = greeted();
  auto second = make(basp_side::accepted);
  BOOST_TEST(judge(second, client_handshake(sys, peer)) == dropped);
  BOOST_TEST(judge(second, direct_message(sys, 5, caf::make_message(ack{}))) == dropped);
  BOOST_TEST(!second.peer().has_value());
}

BOOST_AUTO_TEST_CASE(only_the_peer_protocol_passes) {
  auto f = greeted();
  BOOST_TEST(judge(f, direct_message(sys, 5, caf::make_message(ack{}))) == passes);
  BOOST_TEST(judge(f, direct_message(sys, 5, caf::make_message(info_request{}))) == passes);
  BOOST_TEST(judge(f, direct_message(sys, 5, caf::make_message())) == passes);
  BOOST_TEST(judge(f, direct_message(sys, 5, caf::make_message(make_error(errc::bad_request, "no")))) == passes);
  BOOST_TEST(judge(f, direct_message(sys, 5, caf::make_message(caf::make_error(caf::sec::request_timeout)))) == passes);
  // What a node's own actors send each other.
  BOOST_TEST(judge(f, direct_message(sys, 5, caf::make_message(span_atom::value, int64_t{0}, int64_t{0}))) == dropped);
  BOOST_TEST(judge(f, direct_message(sys, 5, caf::make_message(address_atom::value, std::string("x")))) == dropped);
  BOOST_TEST(judge(f, direct_message(sys, 5, caf::make_message(caf::exit_msg{{}, caf::exit_reason::kill}))) == dropped);
  BOOST_TEST(judge(f, direct_message(sys, 5, caf::make_message(std::string("not a request")))) == dropped);
  BOOST_TEST(judge(f, direct_message(sys, 5, caf::make_message(ack{}, ack{}))) == dropped);
  // A named receiver (CAF's utility actors) and a message without a receiver.
  auto named = direct_message(sys, 5, caf::make_message(ack{}));
  named[3] = 0x01;
  BOOST_TEST(judge(f, named) == dropped);
  BOOST_TEST(judge(f, direct_message(sys, 0, caf::make_message(ack{}))) == closes);
}

BOOST_AUTO_TEST_CASE(a_wire_message_length_must_match_its_frame) {
  auto f = greeted();
  auto m = direct_message(sys, 5, caf::make_message(info_request{}));
  // Announce one byte more than the frame holds: CAF would read past it (or allocate what a bigger lie says).
  auto longer = m;
  longer.push_back(0);
  longer[7] = static_cast<char>(longer[7] + 1);  // payload_len's low byte
  BOOST_TEST(judge(f, longer) == closes);
}

BOOST_AUTO_TEST_CASE(routed_messages_only_for_this_node_from_known_nodes) {
  auto f = greeted();
  auto msg = caf::make_message(ack{});
  BOOST_TEST(judge(f, routed_message(sys, peer, self, 5, msg)) == passes);
  BOOST_TEST(judge(f, routed_message(sys, other, self, 5, msg)) == dropped);  // unknown source
  connected.insert(id_of(sys, other));
  BOOST_TEST(judge(f, routed_message(sys, other, self, 5, msg)) == passes);
  BOOST_TEST(judge(f, routed_message(sys, peer, other, 5, msg)) == dropped);  // for another node
  BOOST_TEST(judge(f, routed_message(sys, self, self, 5, msg)) == closes);    // claims to be this node
}

BOOST_AUTO_TEST_CASE(monitor_and_down_only_about_the_peers_own_actors) {
  auto f = greeted();
  BOOST_TEST(judge(f, down_message(sys, peer, self, 9)) == passes);
  BOOST_TEST(judge(f, down_message(sys, other, self, 9)) == closes);
  auto g = greeted_again();
  BOOST_TEST(judge(g, frame(sys, basp::message_type::monitor_message, serialized(sys, peer, self), 0, 0, 4)) == passes);
  BOOST_TEST(judge(g, frame(sys, basp::message_type::monitor_message, serialized(sys, other, self), 0, 0, 4)) ==
             closes);
}

BOOST_AUTO_TEST_CASE(sizes_are_capped_and_large_frames_judged_on_their_start) {
  auto f = greeted();
  // A header announcing more than the cap closes at once, before any payload is read.
  auto huge = frame(sys, basp::message_type::direct_message, bytes(16, 0), 0, 0, 5, 0, 0xffffffffu);
  BOOST_TEST(f.on_header(reinterpret_cast<const uint8_t*>(huge.data())).verdict.kind == closes);
  auto g = greeted_again();
  auto big_handshake = make(basp_side::accepted);
  auto hs = frame(sys, basp::message_type::client_handshake, bytes(20000, 0));
  BOOST_TEST(big_handshake.on_header(reinterpret_cast<const uint8_t*>(hs.data())).verdict.kind == closes);
  // A 1 MiB wire message passes on its first bytes; a 1 MiB error does not.
  forward_request big;
  big.hidden = Tensor::empty(DType::f32, {1, 512, 512});
  auto m = direct_message(sys, 5, caf::make_message(big));
  auto h = g.on_header(reinterpret_cast<const uint8_t*>(m.data()));
  BOOST_TEST(h.verdict.kind == passes);
  BOOST_TEST(h.judge_bytes < h.payload_bytes);
  BOOST_TEST(g.on_payload(reinterpret_cast<const uint8_t*>(m.data()) + kBaspHeaderSize, h.judge_bytes).kind == passes);
  auto e = direct_message(sys, 5, caf::make_message(make_error(errc::bad_request, std::string(1 << 20, 'x'))));
  h = g.on_header(reinterpret_cast<const uint8_t*>(e.data()));
  BOOST_TEST(g.on_payload(reinterpret_cast<const uint8_t*>(e.data()) + kBaspHeaderSize, h.judge_bytes).kind == closes);
}

BOOST_AUTO_TEST_SUITE_END()
