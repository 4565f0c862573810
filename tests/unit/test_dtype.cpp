#define BOOST_TEST_MODULE dtype
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/matvec.hpp"
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
  BOOST_TEST(f16_to_f32(f32_to_f16(1.0f + 1.0f / 2048)) == 1.0f);                // tie, even is 1.0
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
  for (DType t : {DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q4_K, DType::q5_K,
                  DType::q6_K, DType::q2_K, DType::q3_K, DType::iq4_nl}) {
    std::vector<uint8_t> q(static_cast<size_t>(storage_bytes(t, 256)));
    std::vector<float> y(256);
    from_f32(t, x.data(), q.data(), 256);
    to_f32(t, q.data(), y.data(), 256);
    const bool five_bits = t == DType::q5_0 || t == DType::q5_1 || t == DType::q5_K;
    const float tol = t == DType::q8_0   ? 0.03f
                      : t == DType::q6_K ? 0.1f
                      : five_bits        ? 0.25f
                      : t == DType::q2_K ? 1.0f
                                         : 0.5f;
    float worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      BOOST_TEST(std::fabs(x[i] - y[i]) < tol, dtype_name(t) << " at " << i);
      worst = std::max(worst, std::fabs(x[i] - y[i]));
    }
    BOOST_TEST_MESSAGE(dtype_name(t) << ": worst round-trip error " << worst);
  }
}

BOOST_AUTO_TEST_CASE(storage_rejects_partial_blocks) {
  BOOST_CHECK_THROW(storage_bytes(DType::q8_0, 33), std::invalid_argument);
  BOOST_TEST(storage_bytes(DType::q4_1, 64) == 40);
  BOOST_CHECK_THROW(storage_bytes(DType::q4_K, 128), std::invalid_argument);
  BOOST_TEST(storage_bytes(DType::q4_K, 512) == 288);
  BOOST_TEST(storage_bytes(DType::q5_K, 256) == 176);
  BOOST_TEST(storage_bytes(DType::q6_K, 256) == 210);
  BOOST_TEST(storage_bytes(DType::q5_0, 64) == 44);
  BOOST_TEST(storage_bytes(DType::q5_1, 64) == 48);
  BOOST_TEST(storage_bytes(DType::q2_K, 512) == 168);
  BOOST_TEST(storage_bytes(DType::q3_K, 256) == 110);
  BOOST_TEST(storage_bytes(DType::iq4_nl, 64) == 36);
  BOOST_CHECK_THROW(storage_bytes(DType::q3_K, 32), std::invalid_argument);
}

namespace {
std::vector<char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  BOOST_REQUIRE_MESSAGE(f, "cannot open " << path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
}  // namespace

// Random block bytes and gguf-py's gguf.quants.dequantize of them (tools/kquants.py writes both): to_f32 and every
// kernel set's dequantization give the same f32 values, bit for bit.
BOOST_AUTO_TEST_CASE(dequantization_matches_gguf_py) {
  for (DType t :
       {DType::q5_0, DType::q5_1, DType::q4_K, DType::q5_K, DType::q6_K, DType::q2_K, DType::q3_K, DType::iq4_nl}) {
    const std::string base = std::string(COROLLA_TEST_DATA) + "/dequant/" + std::string(dtype_name(t));
    const std::vector<char> blocks = read_bytes(base + ".blocks"), values = read_bytes(base + ".f32");
    BOOST_REQUIRE(blocks.size() % static_cast<size_t>(block_bytes(t)) == 0);
    const int64_t n = static_cast<int64_t>(blocks.size()) / block_bytes(t) * block_elems(t);
    BOOST_REQUIRE_EQUAL(values.size(), static_cast<size_t>(n) * 4);
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    std::memcpy(want.data(), values.data(), values.size());
    to_f32(t, blocks.data(), got.data(), n);
    BOOST_TEST(std::memcmp(got.data(), want.data(), values.size()) == 0, dtype_name(t) << " to_f32");
    for (const MatvecKernels* ks : available_matvec_kernels()) {
      std::fill(got.begin(), got.end(), 0.f);
      ks->dequant_for_dtype(t)(blocks.data(), got.data(), n);
      BOOST_TEST(std::memcmp(got.data(), want.data(), values.size()) == 0, dtype_name(t) << " " << ks->isa);
    }
  }
}

BOOST_AUTO_TEST_CASE(k_quant_names_parse) {
  for (DType t : {DType::q2_K, DType::q3_K, DType::q4_K, DType::q5_K, DType::q6_K}) {
    BOOST_TEST((parse_dtype(dtype_name(t)) == std::optional<DType>(t)));
    BOOST_TEST(block_elems(t) == 256);
    BOOST_TEST(is_quantized(t));
  }
  BOOST_TEST((parse_dtype("iq4_nl") == std::optional<DType>(DType::iq4_nl)));
  for (DType t : weight_dtypes()) BOOST_TEST((parse_dtype(dtype_name(t)) == std::optional<DType>(t)));
  BOOST_TEST(!parse_dtype("q4_0_r16"));
}

BOOST_AUTO_TEST_CASE(tensor_views_share_storage) {
  Tensor t = Tensor::empty(DType::f32, {4, 3});
  Tensor rows = t.slice_rows(1, 3);
  rows.data_as<float>()[0] = 5.f;
  BOOST_TEST(t.data_as<float>()[3] == 5.f);
  BOOST_TEST(rows.shape() == Shape({2, 3}));
  BOOST_CHECK_THROW(t.reshaped({5}), std::invalid_argument);
}
