// A Boost.Test main for suites whose inputs may be absent (external vectors, a GPU, the demo model): when
// `why_skip()` returns a reason, the suite prints it and exits with 77, which CTest reports as skipped.
// Use: #define BOOST_TEST_MODULE x / #define BOOST_TEST_NO_MAIN / include this / COROLLA_TEST_MAIN(why_skip)
#pragma once

#include <boost/test/unit_test.hpp>
#include <iostream>
#include <string>

#define COROLLA_TEST_MAIN(why_skip)                                       \
  int main(int argc, char* argv[]) {                                      \
    const std::string reason = why_skip();                                \
    if (!reason.empty()) {                                                \
      std::cout << "SKIPPED: " << reason << std::endl;                    \
      return 77;                                                          \
    }                                                                     \
    return boost::unit_test::unit_test_main(&init_unit_test, argc, argv); \
  }
