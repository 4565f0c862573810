// Models by name: what users type after --model, resolved to a local path that open_weights and Tokenizer::load
// take. "demo", a local directory or .gguf file, or a Hugging Face Hub name "org/name[@revision]" (a local path
// of that name wins, as in transformers).
//
// A Hub model is fetched as far as `needs` asks (ModelNeeds): whole files into the shared Hub cache (so files
// transformers downloaded serve here and the other way round), and for a shard of which only some tensors are
// needed, those tensors alone, by byte ranges, into Corolla's cache:
//
//   ${COROLLA_CACHE:-~/.cache/corolla}/hub/models--org--name/
//     extracts/<etag>-<needs>.safetensors          a shard's needed tensors
//     <commit>/<needs>/<name>/                     what the process opens: links to the blobs and extracts, and an
//                                                  index of exactly the tensors present
//
// A GGUF file ("org/name:Q4_K_M", "org/name:file.gguf") is fetched whole and opened where huggingface_hub puts
// it, snapshots/<commit>/<file> (the repository's file list, /api/models/<repo>/revision/<revision>, says which
// file a tag names).
//
// The folder opened is named as the repository (<name>), so a swarm's default DHT prefix is the same for every
// process that names the model, whatever each downloaded. With HF_HUB_OFFLINE set nothing is asked of the
// endpoint: the revision's last resolution and the folder built then serve, or the error says what is missing.
#pragma once

#include <filesystem>
#include <string>

#include "model/hub/hub_ref.hpp"
#include "model/hub/model_needs.hpp"

namespace corolla::hub {

// Whether locate_model fetches `name` from the Hub: it has a Hub name's shape and no local path has that name.
bool is_hub_name(const std::string& name);

// The local path for `name`; throws std::runtime_error saying what failed (unreachable endpoint, refused access,
// no such model, revision or file, content that does not match).
std::string locate_model(const std::string& name, const ModelNeeds& needs);

// The folder holding what `needs` asks of the Hub model `ref`.
std::filesystem::path fetch_hub_model(const HubRef& ref, const ModelNeeds& needs);

}  // namespace corolla::hub
