#include "actors/dht/announcer.hpp"

#include <cmath>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "actors/dht/signed_record.hpp"
#include "actors/protocol/block_span.hpp"
#include "actors/protocol/unix_clock.hpp"
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

int64_t group_count(int64_t total_blocks) {
  return (std::max<int64_t>(total_blocks, 0) + kBlocksPerKey - 1) / kBlocksPerKey;
}

std::vector<dht_put> announce_puts(const SigningKey& signer, const std::string& model_prefix, server_info info,
                                   DhtTime expiration, const wall_clock& wall) {
  if (info.address.empty()) throw std::invalid_argument("a server announces itself under its address, and it has none");
  if (info.first_block < 0 || info.first_block >= info.last_block)
    throw std::invalid_argument("the server's span " + block_span(info.first_block, info.last_block) + " is empty");
  info.owner = to_hex(signer.public_key());
  const std::vector<char> bytes = encode(info);
  const std::string payload(bytes.begin(), bytes.end());
  const std::string subkey = owned_subkey(signer.public_key());
  std::vector<dht_put> out;
  for (int64_t g = info.first_block / kBlocksPerKey; g <= (info.last_block - 1) / kBlocksPerKey; ++g) {
    std::string key = group_key(model_prefix, g);
    std::string value = sign_record(signer, key_id(key), subkey, payload, wall.unix_ms_at(expiration));
    if (value.size() > kMaxDhtValueBytes)
      throw std::invalid_argument("the server's record takes " + std::to_string(value.size()) +
                                  " bytes; DHT values are limited to " + std::to_string(kMaxDhtValueBytes));
    out.push_back({std::move(key), subkey, std::move(value), expiration});
  }
  return out;
}

dht_put models_put(const SigningKey& signer, const std::string& model_prefix, int64_t total_blocks, DhtTime expiration,
                   const wall_clock& wall) {
  const std::string subkey = owned_subkey(signer.public_key(), model_prefix);
  return {kModelsKey, subkey,
          sign_record(signer, key_id(kModelsKey), subkey, std::to_string(total_blocks), wall.unix_ms_at(expiration)),
          expiration};
}

void keep_standing(std::map<std::string, announced_server>& by_address, announced_server s) {
  auto [it, fresh] = by_address.try_emplace(s.info.address, s);
  if (fresh) return;
  auto& held = it->second;
  if (s.info.owner != held.info.owner) {
    // Two keys claim one address; only a connection tells which holds it. An "offline" claim does not hide the
    // other one (it would let anyone take any server out of the readers' view).
    const bool s_offline = s.info.state == "offline", held_offline = held.info.state == "offline";
    if (s_offline != held_offline) {
      if (held_offline) held = std::move(s);
      return;
    }
  }
  const bool newer =
      s.expiration > held.expiration || (s.expiration == held.expiration && held.info.state == "offline");
  if (newer) held = std::move(s);
}

std::string server_info_problem(const server_info& i) {
  if (!(0 <= i.first_block && i.first_block < i.last_block && i.last_block <= i.total_blocks &&
        i.total_blocks <= kMaxAnnouncedBlocks))
    return "blocks " + std::to_string(i.first_block) + ":" + std::to_string(i.last_block) + " of " +
           std::to_string(i.total_blocks) + " are not a span of a model";
  if (i.state != "joining" && i.state != "online" && i.state != "offline") return "state '" + i.state + "'";
  if (!i.kv_dtype.empty() && i.kv_dtype != "f32" && i.kv_dtype != "f16") return "a KV cache dtype '" + i.kv_dtype + "'";
  for (double v : {i.throughput, i.inference_rps, i.forward_rps, i.network_rps})
    if (!std::isfinite(v) || v < 0) return "a rate of " + std::to_string(v);
  if (i.cache_tokens_left < 0 || i.sessions < 0 || i.hidden_size < 0) return "a negative count";
  for (const auto& [address, ms] : i.pings)
    if (!std::isfinite(ms) || ms < 0) return "a ping of " + std::to_string(ms) + " ms to " + address;
  return {};
}

std::vector<announced_server> parse_servers(const std::string& key, const DhtEntries& entries, DhtTime now,
                                            std::vector<std::string>* problems) {
  std::vector<announced_server> out;
  const NodeId id = key_id(key);
  for (const auto& [subkey, v] : entries) {
    server_info info;
    // The signature here; the life as the DHT node that read the entry gave it (record_expiration: no longer than
    // the signed expiry, in that node's clock).
    checked_record record = check_record_signature(id, subkey, v.value);
    std::string problem = record.problem.empty() && v.expiration <= now ? "it has expired" : record.problem;
    if (problem.empty()) {
      decode(std::make_shared<std::vector<char>>(record.payload.begin(), record.payload.end()), info);
      info.owner = to_hex(record.owner);
      if (!info.wire_error.empty())
        problem = info.wire_error;
      else if (!subkey_name(subkey).empty())
        problem = "its subkey names more than its owner";
      else
        problem = server_info_problem(info);
    }
    if (!problem.empty()) {
      if (problems) problems->push_back("the entry of '" + subkey + "' is not a server's info: " + problem);
      continue;
    }
    out.push_back({std::move(info), v.expiration});
  }
  return out;
}

}  // namespace corolla
