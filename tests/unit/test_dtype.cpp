#define BOOST_TEST_MODULE dtype
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/dtype.hpp"
#include "kernels/tensor.hpp"

using namespace corolla;

BOOST_AUTO_TEST_CASE(f16_round_trips_every_finite_half) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1f) == 0x1f) continue;  // inf / NaN
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    BOOST_REQUIRE_EQUAL(f32_to_f16(f), static_cast<uint16_t>(h));
  }
}

BOOST_AUTO_TEST_CASE(f16_rounds_to_nearest_even) {
  BOOST_TEST(f16_to_f32(f32_to_f16(1.0f + 1.0f / 2048)) == 1.0f);            // tie, even is 1.0
  BOOST_TEST(f16_to_f32(f32_to_f16(1.0f + 3.0f / 2048)) == 1.0f + 2.0f / 1024);  // tie, rounds up to even
  BOOST_TEST(f16_to_f32(f32_to_f16(70000.f)) == INFINITY);
  BOOST_TEST(f16_to_f32(f32_to_f16(1e-8f)) == 0.f);
}

BOOST_AUTO_TEST_CASE(bf16_rounds_to_nearest_even) {
  BOOST_TEST(bf16_to_f32(f32_to_bf16(1.0f)) == 1.0f);
  BOOST_TEST(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)) == 1.0f);  // tie to even
  BOOST_TEST(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

BOOST_AUTO_TEST_CASE(quantized_round_trips_within_their_step) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> x(256);
  for (auto& v : x) v = dist(rng);
  for (DType t : {DType::q8_0, DType::q4_0, DType::q4_1}) {
    std::vector<uint8_t> q(static_cast<size_t>(storage_bytes(t, 256)));
    std::vector<float> y(256);
    from_f32(t, x.data(), q.data(), 256);
    to_f32(t, q.data(), y.data(), 256);
    const float tol = t == DType::q8_0 ? 0.03f : 0.5f;
    for (size_t i = 0; i < x.size(); ++i) BOOST_TEST(std::fabs(x[i] - y[i]) < tol, dtype_name(t) << " at " << i);
  }
}

BOOST_AUTO_TEST_CASE(storage_rejects_partial_blocks) {
  BOOST_CHECK_THROW(storage_bytes(DType::q8_0, 33), std::invalid_argument);
  BOOST_TEST(storage_bytes(DType::q4_1, 64) == 40);
}

BOOST_AUTO_TEST_CASE(tensor_views_share_storage) {
  Tensor t = Tensor::empty(DType::f32, {4, 3});
  Tensor rows = t.slice_rows(1, 3);
  rows.data_as<float>()[0] = 5.f;
  BOOST_TEST(t.data_as<float>()[3] == 5.f);
  BOOST_TEST(rows.shape() == Shape({2, 3}));
  BOOST_CHECK_THROW(t.reshaped({5}), std::invalid_argument);
}
