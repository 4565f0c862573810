#include "kernels/cpu/decode_attention.hpp"

#include <string_view>

#include "kernels/cpu/matvec.hpp"

namespace corolla {
namespace {

// The set of a matrix-vector set's ISA (VNNI and AMX add nothing these use).
const DecodeAttentionKernels* decode_attention_kernels_for(std::string_view isa) {
#if defined(COROLLA_HAVE_X86_KERNELS)
  if (isa.starts_with("avx512")) return &avx512_decode_attention_kernels();
  if (isa == "avx2") return &avx2_decode_attention_kernels();
#else
  (void)isa;
#endif
  return nullptr;
}

}  // namespace

std::vector<const DecodeAttentionKernels*> available_decode_attention_kernels() {
  std::vector<const DecodeAttentionKernels*> sets;
  for (const MatvecKernels* m : available_matvec_kernels())
    if (const DecodeAttentionKernels* k = decode_attention_kernels_for(m->isa); k && (sets.empty() || sets.back() != k))
      sets.push_back(k);
  return sets;
}

const DecodeAttentionKernels* best_decode_attention_kernels() {
  static const DecodeAttentionKernels* chosen = decode_attention_kernels_for(best_matvec_kernels().isa);
  return chosen;
}

}  // namespace corolla
