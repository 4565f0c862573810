// A wire message's bytes as CAF's deserializer hands them over (actors/protocol/wire_message.hpp): the length a peer
// announces is only believed up to the bytes that actually follow it, so a frame of a few bytes cannot make the
// receiver allocate gigabytes; a message whose bytes are all there still decodes.
#define BOOST_TEST_MODULE wire_message_bytes
#include <boost/test/unit_test.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/sec.hpp>
#include <vector>

#include "actors/dht/dht_messages.hpp"
#include "actors/protocol/messages.hpp"
#include "support/address_space_limit.hpp"

using namespace corolla;

namespace {

// What a peer sends for a message of `announced` bytes of which only `present` follow.
std::vector<char> frame(size_t announced, size_t present) {
  std::vector<char> buf;
  caf::binary_serializer sink(nullptr, buf);
  BOOST_REQUIRE(!sink.begin_sequence(announced));
  std::vector<char> body(present, 0);
  if (present) BOOST_REQUIRE(!sink.apply_raw(present, body.data()));
  return buf;
}

template <class T>
caf::error read(const std::vector<char>& buf, T& x) {
  caf::binary_deserializer source(nullptr, buf);
  return source(x);
}

// Far below the 4 GiB a 32-bit length can announce: an allocation of the announced size fails under it.
constexpr size_t kHeadroom = size_t{256} << 20;

}  // namespace

BOOST_AUTO_TEST_CASE(an_announced_length_beyond_the_frame_is_refused_before_anything_is_allocated) {
  const auto buf = frame(0xFFFFFFF0u, 16);
  test::AddressSpaceLimit limit(kHeadroom);
  step_request step;
  BOOST_CHECK(read(buf, step));
  forward_request forward;
  BOOST_CHECK(read(buf, forward));
  wire_chunk chunk;
  BOOST_CHECK(read(buf, chunk));
  dht_store_request store;
  BOOST_CHECK(read(buf, store));
}

BOOST_AUTO_TEST_CASE(a_length_one_byte_beyond_the_frame_is_refused) {
  step_request step;
  BOOST_CHECK(read(frame(17, 16), step));
}

BOOST_AUTO_TEST_CASE(a_whole_message_still_decodes_through_the_deserializer) {
  close_session sent{};
  sent.session_id = 42;
  std::vector<char> buf;
  caf::binary_serializer sink(nullptr, buf);
  BOOST_REQUIRE(!sink(sent));
  close_session got;
  BOOST_REQUIRE(!read(buf, got));
  BOOST_CHECK(got.wire_error.empty());
  BOOST_CHECK_EQUAL(got.session_id, 42u);
}

// A step's beam reordering crosses the wire with it (and a step without one arrives without one).
BOOST_AUTO_TEST_CASE(a_steps_hypothesis_ids_cross_the_wire) {
  for (const std::vector<int32_t>& hypo : {std::vector<int32_t>{1, 1, 0}, std::vector<int32_t>{}}) {
    step_request sent{};
    sent.session_id = 7;
    sent.step_id = 3;
    sent.hidden = Tensor::empty(DType::f32, {3, 1, 4});
    std::fill_n(sent.hidden.data_as<float>(), 12, 0.5f);
    sent.positions = {5, 5, 5};
    sent.hypo_ids = hypo;
    std::vector<char> buf;
    caf::binary_serializer sink(nullptr, buf);
    BOOST_REQUIRE(!sink(sent));
    step_request got;
    BOOST_REQUIRE(!read(buf, got));
    BOOST_CHECK(got.wire_error.empty());
    BOOST_CHECK(got.hypo_ids == hypo);
    BOOST_CHECK(got.positions == sent.positions);
  }
}
