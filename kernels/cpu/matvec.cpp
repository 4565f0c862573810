#include "kernels/cpu/matvec.hpp"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#if defined(COROLLA_HAVE_X86_KERNELS)
#include <cpuid.h>
#endif

namespace corolla {

MatvecFn MatvecKernels::for_dtype(DType t) const {
  switch (t) {
    case DType::f32: return f32;
    case DType::f16: return f16;
    case DType::bf16: return bf16;
    case DType::q8_0: return q8_0;
    case DType::q4_0: return q4_0;
    case DType::q4_1: return q4_1;
    case DType::q5_0: return q5_0;
    case DType::q5_1: return q5_1;
    case DType::q4_K: return q4_K;
    case DType::q5_K: return q5_K;
    case DType::q6_K: return q6_K;
    case DType::q4_0_r16: return q4_0_r16;
    case DType::q8_0_r16: return q8_0_r16;
    case DType::q4_K_r16: return q4_K_r16;
    case DType::q4_1_r16: return q4_1_r16;
    case DType::q5_K_r16: return q5_K_r16;
    case DType::q6_K_r16: return q6_K_r16;
    default: throw std::invalid_argument("no matrix-vector kernel for weights of dtype " + std::string(dtype_name(t)));
  }
}

void MatvecKernels::set(DType t, MatvecFn one_row, MatvecRowsFn rows) {
  switch (t) {
    case DType::f32: f32 = one_row, f32_rows = rows; return;
    case DType::f16: f16 = one_row, f16_rows = rows; return;
    case DType::bf16: bf16 = one_row, bf16_rows = rows; return;
    case DType::q8_0: q8_0 = one_row, q8_0_rows = rows; return;
    case DType::q4_0: q4_0 = one_row, q4_0_rows = rows; return;
    case DType::q4_1: q4_1 = one_row, q4_1_rows = rows; return;
    case DType::q5_0: q5_0 = one_row, q5_0_rows = rows; return;
    case DType::q5_1: q5_1 = one_row, q5_1_rows = rows; return;
    case DType::q4_K: q4_K = one_row, q4_K_rows = rows; return;
    case DType::q5_K: q5_K = one_row, q5_K_rows = rows; return;
    case DType::q6_K: q6_K = one_row, q6_K_rows = rows; return;
    case DType::q4_0_r16: q4_0_r16 = one_row, q4_0_r16_rows = rows; return;
    case DType::q8_0_r16: q8_0_r16 = one_row, q8_0_r16_rows = rows; return;
    case DType::q4_K_r16: q4_K_r16 = one_row, q4_K_r16_rows = rows; return;
    case DType::q4_1_r16: q4_1_r16 = one_row, q4_1_r16_rows = rows; return;
    case DType::q5_K_r16: q5_K_r16 = one_row, q5_K_r16_rows = rows; return;
    case DType::q6_K_r16: q6_K_r16 = one_row, q6_K_r16_rows = rows; return;
    default: throw std::invalid_argument("no matrix-vector kernel for weights of dtype " + std::string(dtype_name(t)));
  }
}

MatvecRowsFn MatvecKernels::rows_for_dtype(DType t) const {
  switch (t) {
    case DType::f32: return f32_rows;
    case DType::f16: return f16_rows;
    case DType::bf16: return bf16_rows;
    case DType::q8_0: return q8_0_rows;
    case DType::q4_0: return q4_0_rows;
    case DType::q4_1: return q4_1_rows;
    case DType::q5_0: return q5_0_rows;
    case DType::q5_1: return q5_1_rows;
    case DType::q4_K: return q4_K_rows;
    case DType::q5_K: return q5_K_rows;
    case DType::q6_K: return q6_K_rows;
    case DType::q4_0_r16: return q4_0_r16_rows;
    case DType::q8_0_r16: return q8_0_r16_rows;
    case DType::q4_K_r16: return q4_K_r16_rows;
    case DType::q4_1_r16: return q4_1_r16_rows;
    case DType::q5_K_r16: return q5_K_r16_rows;
    case DType::q6_K_r16: return q6_K_r16_rows;
    default: throw std::invalid_argument("no matrix-vector kernel for weights of dtype " + std::string(dtype_name(t)));
  }
}

DequantFn MatvecKernels::dequant_for_dtype(DType t) const {
  switch (t) {
    case DType::f32: return [](const void* src, float* dst, int64_t n) { corolla::to_f32(DType::f32, src, dst, n); };
    case DType::f16: return f16_to_f32;
    case DType::bf16: return bf16_to_f32;
    case DType::q8_0: return q8_0_to_f32;
    case DType::q4_0: return q4_0_to_f32;
    case DType::q4_1: return q4_1_to_f32;
    case DType::q5_0: return q5_0_to_f32;
    case DType::q5_1: return q5_1_to_f32;
    case DType::q4_K: return q4_K_to_f32;
    case DType::q5_K: return q5_K_to_f32;
    case DType::q6_K: return q6_K_to_f32;
    default: throw std::invalid_argument("no conversion kernel for weights of dtype " + std::string(dtype_name(t)));
  }
}

PackFn MatvecKernels::pack_for_dtype(DType t) const {
  switch (t) {
    case DType::f32: return f32_pack;
    case DType::f16: return f16_pack;
    case DType::bf16: return bf16_pack;
    case DType::q8_0: return q8_0_pack;
    case DType::q4_0: return q4_0_pack;
    case DType::q4_1: return q4_1_pack;
    case DType::q5_0: return q5_0_pack;
    case DType::q5_1: return q5_1_pack;
    case DType::q4_K: return q4_K_pack;
    case DType::q5_K: return q5_K_pack;
    case DType::q6_K: return q6_K_pack;
    default: throw std::invalid_argument("no packing kernel for weights of dtype " + std::string(dtype_name(t)));
  }
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
bool cpu_runs_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
}
bool cpu_runs_avx512() {
  return cpu_runs_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}
bool cpu_runs_avx512vnni() { return cpu_runs_avx512() && __builtin_cpu_supports("avx512vnni"); }
#endif

}  // namespace

std::vector<const MatvecKernels*> available_matvec_kernels() {
  std::vector<const MatvecKernels*> sets{&scalar_matvec_kernels()};
#if defined(COROLLA_HAVE_X86_KERNELS)
  if (cpu_runs_avx2()) sets.push_back(&avx2_matvec_kernels());
  if (cpu_runs_avx512()) sets.push_back(&avx512_matvec_kernels());
  if (cpu_runs_avx512vnni()) sets.push_back(&avx512vnni_matvec_kernels());
#endif
  return sets;
}

const MatvecKernels& pick_matvec_kernels(const char* cap) {
  const auto sets = available_matvec_kernels();
  if (!cap || !*cap) return *sets.back();
  // Sets are ordered scalar < avx2 < avx512 < avx512vnni; the cap keeps the best one at or below the one named.
  static constexpr std::string_view kOrder[] = {"scalar", "avx2", "avx512", "avx512vnni"};
  constexpr int kSets = 4;
  int limit = -1;
  for (int i = 0; i < kSets; ++i)
    if (std::string_view(cap) == kOrder[i]) limit = i;
  if (limit < 0) {
    std::fprintf(stderr, "corolla: COROLLA_ISA=%s is not one of scalar, avx2, avx512, avx512vnni; ignoring it\n",
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
