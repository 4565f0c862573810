#include "model/hub/tensor_extract.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/hub/download_progress.hpp"

namespace corolla::hub {
namespace fs = std::filesystem;
namespace {

constexpr uint64_t kMaxGapBytes = uint64_t{1} << 20;

}  // namespace

RemoteSafetensors read_remote_header(const HubClient& client, const RemoteFile& f) {
  const std::string label = f.repo + "/" + f.file;
  std::string first8;
  client.fetch_range(f, 0, std::min<uint64_t>(8, f.size), [&](const char* d, size_t n) { first8.append(d, n); });
  if (first8.size() < 8) (void)safetensors_header_length(nullptr, first8.size(), label);  // throws: no header
  const uint64_t length = safetensors_header_length(reinterpret_cast<const uint8_t*>(first8.data()), f.size, label);
  RemoteSafetensors r;
  r.file = f;
  r.header_json.reserve(static_cast<size_t>(length));
  client.fetch_range(f, 8, length, [&](const char* d, size_t n) { r.header_json.append(d, n); });
  r.tensors = parse_safetensors_header(r.header_json, f.size, label);
  return r;
}

std::vector<ByteRange> merged_ranges(const std::vector<SafetensorsInfo>& tensors, uint64_t max_gap) {
  std::vector<ByteRange> out;
  for (const SafetensorsInfo& t : tensors) {
    const uint64_t begin = t.offset, end = t.offset + static_cast<uint64_t>(t.nbytes);
    if (!out.empty() && begin >= out.back().end && begin - out.back().end <= max_gap)
      out.back().end = std::max(out.back().end, end);
    else
      out.push_back({begin, end});
  }
  return out;
}

uint64_t extract_tensors(const HubClient& client, const RemoteSafetensors& remote,
                         const std::vector<std::string>& names, const fs::path& out_path) {
  std::vector<SafetensorsInfo> chosen;
  for (const std::string& n : names) chosen.push_back(remote.tensors.at(n));
  std::sort(chosen.begin(), chosen.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });

  // The new header: each chosen entry as the file has it (dtype, shape), at its place in the new data.
  const nlohmann::json source = nlohmann::json::parse(remote.header_json);
  nlohmann::json header = nlohmann::json::object();
  if (source.contains("__metadata__")) header["__metadata__"] = source["__metadata__"];
  uint64_t total = 0;
  for (const SafetensorsInfo& t : chosen) {
    nlohmann::json entry = source.at(t.name);
    entry["data_offsets"] = {total, total + static_cast<uint64_t>(t.nbytes)};
    header[t.name] = entry;
    total += static_cast<uint64_t>(t.nbytes);
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');

  fs::create_directories(out_path.parent_path());
  check_disk_space(out_path.parent_path(), total + h.size() + 8, remote.file.repo + "/" + remote.file.file);
  const fs::path part = out_path.string() + ".incomplete";
  std::ofstream out(part, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error(part.string() + ": cannot write");
  const uint64_t h_len = h.size();
  out.write(reinterpret_cast<const char*>(&h_len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));

  // Each range's bytes in order: those inside a chosen tensor are written, the gaps between them dropped.
  const std::string label = remote.file.repo + "/" + remote.file.file + " (" + std::to_string(chosen.size()) + " of " +
                            std::to_string(remote.tensors.size()) + " tensors)";
  DownloadProgress progress(label, total);
  uint64_t fetched = 0;
  size_t next = 0;  // the first chosen tensor not yet written whole
  for (const ByteRange& range : merged_ranges(chosen, kMaxGapBytes)) {
    uint64_t at = range.begin;  // file offset of the next byte to arrive
    client.fetch_range(remote.file, range.begin, range.end - range.begin, [&](const char* data, size_t n) {
      uint64_t pos = at;
      const uint64_t end = at + n;
      while (pos < end && next < chosen.size()) {
        const SafetensorsInfo& t = chosen[next];
        const uint64_t t_end = t.offset + static_cast<uint64_t>(t.nbytes);
        if (t_end <= pos) {  // written whole (or empty)
          ++next;
          continue;
        }
        if (pos < t.offset) {
          pos = std::min(end, t.offset);
          continue;
        }
        const uint64_t take = std::min(end, t_end) - pos;
        out.write(data + (pos - at), static_cast<std::streamsize>(take));
        progress.add(take);
        pos += take;
        if (pos == t_end) ++next;
      }
      at = end;
    });
    fetched += range.end - range.begin;
  }
  while (next < chosen.size() && chosen[next].nbytes == 0) ++next;
  progress.finish();
  out.close();
  if (!out || next != chosen.size()) throw std::runtime_error(part.string() + ": write failed (disk full?)");
  fs::rename(part, out_path);
  return fetched;
}

}  // namespace corolla::hub
