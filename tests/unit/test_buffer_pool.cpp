// BufferPool: a released buffer serves the next request it holds when it is not much larger, always zero-filled;
// a much smaller request gets a buffer of its own.
#define BOOST_TEST_MODULE buffer_pool
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <memory>

#include "kernels/cpu/buffer_pool.hpp"

using namespace corolla;

namespace {
bool all_zero(const void* p, size_t bytes) {
  const auto* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i)
    if (c[i] != 0) return false;
  return true;
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_waiting_buffer_serves_a_request_it_holds_zeroed) {
  auto pool = std::make_shared<BufferPool>(size_t{1} << 20);
  void* first = nullptr;
  {
    auto b = pool->acquire(4000);
    first = b.get();
    BOOST_TEST(all_zero(first, 4000));
    std::memset(first, 0x5a, 4000);
  }
  // A little smaller (a batch of fewer rows, a shorter context): the same memory, zeroed again.
  {
    auto b = pool->acquire(3000);
    BOOST_TEST(b.get() == first);
    BOOST_TEST(all_zero(b.get(), 3000));
    std::memset(b.get(), 0x5a, 3000);
  }
  // Much smaller: its own buffer, while the large one keeps waiting for a request of its size.
  auto small = pool->acquire(1000);
  BOOST_TEST(small.get() != first);
  BOOST_TEST(all_zero(small.get(), 1000));
  auto again = pool->acquire(4000);
  BOOST_TEST(again.get() == first);
  BOOST_TEST(all_zero(again.get(), 4000));
  // Larger than any waiting buffer: a new one.
  auto larger = pool->acquire(8000);
  BOOST_TEST(larger.get() != first);
  BOOST_TEST(all_zero(larger.get(), 8000));
}
