// Fetches one named tensor from a WeightSource, checks its shape, converts it to the serving dtype and places it
// on the backend. Errors name the file and the tensor.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "kernels/backend.hpp"
#include "model/weights/weight_source.hpp"

namespace corolla {

// A weight matrix in `dtype` (nullopt: as stored), placed by Backend::upload_weight (for matrix products: the CPU
// backend may copy it to page-aligned memory); when that copied it, the source's mapped pages of it are released.
Tensor load_matrix(const WeightSource& src, const std::string& name, Shape expected, std::optional<DType> dtype,
                   Backend& backend);
// The same for a table read a row at a time (embeddings): placed by Backend::upload, a view in place on the CPU.
Tensor load_table(const WeightSource& src, const std::string& name, Shape expected, std::optional<DType> dtype,
                  Backend& backend);
// A vector (norm weight, bias) always in f32.
Tensor load_vector(const WeightSource& src, const std::string& name, int64_t expected, Backend& backend);
// A Gemma norm, read once: its weight as stored (f32) and 1 + weight in f32, what its RMSNorm multiplies by (as
// Hugging Face computes it).
struct NormPlusOne {
  Tensor stored, plus_one;
};
NormPlusOne load_norm_plus_one(const WeightSource& src, const std::string& name, int64_t expected, Backend& backend);

// The same two with their rows reordered on the way: row i placed is row order[i] stored (`order` a permutation of
// the rows; BLOOM's fused q/k/v, stored interleaved head by head, regrouped as all q rows, all k, all v).
Tensor load_matrix(const WeightSource& src, const std::string& name, Shape expected, std::optional<DType> dtype,
                   Backend& backend, std::span<const int64_t> order);
Tensor load_vector(const WeightSource& src, const std::string& name, int64_t expected, Backend& backend,
                   std::span<const int64_t> order);

}  // namespace corolla
