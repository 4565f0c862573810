// The Backend contract is checked once for every backend (kernels/backend_contract.cpp): the CPU backend, the
// simulator's cost model and, where a GPU answers, the CUDA backend refuse the same malformed calls with the same
// message, before any kernel runs; shapes with a dimension of 0 are computed, not divided by.
#define BOOST_TEST_MODULE backend_contract
#include <boost/test/unit_test.hpp>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "sim/cost_backend.hpp"

using namespace corolla;

namespace {

std::vector<std::shared_ptr<Backend>> every_backend() {
  std::vector<std::shared_ptr<Backend>> out{make_cpu_backend(2), sim::make_cost_backend({})};
  if (cuda_available()) out.push_back(make_backend("cuda"));
  return out;
}

// A tensor of `shape` on `be`'s device, zero-filled (f32) or uploaded from the host (other dtypes).
Tensor on(Backend& be, Shape shape, DType dtype = DType::f32) {
  if (dtype == DType::f32) return be.alloc(dtype, shape);
  return be.upload(Tensor::empty(dtype, shape));
}

// The message `call` throws as std::invalid_argument ("" when it does not throw).
std::string refusal(const std::function<void()>& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// Every backend refuses `call(be)` with the same message, which contains `what`.
void all_refuse(const std::string& what, const std::function<void(Backend&)>& call) {
  std::string first;
  for (const auto& be : every_backend()) {
    const std::string got = refusal([&] { call(*be); });
    BOOST_TEST(got.find(what) != std::string::npos, be->name() << ": \"" << got << "\", expected " << what);
    if (first.empty()) first = got;
    BOOST_TEST(got == first, be->name() << " says \"" << got << "\", another backend \"" << first << "\"");
  }
}

// A KV pool of `pages` pages of 4 slots for `kv_heads` heads of 8, with one page per sequence.
struct Pool {
  Tensor k, v;
  std::vector<int32_t> table;
  Pool(Backend& be, int64_t sequences, int64_t kv_heads)
      : k(on(be, {sequences, 4, kv_heads, 8})), v(on(be, {sequences, 4, kv_heads, 8})), table(sequences) {
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  }
  KvPages pages() const { return {k, v, table, static_cast<int64_t>(table.size()), false}; }
};

}  // namespace

BOOST_AUTO_TEST_CASE(every_backend_refuses_the_same_malformed_calls) {
  all_refuse("matmul: output", [](Backend& be) {
    Tensor x = on(be, {2, 8}), w = on(be, {3, 8}), y = on(be, {2, 4});
    be.matmul(x, w, nullptr, y);
  });
  all_refuse("layer_norm: weight must be", [](Backend& be) {  // a half-precision weight read as f32 would be garbage
    Tensor x = on(be, {2, 8}), w = on(be, {8}, DType::f16), b = on(be, {8}), y = on(be, {2, 8});
    be.layer_norm(x, w, b, 1e-5f, y);
  });
  all_refuse("silu_mul: shapes differ", [](Backend& be) {
    Tensor g = on(be, {2, 8}), u = on(be, {2, 7}), o = on(be, {2, 8});
    be.silu_mul(g, u, o);
  });
  all_refuse("embed: token id 9 outside the vocabulary of 5", [](Backend& be) {
    Tensor table = on(be, {5, 8}), out = on(be, {1, 8});
    const std::vector<int32_t> ids{9};
    be.embed(table, ids, 1.0f, out);
  });
  all_refuse("embed: unsupported table", [](Backend& be) {
    Tensor table = on(be, {40}), out = on(be, {1, 8});
    const std::vector<int32_t> ids{0};
    be.embed(table, ids, 1.0f, out);
  });
  all_refuse("attention: q", [](Backend& be) {  // 3 query heads over 2 KV heads
    Pool pool(be, 1, 2);
    Tensor q = on(be, {1, 1, 3, 8}), out = on(be, {1, 1, 24});
    const std::vector<int32_t> pos{0};
    be.attention(q, pool.pages(), pos, {}, out);
  });
  all_refuse("attention: a negative window", [](Backend& be) {
    Pool pool(be, 1, 2);
    Tensor q = on(be, {1, 1, 4, 8}), out = on(be, {1, 1, 32});
    const std::vector<int32_t> pos{0};
    AttentionSpec spec;
    spec.window = -1;
    be.attention(q, pool.pages(), pos, spec, out);
  });
  all_refuse("kv_write: position 4 outside the cache of 4 tokens", [](Backend& be) {
    Pool pool(be, 1, 2);
    Tensor k = on(be, {1, 1, 2, 8});
    const std::vector<int32_t> pos{4};
    be.kv_write(k, k, pos, pool.pages());
  });
  all_refuse("rope_kv_write: inv_freq has 5 entries", [](Backend& be) {
    Pool pool(be, 1, 2);
    Tensor q = on(be, {1, 4, 8}), k = on(be, {1, 2, 8});
    const std::vector<int32_t> pos{0};
    const std::vector<float> freq(5, 1.0f);
    be.rope_kv_write(q, k, k, pos, freq, pool.pages());
  });
  all_refuse("gather_rows: row 2 outside", [](Backend& be) {
    Tensor x = on(be, {2, 8}), out = on(be, {1, 8});
    const std::vector<int32_t> rows{2};
    be.gather_rows(x, rows, out);
  });
  all_refuse("attention_backward: k", [](Backend& be) {
    Tensor q = on(be, {1, 2, 4, 8}), k = on(be, {1, 3, 2, 8}), d = on(be, {1, 2, 32});
    Tensor dq = on(be, {1, 2, 4, 8}), dk = on(be, {1, 3, 2, 8}), dv = on(be, {1, 3, 2, 8});
    be.attention_backward(q, k, k, d, {}, dq, dk, dv);
  });
}

// Before the contract, a KV pool of zero heads passed the page check and the CPU backend then divided the query
// heads by it (SIGFPE): a malformed cache must be refused, not crash the node.
BOOST_AUTO_TEST_CASE(a_cache_without_kv_heads_is_refused) {
  all_refuse("attention: q", [](Backend& be) {
    Pool pool(be, 1, 0);
    Tensor q = on(be, {1, 1, 4, 8}), out = on(be, {1, 1, 32});
    const std::vector<int32_t> pos{0};
    be.attention(q, pool.pages(), pos, {}, out);
  });
}

// Before, rows were counted as numel / last dimension, a division by zero for an empty last dimension (SIGFPE).
BOOST_AUTO_TEST_CASE(an_empty_last_dimension_is_computed_not_divided_by) {
  auto be = make_cpu_backend(2);
  Tensor x = Tensor::empty(DType::f32, {2, 0}), w = Tensor::empty(DType::f32, {3, 0});
  Tensor y = be->alloc(DType::f32, {2, 3});
  y.data_as<float>()[0] = 7.0f;
  be->matmul(x, w, nullptr, y);
  for (int64_t i = 0; i < y.numel(); ++i) BOOST_TEST(y.data_as<float>()[i] == 0.0f);  // an empty sum

  Tensor rows = Tensor::empty(DType::f32, {4, 0}), picked = be->alloc(DType::f32, {2, 0});
  const std::vector<int32_t> which{1, 3};
  be->gather_rows(rows, which, picked);
  const std::vector<int32_t> outside{4};
  BOOST_CHECK_THROW(be->gather_rows(rows, outside, picked), std::invalid_argument);  // 4 rows, even of width 0
}

// Skipped (not passed) without a GPU.
BOOST_AUTO_TEST_CASE(a_host_tensor_given_to_the_cuda_backend_is_named,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) { return cuda_available(); })) {
  auto be = make_backend("cuda");
  Tensor host = Tensor::empty(DType::f32, {2, 8}), out = be->alloc(DType::f32, {2, 8});
  const std::string got = refusal([&] { be->add(host, out, out); });
  BOOST_TEST(got.find("add: a must be a CUDA f32 tensor, got f32[2, 8] on the host") != std::string::npos, got);
}
