#include "kernels/cpu/weight_placement.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>

#include "kernels/interleaved_rows.hpp"

namespace corolla {

namespace {
constexpr size_t kPage = 4096;
constexpr size_t kHugePage = size_t{2} << 20;

bool aligned_to(const void* p, size_t alignment) { return reinterpret_cast<uintptr_t>(p) % alignment == 0; }
}  // namespace

namespace {
// The interleaved dtype `w` is placed in for `kernels`, if any.
std::optional<DType> interleaved_for_kernels(const Tensor& w, const MatvecKernels& kernels) {
  const std::optional<DType> form = interleaved_form(w.dtype());
  if (!form || !kernels.reads_interleaved(w.dtype()) || w.dim(0) % kInterleavedRows != 0) return std::nullopt;
  return form;
}
}  // namespace

Tensor placed_for_kernels(const Tensor& w, const MatvecKernels& kernels, ThreadPool* pool) {
  if (w.device() != Device::cpu || w.rank() != 2 || w.numel() == 0) return w;
  const auto row_bytes = static_cast<size_t>(storage_bytes(w.dtype(), w.dim(1)));
  const auto bytes = static_cast<size_t>(w.nbytes());
  const std::optional<DType> interleaved = interleaved_for_kernels(w, kernels);
  const bool rows_cross_pages = row_bytes % kPage == 0 && !aligned_to(w.data(), kPage);
  const bool wants_huge_pages = bytes >= kHugePage && !aligned_to(w.data(), kHugePage);
  if (!interleaved && !rows_cross_pages && !wants_huge_pages) return w;
  // Aligned to a huge page when it spans one, so that the whole copy can be mapped by them.
  const size_t alignment = bytes >= kHugePage ? kHugePage : kPage;
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded);
  if (!p) throw std::bad_alloc();
  if (alignment == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);
  // Groups of 16 rows take the same bytes in both layouts, so ranges of groups are placed independently (a plain
  // copy: ranges of rows).
  const int64_t groups = interleaved ? w.dim(0) / kInterleavedRows : w.dim(0);
  const int64_t group_bytes = static_cast<int64_t>(bytes) / groups;
  auto place = [&](int64_t g0, int64_t g1) {
    const auto* from = static_cast<const char*>(w.data()) + g0 * group_bytes;
    char* to = static_cast<char*>(p) + g0 * group_bytes;
    if (interleaved)
      interleave_rows(w.dtype(), from, to, (g1 - g0) * kInterleavedRows, w.dim(1));
    else
      std::memcpy(to, from, static_cast<size_t>((g1 - g0) * group_bytes));
  };
  if (pool && groups > 1)
    pool->parallel_for(groups, 1, place);
  else
    place(0, groups);
  return Tensor::view(p, interleaved.value_or(w.dtype()), w.shape(),
                      std::shared_ptr<const void>(p, [](const void* q) { std::free(const_cast<void*>(q)); }));
}

}  // namespace corolla
