// The weight decoding of the CUDA kernels (kernels/cuda/decode.cuh) is host-callable: check it against the CPU's
// conversions (kernels/dtype.cpp) for every weight dtype. Needs nvcc, not a GPU.
#define BOOST_TEST_MODULE cuda_decode
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cuda/decode.cuh"

using namespace corolla;
using namespace corolla::gpu;

namespace {

constexpr int kK = 256;

struct Row {
  std::vector<float> want;           // what kernels/dtype.cpp decodes
  std::vector<unsigned char> bytes;  // the stored row
};

Row make_row(DType t, uint32_t seed) {
  std::vector<float> x(kK);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 2.f);
  for (float& v : x) v = dist(rng);
  Row r;
  r.bytes.resize(static_cast<size_t>(storage_bytes(t, kK)) + 16);  // vector storage is 16-byte aligned
  from_f32(t, x.data(), r.bytes.data(), kK);
  r.want.resize(kK);
  to_f32(t, r.bytes.data(), r.want.data(), kK);
  return r;
}

bool close(float got, float want) { return std::fabs(got - want) <= 1e-6f * std::fabs(want) + 1e-7f; }

template <DType T>
void check_dtype() {
  const Row r = make_row(T, 5 + static_cast<uint32_t>(T));
  const char* row = reinterpret_cast<const char*>(r.bytes.data());
  for (int j = 0; j < kK; ++j)
    BOOST_REQUIRE_MESSAGE(close(load_elem<T>(row, j), r.want[j]),
                          dtype_name(T) << " element " << j << ": " << load_elem<T>(row, j) << " vs " << r.want[j]);
  // Chunks of eight: every element exactly once, paired with the right activation index.
  std::vector<int> seen(kK, 0);
  for (int g = 0; g < kK / 8; ++g) {
    Chunk c;
    load_chunk<T>(row, g, c);
    for (int j = 0; j < 8; ++j) {
      const int idx = j < 4 ? c.x0 + j : c.x1 + j - 4;
      BOOST_REQUIRE(idx >= 0 && idx < kK);
      ++seen[static_cast<size_t>(idx)];
      const float v = is_quantized_v<T> ? c.d * c.v[j] + c.m : c.v[j];
      BOOST_REQUIRE_MESSAGE(close(v, r.want[static_cast<size_t>(idx)]),
                            dtype_name(T) << " chunk " << g << " lane value " << j << " (element " << idx << "): " << v
                                          << " vs " << r.want[static_cast<size_t>(idx)]);
    }
  }
  for (int i = 0; i < kK; ++i) BOOST_REQUIRE_MESSAGE(seen[static_cast<size_t>(i)] == 1, "element " << i);
}

}  // namespace

BOOST_AUTO_TEST_CASE(f32) { check_dtype<DType::f32>(); }
BOOST_AUTO_TEST_CASE(f16) { check_dtype<DType::f16>(); }
BOOST_AUTO_TEST_CASE(bf16) { check_dtype<DType::bf16>(); }
BOOST_AUTO_TEST_CASE(q8_0) { check_dtype<DType::q8_0>(); }
BOOST_AUTO_TEST_CASE(q4_0) { check_dtype<DType::q4_0>(); }
BOOST_AUTO_TEST_CASE(q4_1) { check_dtype<DType::q4_1>(); }
