// Some tensors of a remote safetensors file, fetched by HTTP byte ranges and written as a safetensors file of their
// own: a server of 8 of a model's 80 blocks downloads a tenth of a shard that holds 80, not the shard. The header
// is read first (two small ranges), checked like any safetensors header, and the wanted tensors' bytes are fetched
// in file order, neighbours merged into one request when little lies between them.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "model/hub/hub_client.hpp"
#include "model/weights/safetensors_file.hpp"

namespace corolla::hub {

struct RemoteSafetensors {
  RemoteFile file;
  std::string header_json;
  std::map<std::string, SafetensorsInfo> tensors;
};

// Reads and checks the header of the remote file `f`.
RemoteSafetensors read_remote_header(const HubClient& client, const RemoteFile& f);

// One request of an extraction: bytes [begin, end) of the remote file.
struct ByteRange {
  uint64_t begin = 0;
  uint64_t end = 0;
};
// The requests that fetch `tensors` (sorted by offset): neighbours closer than `max_gap` bytes share one.
std::vector<ByteRange> merged_ranges(const std::vector<SafetensorsInfo>& tensors, uint64_t max_gap);

// Writes the tensors named in `names` (all present in `remote`) to `out` as a safetensors file (written beside it
// and renamed when whole). Returns the bytes fetched.
uint64_t extract_tensors(const HubClient& client, const RemoteSafetensors& remote,
                         const std::vector<std::string>& names, const std::filesystem::path& out);

}  // namespace corolla::hub
