// Resolves what users type after --model: a directory, a .gguf file, or the word "demo" (SmolLM2-135M-Instruct,
// Q4_1 GGUF, fetched by tools/fetch_demo_model.sh into ${COROLLA_CACHE:-~/.cache/corolla}/demo).
#pragma once

#include <string>

namespace corolla {

inline constexpr const char* kDemoModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

// ${COROLLA_CACHE:-~/.cache/corolla} (a leading "~" expanded): the demo model, node and client databases.
std::string corolla_cache_dir();
// The demo model's path (whether or not it exists yet).
std::string demo_model_path();
// `name` itself, or the demo path for "demo"; throws with the command to run when the demo is not downloaded.
std::string resolve_model_path(const std::string& name);

}  // namespace corolla
