// Where the CPU backend keeps a weight matrix for its kernels: in place (a view of the file mapping) unless a copy
// reads faster. Two cases are copied:
// - Rows that are whole 4 KiB pages but do not start on a page. A safetensors tensor starts wherever the file's
//   JSON header ends, so every row (a bf16 row of 2048 values, an f32 row of 1024) then crosses a page boundary
//   at the same place inside it, and the hardware prefetchers, which stop at page boundaries, start over in the
//   middle of every row of every pass (measured: docs/PERFORMANCE.md, "Engine end to end").
// - Any matrix of 2 MiB or more that is not on a huge-page boundary: copied into memory advised for huge pages.
//   Whether a file's pages are mapped huge depends on the page cache's history (the bench model's down
//   projections were mapped in 4 KiB pages), and reading through 4 KiB pages costs a TLB miss per page (about
//   1 % of a decode step of the bench model: docs/PERFORMANCE.md, "Engine end to end").
// And one case is rearranged: quantized matrices of whole groups of 16 rows (q4_0, q4_1, q8_0, iq4_nl, the
// K-quants) are interleaved by 16 rows (kernels/interleaved_rows.hpp) when the kernel set reads that layout faster
// (MatvecKernels::reads_interleaved).
// A copy costs its memcpy (or byte shuffle) once at load, split over `pool` when one is given (the copy's pages are
// new memory, and the writer pays for their first touch: on a VM that was more than the shuffle itself); the
// mapped pages it came from are then released (WeightSource::release), so memory is not counted twice.
#pragma once

#include "kernels/cpu/matvec.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/tensor.hpp"

namespace corolla {

// `w` itself, or a copy of it placed as described above for `kernels` (host matrices only; anything else is
// returned as is).
Tensor placed_for_kernels(const Tensor& w, const MatvecKernels& kernels = best_matvec_kernels(),
                          ThreadPool* pool = nullptr);

}  // namespace corolla
