#include "kernels/cpu/matvec.hpp"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kernels/interleaved_rows.hpp"

#if defined(COROLLA_HAVE_X86_KERNELS)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace corolla {

namespace {
template <class Fn>
Fn require_kernel(Fn f, DType t, const char* what) {
  if (!f)
    throw std::invalid_argument(std::string("no ") + what + " kernel for weights of dtype " +
                                std::string(dtype_name(t)));
  return f;
}
const DTypeKernels& entry(const MatvecKernels& s, DType t) { return s.by_dtype[static_cast<size_t>(t)]; }
}  // namespace

MatvecFn MatvecKernels::for_dtype(DType t) const { return require_kernel(entry(*this, t).one_row, t, "matrix-vector"); }
MatvecRowsFn MatvecKernels::rows_for_dtype(DType t) const {
  return require_kernel(entry(*this, t).rows, t, "matrix-vector");
}
DequantFn MatvecKernels::dequant_for_dtype(DType t) const {
  return require_kernel(entry(*this, t).to_f32, t, "conversion");
}
PackFn MatvecKernels::pack_for_dtype(DType t) const { return require_kernel(entry(*this, t).pack, t, "packing"); }

void MatvecKernels::set(DType t, MatvecFn one_row, MatvecRowsFn rows) {
  DTypeKernels& e = by_dtype[static_cast<size_t>(t)];
  e.one_row = one_row;
  e.rows = rows;
  e.prepare = nullptr;  // set_interleaved or set_prepared gives them
  e.prepared = nullptr;
  e.prepared_size = nullptr;
  e.prepared_row_group = 1;
  e.prepared_min_rows = 1;
}
void MatvecKernels::set_prepared(DType t, PrepareFn prepare, MatvecPreparedFn prepared, PreparedSizeFn size,
                                 int64_t row_group, int64_t min_rows) {
  if (!prepare || !prepared || !size || row_group < 1 || min_rows < 1)
    throw std::logic_error("set_prepared: incomplete kernels");
  DTypeKernels& e = by_dtype[static_cast<size_t>(t)];
  e.prepare = prepare;
  e.prepared = prepared;
  e.prepared_size = size;
  e.prepared_row_group = row_group;
  e.prepared_min_rows = min_rows;
}
void MatvecKernels::set_interleaved(DType plain, MatvecFn one_row, MatvecRowsFn rows, PrepareFn prepare,
                                    MatvecPreparedFn prepared) {
  const std::optional<DType> form = interleaved_form(plain);
  if (!form) throw std::logic_error("no interleaved layout for " + std::string(dtype_name(plain)));
  if ((prepare == nullptr) != (prepared == nullptr)) throw std::logic_error("prepare and prepared come together");
  set(*form, one_row, rows);
  by_dtype[static_cast<size_t>(*form)].prepare = prepare;
  by_dtype[static_cast<size_t>(*form)].prepared = prepared;
  by_dtype[static_cast<size_t>(plain)].reads_interleaved = true;
}

void MatvecKernels::set_conversions(DType t, DequantFn to_f32, PackFn pack) {
  DTypeKernels& e = by_dtype[static_cast<size_t>(t)];
  e.to_f32 = to_f32;
  e.pack = pack;
}

const float* f16_to_f32_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = f16_to_f32(static_cast<uint16_t>(h));
    return t;
  }();
  return table.data();
}

namespace {

#if defined(COROLLA_HAVE_X86_KERNELS)
bool cpu_has_f16c() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
// __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 registers (XCR0).
bool cpu_runs_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c(); }
bool cpu_runs_avx512() {
  return cpu_runs_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}
bool cpu_runs_avx512vnni() { return cpu_runs_avx512() && __builtin_cpu_supports("avx512vnni"); }
// AMX needs the CPU's tiles (AMX-TILE, AMX-BF16, AMX-INT8: CPUID leaf 7, EDX bits 24, 22 and 25) and the kernel's
// leave to use them: Linux hands a process the tile state only once asked (arch_prctl ARCH_REQ_XCOMP_PERM for
// XTILEDATA), and says no where it or the hypervisor does not save that state.
bool cpu_runs_amx() {
  if (!cpu_runs_avx512vnni()) return false;
  unsigned a, b, c, d;
  constexpr unsigned kTile = 1u << 24, kBf16 = 1u << 22, kInt8 = 1u << 25;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || (d & (kTile | kBf16 | kInt8)) != (kTile | kBf16 | kInt8))
    return false;
#if defined(__linux__)
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  static const bool granted = syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  return granted;
#else
  return false;
#endif
}
#endif

}  // namespace

std::vector<const MatvecKernels*> available_matvec_kernels() {
  std::vector<const MatvecKernels*> sets{&scalar_matvec_kernels()};
#if defined(COROLLA_HAVE_X86_KERNELS)
  if (cpu_runs_avx2()) sets.push_back(&avx2_matvec_kernels());
  if (cpu_runs_avx512()) sets.push_back(&avx512_matvec_kernels());
  if (cpu_runs_avx512vnni()) sets.push_back(&avx512vnni_matvec_kernels());
  if (cpu_runs_amx()) sets.push_back(&amx_matvec_kernels());
#endif
  return sets;
}

const MatvecKernels& pick_matvec_kernels(const char* cap) {
  const auto sets = available_matvec_kernels();
  if (!cap || !*cap) return *sets.back();
  // Sets are ordered scalar < avx2 < avx512 < avx512vnni < avx512amx; the cap keeps the best one at or below the one
  // named.
  static constexpr std::string_view kOrder[] = {"scalar", "avx2", "avx512", "avx512vnni", "avx512amx"};
  constexpr int kSets = 5;
  int limit = -1;
  for (int i = 0; i < kSets; ++i)
    if (std::string_view(cap) == kOrder[i]) limit = i;
  if (limit < 0) {
    std::fprintf(stderr,
                 "corolla: COROLLA_ISA=%s is not one of scalar, avx2, avx512, avx512vnni, avx512amx; ignoring it\n",
                 cap);
    return *sets.back();
  }
  const MatvecKernels* pick = sets.front();
  for (const MatvecKernels* s : sets)
    for (int i = 0; i <= limit; ++i)
      if (std::string_view(s->isa) == kOrder[i]) pick = s;
  return *pick;
}

const MatvecKernels& best_matvec_kernels() {
  static const MatvecKernels& chosen = pick_matvec_kernels(std::getenv("COROLLA_ISA"));
  return chosen;
}

}  // namespace corolla
