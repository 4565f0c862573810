#include "actors/dht/announcer.hpp"

#include <cmath>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "model/weights/gguf_file.hpp"
#include "model/weights/weight_source.hpp"

namespace corolla {

std::string default_model_prefix(const WeightSource& source) {
  std::string name;
  if (auto gguf = source.gguf()) name = gguf->find_string("general.name").value_or("");
  if (name.empty()) {
    std::filesystem::path p(source.origin());
    if (p.filename().empty()) p = p.parent_path();
    name = std::filesystem::is_directory(p) ? p.filename().string() : p.stem().string();
  }
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') c = '-';
  return name.empty() ? "model" : name;
}


std::string group_key(const std::string& model_prefix, int64_t group) {
  return model_prefix + "." + std::to_string(group * kBlocksPerKey) + "-" +
         std::to_string((group + 1) * kBlocksPerKey - 1);
}

std::string block_key(const std::string& model_prefix, int64_t block) {
  return group_key(model_prefix, block / kBlocksPerKey);
}

int64_t group_count(int64_t total_blocks) { return (std::max<int64_t>(total_blocks, 0) + kBlocksPerKey - 1) / kBlocksPerKey; }

std::vector<dht_record> server_records(const std::string& model_prefix, const server_info& info) {
  if (info.address.empty()) throw std::invalid_argument("a server announces itself under its address, and it has none");
  if (info.first_block < 0 || info.first_block >= info.last_block)
    throw std::invalid_argument("the server's span " + std::to_string(info.first_block) + ".." +
                                std::to_string(info.last_block) + " is empty");
  const std::vector<char> bytes = encode(info);
  if (bytes.size() > kMaxDhtValueBytes)
    throw std::invalid_argument("the server's info takes " + std::to_string(bytes.size()) +
                                " bytes; DHT values are limited to " + std::to_string(kMaxDhtValueBytes));
  const std::string value(bytes.begin(), bytes.end());
  std::vector<dht_record> out;
  for (int64_t g = info.first_block / kBlocksPerKey; g <= (info.last_block - 1) / kBlocksPerKey; ++g)
    out.push_back({group_key(model_prefix, g), info.address, value});
  return out;
}

std::vector<dht_put> announce_puts(const std::string& model_prefix, const server_info& info, DhtTime expiration) {
  std::vector<dht_put> out;
  for (auto& r : server_records(model_prefix, info))
    out.push_back({std::move(r.key), std::move(r.subkey), std::move(r.value), expiration});
  return out;
}

void keep_standing(std::map<std::string, announced_server>& by_address, announced_server s) {
  auto [it, fresh] = by_address.try_emplace(s.info.address, s);
  if (fresh) return;
  const bool newer = s.expiration > it->second.expiration ||
                     (s.expiration == it->second.expiration && it->second.info.state == "offline");
  if (newer) it->second = std::move(s);
}

std::string server_info_problem(const server_info& i) {
  if (!(0 <= i.first_block && i.first_block < i.last_block && i.last_block <= i.total_blocks &&
        i.total_blocks <= kMaxAnnouncedBlocks))
    return "blocks " + std::to_string(i.first_block) + ":" + std::to_string(i.last_block) + " of " +
           std::to_string(i.total_blocks) + " are not a span of a model";
  if (i.state != "joining" && i.state != "online" && i.state != "offline") return "state '" + i.state + "'";
  for (double v : {i.throughput, i.inference_rps, i.forward_rps, i.network_rps})
    if (!std::isfinite(v) || v < 0) return "a rate of " + std::to_string(v);
  if (i.cache_tokens_left < 0 || i.sessions < 0 || i.hidden_size < 0) return "a negative count";
  for (const auto& [address, ms] : i.pings)
    if (!std::isfinite(ms) || ms < 0) return "a ping of " + std::to_string(ms) + " ms to " + address;
  return {};
}

std::vector<announced_server> parse_servers(const DhtEntries& entries, std::vector<std::string>* problems) {
  std::vector<announced_server> out;
  for (const auto& [subkey, v] : entries) {
    server_info info;
    decode(std::make_shared<std::vector<char>>(v.value.begin(), v.value.end()), info);
    std::string problem;
    if (!info.wire_error.empty()) problem = info.wire_error;
    else if (info.address != subkey) problem = "it names address '" + info.address + "'";
    else problem = server_info_problem(info);
    if (!problem.empty()) {
      if (problems) problems->push_back("the entry of '" + subkey + "' is not a server's info: " + problem);
      continue;
    }
    out.push_back({std::move(info), v.expiration});
  }
  return out;
}

}  // namespace corolla
