// Architectures register a block factory under their config name ("bloom", "falcon", "gemma2", "llama", "mistral",
// "mixtral", "phi3", "qwen2", "qwen3").
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "model/block.hpp"

namespace corolla {

using BlockFactory =
    std::function<std::unique_ptr<Block>(const WeightSource&, int64_t, Backend&, const BlockLoadOptions&)>;

const BlockFactory* find_block_factory(const std::string& arch);

// Defined by the architecture files.
std::unique_ptr<Block> make_bloom_block(const WeightSource&, int64_t, Backend&, const BlockLoadOptions&);
std::unique_ptr<Block> make_falcon_block(const WeightSource&, int64_t, Backend&, const BlockLoadOptions&);
std::unique_ptr<Block> make_gemma2_block(const WeightSource&, int64_t, Backend&, const BlockLoadOptions&);
std::unique_ptr<Block> make_llama_block(const WeightSource&, int64_t, Backend&, const BlockLoadOptions&);
std::unique_ptr<Block> make_qwen2_block(const WeightSource&, int64_t, Backend&, const BlockLoadOptions&);
std::unique_ptr<Block> make_qwen3_block(const WeightSource&, int64_t, Backend&, const BlockLoadOptions&);
std::unique_ptr<Block> make_mixtral_block(const WeightSource&, int64_t, Backend&, const BlockLoadOptions&);
std::unique_ptr<Block> make_phi3_block(const WeightSource&, int64_t, Backend&, const BlockLoadOptions&);

}  // namespace corolla
