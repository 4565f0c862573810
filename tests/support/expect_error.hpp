// Runs f and checks (Boost.Test) that it throws an exception whose message contains every fragment.
#pragma once

#include <boost/test/unit_test.hpp>
#include <initializer_list>
#include <string>

namespace corolla::test {

template <class F>
void expect_error(F f, std::initializer_list<std::string> fragments) {
  try {
    f();
    BOOST_ERROR("no error was raised");
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    for (const auto& frag : fragments)
      BOOST_TEST(msg.find(frag) != std::string::npos, "'" << msg << "' lacks '" << frag << "'");
  }
}

}  // namespace corolla::test
