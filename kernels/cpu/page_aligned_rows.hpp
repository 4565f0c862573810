// Weights whose rows are whole 4 KiB pages, moved onto page boundaries for the decode kernels.
//
// A safetensors tensor starts wherever the file's JSON header ends, so its rows rarely start on a page. When a row
// is a whole number of pages (a bf16 row of 2048 values, an f32 row of 1024), every row then crosses a page
// boundary at the same place inside it, and the hardware prefetchers, which stop at page boundaries, start over
// in the middle of every row of every pass. Measured on a 2-core AMD EPYC (Zen 3) VM, the matrix-vector jobs of
// a TinyLlama-shaped layer and its head alternated with read sweeps, same process: rows 2512 bytes into a page
// (where the bench model's tensors start) 0.865 / 0.863 of the sweep, page-aligned rows 0.932 / 0.921 (two runs of
// 30 rounds); the down projection's rows of 2.75 pages ran as fast at either place. Other row lengths are left
// where they are.
#pragma once

#include "kernels/tensor.hpp"

namespace corolla {

// `w` itself unless it is a host matrix whose rows are whole pages and whose data does not start on a page; then a
// copy of it in page-aligned memory (huge pages asked for when it is large enough).
Tensor with_page_aligned_rows(const Tensor& w);

}  // namespace corolla
