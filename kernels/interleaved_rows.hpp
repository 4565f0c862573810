// Quantized weights with their rows interleaved by 16: a layout of the CPU kernels, never in a file or on the wire.
//
// Why: a matrix-vector kernel that reads one row at a time spends most of its instructions on per-block overhead
// (a scale converted and broadcast per 32 values, a few levels per vector, lanes summed per row). With 16 rows side
// by side, lane r of a 512-bit vector holds 4 levels of row r: one vpdpbusd multiplies 16 rows by the same 4
// activations (broadcast from memory, no shuffle), the 16 rows' f16 scales are one 32-byte load converted by one
// instruction, and each lane accumulates its row to the end (kernels/cpu/matvec_vnni.cpp).
//
// Layout of an interleaved [n, k] matrix (n a multiple of 16): group g holds rows 16g..16g+15 in the bytes a plain
// matrix gives those rows, as one record per block column (32 columns; 256 for the K-quants). A record holds the
// 16 rows' blocks of that column, field by field: a scalar field (an f16 scale) as 16 values, row 0 first; a byte
// array as 64-byte vectors whose lane r (4 bytes) belongs to row r: in vector v, lane r byte b is byte 4v + b of row
// r's array. The fields, in record order:
//   q4_0_r16: d, qs[16]                   (4 vectors; vector t's low nibbles are values 4t.., its high 16 + 4t..)
//   q8_0_r16: d, qs[32] stored as unsigned q + 128 (vpdpbusd multiplies unsigned by signed bytes)
//   q4_1_r16: d, m, qs[16]                (as q4_0_r16)
//   iq4_nl_r16: d, qs[16]                 (as q4_0_r16: the same block layout)
//   q4_K_r16: d, dmin, scales[12], qs[128]
//   q5_K_r16: d, dmin, scales[12], qh[32], qs[128]
//   q6_K_r16: d, scales[16], then for h = 0, 1 and p = 0, 1: qh[32h + 16p, +16), ql[64h + 16p, +16),
//             ql[64h + 32 + 16p, +16)  (the order its kernel reads them in)
//   q2_K_r16: d, dmin, scales[16], qs[64]
//   q3_K_r16: d, scales[12], hmask[32], qs[64]
// So a vector of levels always meets 4 consecutive activations, the same in every lane.
#pragma once

#include <cstdint>
#include <optional>

#include "kernels/dtype.hpp"

namespace corolla {

inline constexpr int64_t kInterleavedRows = 16;

// q4_0 -> q4_0_r16, q8_0 -> q8_0_r16, q4_1 -> q4_1_r16, iq4_nl -> iq4_nl_r16, q2_K..q6_K -> q2_K_r16..q6_K_r16;
// nullopt for the other dtypes.
std::optional<DType> interleaved_form(DType plain);
// The plain dtype an interleaved one holds (q4_0_r16 -> q4_0); any other dtype is its own plain form.
DType plain_form(DType t);
bool is_interleaved(DType t);

// A plain [rows, k] matrix into the interleaved layout of interleaved_form(plain) (rows a multiple of 16; src and
// dst of storage_bytes(plain, rows * k) bytes, not overlapping).
void interleave_rows(DType plain, const void* src, void* dst, int64_t rows, int64_t k);
// The inverse of interleave_rows: an interleaved [rows, k] matrix of dtype t back to plain_form(t).
void deinterleave_rows(DType t, const void* src, void* dst, int64_t rows, int64_t k);
// Blocks [b0, b1) of row r of an interleaved [*, k] matrix as plain blocks of plain_form(t), into `out`.
void deinterleave_blocks(DType t, const void* w, int64_t k, int64_t r, int64_t b0, int64_t b1, void* out);
// Columns [c0, c1) of row r of an interleaved matrix as f32 (c0 and c1 multiples of its block).
void interleaved_row_to_f32(DType t, const void* w, int64_t k, int64_t r, int64_t c0, int64_t c1, float* out);

}  // namespace corolla
