// model.safetensors.index.json: which shard file of a sharded model holds each tensor. Shard names come from
// outside, so each must be a plain file name in the model's directory (no path, nothing but a .safetensors file):
// an index may not make the loader open files elsewhere.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace corolla {

// The index's weight_map, tensor name -> shard file name. Throws std::runtime_error naming `source` and the entry
// when the text is not such an index or a shard name is not a plain .safetensors file name.
std::map<std::string, std::string> parse_safetensors_index(std::string_view text, const std::string& source);

// Index files of real models are tens of kilobytes; one past this is refused before it is read.
constexpr size_t kMaxSafetensorsIndexBytes = size_t{64} << 20;

}  // namespace corolla
