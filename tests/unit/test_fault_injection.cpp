#define BOOST_TEST_MODULE fault_injection
#include <boost/test/unit_test.hpp>

#include "actors/protocol/errors.hpp"
#include "actors/server/fault_injection.hpp"

using namespace corolla;

namespace {
Tensor ones() {
  Tensor t = Tensor::empty(DType::f32, {1, 2, 3});
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = 1.0f;
  return t;
}
}  // namespace

BOOST_AUTO_TEST_CASE(steps_fail_once_the_count_is_served) {
  FaultInjector faults({.step_errors_after = 2}, 1);
  Tensor out = ones();
  BOOST_TEST(!faults.refuse_step());
  faults.served(out);
  BOOST_TEST(!faults.refuse_step());
  faults.served(out);
  const caf::error refusal = faults.refuse_step();
  BOOST_TEST(is(refusal, errc::internal));
  BOOST_TEST(describe(refusal).find("after its first 2") != std::string::npos);
  BOOST_TEST(out.data_as<float>()[0] == 1.0f);  // failing is not lying
}

BOOST_AUTO_TEST_CASE(a_wrong_output_is_a_shifted_copy) {
  FaultInjector always({.wrong_outputs = 1.0}, 1);
  const Tensor kept = ones();
  Tensor out = kept;  // shares the buffer, as the blocks' output may
  always.served(out);
  const float wrong = out.data_as<float>()[0];
  BOOST_TEST(wrong >= 2.0f);
  BOOST_TEST(wrong < 3.0f);
  for (int64_t i = 0; i < out.numel(); ++i) BOOST_TEST(out.data_as<float>()[i] == wrong);  // one shift for all
  BOOST_TEST(kept.data_as<float>()[0] == 1.0f);
  BOOST_TEST(!always.refuse_step());
  // Another server lies differently: two liars checking each other do not agree.
  FaultInjector other({.wrong_outputs = 1.0}, 2);
  Tensor theirs = ones();
  other.served(theirs);
  BOOST_TEST(theirs.data_as<float>()[0] != wrong);
}

BOOST_AUTO_TEST_CASE(a_fraction_of_outputs_is_wrong_and_the_draws_repeat_by_seed) {
  auto wrong_of = [](uint64_t seed) {
    FaultInjector some({.wrong_outputs = 0.25}, seed);
    std::vector<bool> wrong;
    for (int i = 0; i < 400; ++i) {
      Tensor out = ones();
      some.served(out);
      wrong.push_back(out.data_as<float>()[0] != 1.0f);
    }
    return wrong;
  };
  const auto a = wrong_of(7);
  const auto n = std::count(a.begin(), a.end(), true);
  BOOST_TEST(n > 60);
  BOOST_TEST(n < 140);
  BOOST_TEST((wrong_of(7) == a));
  BOOST_TEST(!fault_options{}.any());
}
