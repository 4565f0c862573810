// make_backend: device names, and the error a "cuda" request gets on a machine or build without CUDA.
#define BOOST_TEST_MODULE backend_factory
#include <boost/test/unit_test.hpp>

#include <stdexcept>
#include <string>

#include "kernels/backend.hpp"

using namespace corolla;

namespace {

std::string error_of(std::string_view device) {
  try {
    make_backend(device);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(cpu_is_always_there) {
  auto b = make_backend("cpu", 1);
  BOOST_TEST((b->device() == Device::cpu));
}

BOOST_AUTO_TEST_CASE(unknown_devices_are_named_in_the_error) {
  const std::string e = error_of("tpu");
  BOOST_TEST(e.find("unknown device 'tpu'") != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(cuda_without_a_gpu_says_why) {
  if (cuda_available()) {
    auto b = make_backend("cuda");
    BOOST_TEST((b->device() == Device::cuda));
    BOOST_TEST_MESSAGE("GPU present: " << b->name());
    const std::string e = error_of("cuda:4096");
    BOOST_TEST(e.find("does not exist") != std::string::npos, e);
    return;
  }
  const std::string e = error_of("cuda");
#ifdef COROLLA_HAVE_CUDA
  BOOST_TEST(e.find("no CUDA GPU found") != std::string::npos, e);
#else
  BOOST_TEST(e.find("this build has no CUDA backend") != std::string::npos, e);
#endif
  const std::string e1 = error_of("cuda:1");
  BOOST_TEST(e1.find("'cuda:1'") != std::string::npos, e1);
}
