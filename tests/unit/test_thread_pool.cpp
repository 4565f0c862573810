// ThreadPool: every index exactly once, chunk bounds, exceptions, concurrent callers, and an idle pool that does
// not burn CPU (several servers share two cores).
#define BOOST_TEST_MODULE thread_pool
#include <boost/test/unit_test.hpp>
#include <atomic>
#include <chrono>
#include <ctime>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"

using namespace corolla;

namespace {
double process_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
}  // namespace

BOOST_AUTO_TEST_CASE(covers_every_index_once_in_grain_aligned_chunks) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 16, 100, 1000, 4097})
      for (int64_t grain : {1, 3, 16, 64}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> chunks{0}, bad_bounds{0};
        // Boost.Test assertions are not thread-safe: workers only count, the test thread checks.
        pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
          if (!(b < e) || b % grain != 0 || (e != n && e % grain != 0)) bad_bounds++;
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
          chunks++;
        });
        BOOST_REQUIRE_EQUAL(bad_bounds.load(), 0);
        for (int64_t i = 0; i < n; ++i) BOOST_REQUIRE_EQUAL(hits[static_cast<size_t>(i)].load(), 1);
        BOOST_TEST(chunks.load() <= threads * ThreadPool::kChunksPerThread);
      }
  }
}

BOOST_AUTO_TEST_CASE(rethrows_after_all_chunks_finished) {
  ThreadPool pool(2);
  std::atomic<int> finished{0};
  BOOST_CHECK_THROW(pool.parallel_for(8, 1,
                                      [&](int64_t b, int64_t) {
                                        if (b == 3) throw std::runtime_error("chunk 3");
                                        std::this_thread::sleep_for(std::chrono::milliseconds(2));
                                        finished++;
                                      }),
                    std::runtime_error);
  BOOST_TEST(finished.load() == 7);
  // The pool still works afterwards.
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  BOOST_TEST(sum.load() == 4950);
}

BOOST_AUTO_TEST_CASE(serialises_concurrent_callers) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c)
    callers.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) pool.parallel_for(10, 1, [&](int64_t b, int64_t e) { total += e - b; });
    });
  for (auto& t : callers) t.join();
  BOOST_TEST(total.load() == 3 * 2000 * 10);
}

BOOST_AUTO_TEST_CASE(an_idle_pool_does_not_burn_cpu) {
  ThreadPool pool(2);
  std::atomic<int64_t> sink{0};
  for (int i = 0; i < 100; ++i) pool.parallel_for(1000, 1, [&](int64_t b, int64_t e) { sink += e - b; });
  const double cpu0 = process_cpu_s();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double idle_ms = (process_cpu_s() - cpu0) * 1e3;
  BOOST_TEST_MESSAGE("CPU time of an idle 2-thread pool over 1 s: " << idle_ms << " ms");
  // The workers spin for at most about 50 µs after the last job, then block.
  BOOST_TEST(idle_ms < 10.0);
}
