// KV pages: a pool hands out its lowest free pages and takes them back when a cache goes; a budget's pages are
// rounded up; a sliding-window block's cache is a ring; beam search's reordering shares pages between the
// sequences that continue the same hypothesis and copies a shared page only when a sequence writes into it.
#define BOOST_TEST_MODULE kv_pool
#include <boost/test/unit_test.hpp>
#include <numeric>

#include "model/kv_pool.hpp"

using namespace corolla;

namespace {

Backend& cpu() {
  static auto b = make_cpu_backend(1);
  return *b;
}

constexpr int64_t kPage = 4, kHeads = 1, kDim = 2;

// The first key value of sequence b's position s (in an f32 or an f16 pool).
float key_at(const KVCache& c, int64_t b, int64_t s) {
  const KvPages p = c.pages();
  const int64_t at = p.row(b, s) * kHeads * kDim;
  return p.k.dtype() == DType::f16 ? f16_to_f32(p.k.data_as<const uint16_t>()[at]) : p.k.data_as<const float>()[at];
}

// Writes key and value b·100 + s at every position s < n of every sequence b.
void fill(KVCache& c, int64_t n) {
  Tensor k = Tensor::empty(DType::f32, {c.batch(), n, kHeads, kDim});
  std::vector<int32_t> pos(static_cast<size_t>(c.batch() * n));
  for (int64_t b = 0; b < c.batch(); ++b)
    for (int64_t s = 0; s < n; ++s) {
      pos[static_cast<size_t>(b * n + s)] = static_cast<int32_t>(s);
      for (int64_t i = 0; i < kHeads * kDim; ++i)
        k.data_as<float>()[(b * n + s) * kHeads * kDim + i] = static_cast<float>(b * 100 + s);
    }
  cpu().kv_write(k, k, pos, c.pages());
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_pool_hands_out_its_lowest_pages_and_takes_them_back) {
  auto pool = std::make_shared<KvPool>(cpu(), 10, kPage, kHeads, kDim);
  {
    auto a = KVCache::take(pool, 2, 6);  // two sequences of two pages each
    BOOST_REQUIRE(a);
    BOOST_TEST(pool->free_pages() == 6);
    const KvPages p = a->pages();
    BOOST_TEST((std::vector<int32_t>(p.table.begin(), p.table.end()) == std::vector<int32_t>{0, 1, 2, 3}));
    BOOST_TEST(p.run(0, 0, 8) == 8);      // pages 0 and 1: one run
    auto b = KVCache::take(pool, 1, 30);  // 8 pages: more than are free
    BOOST_TEST(!b);
    BOOST_TEST(pool->free_pages() == 6);
  }
  BOOST_TEST(pool->free_pages() == 10);
  BOOST_TEST(kv_pool_pages(100) == 2);
  BOOST_TEST(kv_pool_pages(0) == 1);
  BOOST_TEST(kv_pages_for(64) == 1);
  BOOST_TEST(kv_pages_for(65) == 2);
}

BOOST_AUTO_TEST_CASE(a_windowed_block_takes_a_ring_where_the_session_is_longer) {
  auto pool = std::make_shared<KvPool>(cpu(), 16, kPage, kHeads, kDim);
  auto ring = KVCache::take(pool, 1, 40, 5);  // a window of 5 plus a page less one: 8 positions, 2 pages
  BOOST_REQUIRE(ring);
  BOOST_TEST(ring->pages().ring);
  BOOST_TEST(ring->pages().slots() == 8);
  BOOST_TEST(kv_slots_for(40, 5, kPage) == 8);
  BOOST_TEST(kv_slots_for(6, 5, kPage) == 6);  // shorter than the ring: the whole session
  auto whole = KVCache::take(pool, 1, 6, 5);
  BOOST_REQUIRE(whole);
  BOOST_TEST(!whole->pages().ring);
  // Position 9 lives where 1 did.
  BOOST_TEST(ring->pages().row(0, 9) == ring->pages().row(0, 1));
}

// An f16 pool (kv_cache_dtype = "f16") holds its pages in half the bytes; a dtype the backend does not read is refused.
BOOST_AUTO_TEST_CASE(an_f16_pool_takes_half_the_bytes_and_other_dtypes_are_refused) {
  const KvPool f32(cpu(), 4, kPage, kHeads, kDim), f16(cpu(), 4, kPage, kHeads, kDim, DType::f16);
  BOOST_TEST(f16.page_bytes() * 2 == f32.page_bytes());
  BOOST_TEST((f16.k().dtype() == DType::f16));
  BOOST_CHECK_THROW(KvPool(cpu(), 4, kPage, kHeads, kDim, DType::bf16), std::invalid_argument);
  BOOST_CHECK_THROW(KvPool(cpu(), 4, kPage, kHeads, kDim, DType::q8_0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(reordered_sequences_share_pages_until_they_write) {
  for (const DType dtype : {DType::f32, DType::f16}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      auto pool = std::make_shared<KvPool>(cpu(), 12, kPage, kHeads, kDim, dtype);
      auto taken = KVCache::take(pool, 3, 8);  // three sequences of two pages
      BOOST_REQUIRE(taken);
      KVCache& c = *taken;
      fill(c, 6);  // positions 0..5: all of page 0 and half of page 1 of each sequence
      BOOST_TEST(c.version() == 0u);
      c.reorder(std::vector<int32_t>{2, 2, 0});
      BOOST_TEST(c.version() == 1u);
      for (int64_t s = 0; s < 6; ++s) {
        BOOST_TEST(key_at(c, 0, s) == 200 + s);
        BOOST_TEST(key_at(c, 1, s) == 200 + s);
        BOOST_TEST(key_at(c, 2, s) == s);
      }
      BOOST_TEST(c.pages().row(0, 0) == c.pages().row(1, 0));  // shared, not copied
      // The next step writes position 6 (page 1) of each: sequences 0 and 1 get copies of page 1, page 0 stays shared.
      const std::vector<int32_t> next = {6, 6, 6};
      c.make_writable(cpu(), next, 1);
      BOOST_TEST(c.pages().row(0, 0) == c.pages().row(1, 0));
      BOOST_TEST(c.pages().row(0, 6) != c.pages().row(1, 6));
      for (int64_t s = 4; s < 6; ++s) BOOST_TEST(key_at(c, 1, s) == 200 + s);  // the copy holds what was there
      Tensor k = Tensor::empty(DType::f32, {3, 1, kHeads, kDim});
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t i = 0; i < kHeads * kDim; ++i)
          k.data_as<float>()[b * kHeads * kDim + i] = static_cast<float>(1000 + b);
      cpu().kv_write(k, k, next, c.pages());
      BOOST_TEST(key_at(c, 0, 6) == 1000);
      BOOST_TEST(key_at(c, 1, 6) == 1001);
      BOOST_TEST(key_at(c, 0, 5) == 205);
      BOOST_TEST(key_at(c, 1, 5) == 205);
      // Sequence 1's old pages (none of the table's now) were the spares; nothing leaks when the cache goes.
      BOOST_CHECK_THROW(c.reorder(std::vector<int32_t>{0, 1}), std::invalid_argument);
      BOOST_CHECK_THROW(c.reorder(std::vector<int32_t>{0, 1, 3}), std::invalid_argument);
      taken.reset();
      BOOST_TEST(pool->free_pages() == 12);
    }
  }
}
