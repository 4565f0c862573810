// What a server announces in the DHT, and how readers parse it back (plain functions; the server's announcer
// actor and the client's swarm view call them):
//   key     "{model_prefix}.{32g}-{32g+31}"  one per group of kBlocksPerKey blocks the server's span touches,
//                                            e.g. "llama-2-70b.32-63" for a server of blocks 40..52
//   subkey  the server's address          so each server holds its own entry under every group it serves
//   value   encode(server_info)           Cap'n Proto bytes (schema/server.capnp), at most 64 KiB; the span is in it
// Entries expire unless the server announces again. Groups rather than one key per block because every key costs
// a DHT lookup per announcement and per read: a server of 12 blocks announces 1 or 2 records instead of 12, and
// reading an 80-block swarm takes 3 lookups instead of 80. A reader of one block reads its group's key and keeps
// the servers whose span holds the block. Why 32: a key's replies grow with the servers touching its group
// (about servers x (32 + span) / blocks), but a lookup costs ~10 RPCs whatever it returns; in a 1,000-server
// simulation of 10 models of 120 blocks, 8 -> 16 -> 32 blocks per key cut a join phase's events 4.68 -> 3.34 ->
// 2.57 M and its DHT bytes 843 -> 628 -> 534 MB. A key holds at most max_subkeys (1024) servers: about 2,800
// servers of 12 blocks on one 120-block model, far beyond any public swarm.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "actors/dht/dht_api.hpp"
#include "actors/protocol/messages.hpp"

namespace corolla {

// The swarm id servers and clients agree on when none is given: the model's name (GGUF general.name, else the
// directory or file name), with every character outside [A-Za-z0-9_-] replaced by '-' (a '.' would clash
// with the block separator). Two swarms on one DHT never mix as long as their prefixes differ.
std::string default_model_prefix(const class WeightSource& source);

// The key listing the swarms served (subkey = model prefix, value = its block count as text).
inline constexpr const char* kModelsKey = "_corolla.models";

inline constexpr int64_t kBlocksPerKey = 32;

// The key of blocks [kBlocksPerKey * group, kBlocksPerKey * (group + 1)): "{model_prefix}.{first}-{last}".
std::string group_key(const std::string& model_prefix, int64_t group);
// The key a block's servers are listed under (its group's).
std::string block_key(const std::string& model_prefix, int64_t block);
// How many keys list the servers of a model of `total_blocks` blocks.
int64_t group_count(int64_t total_blocks);
// Whether the server's span holds `block`.
inline bool serves_block(const server_info& info, int64_t block) {
  return info.first_block <= block && block < info.last_block;
}

struct dht_record {
  std::string key, subkey, value;
};

// One record per group of blocks the server's span [first_block, last_block). Throws std::invalid_argument when the info
// has no address or an empty span, or its encoding is over the DHT's 64 KiB value limit.
std::vector<dht_record> server_records(const std::string& model_prefix, const server_info& info);
// The same as dht_put messages, expiring at `expiration`.
std::vector<dht_put> announce_puts(const std::string& model_prefix, const server_info& info, DhtTime expiration);

struct announced_server {
  server_info info;
  DhtTime expiration{};
};

// Adds `s` to `by_address` (address -> the entry standing for that server) unless the entry there stands: a
// server is listed under several keys, and after moving also (as "offline") under its old ones until they expire;
// the entry announced last (latest expiration; on a tie, not "offline") stands for it.
void keep_standing(std::map<std::string, announced_server>& by_address, announced_server s);

// What is wrong with a server's info as a stranger may have written it (records are not signed yet), or "": a span
// outside 0 <= first < last <= total <= kMaxAnnouncedBlocks, a state other than joining/online/offline, or a
// rate, count or ping that is negative or not finite. Routing computes with these numbers (a graph node per
// block, costs from the rates): the client reads only infos that pass.
inline constexpr int64_t kMaxAnnouncedBlocks = 1 << 16;
std::string server_info_problem(const server_info& info);

// The servers in the entries of one key (dht_get_reply::entries), in subkey order. An entry that does not
// decode, whose address is not its subkey, or whose info has a problem, is left out and described in `problems`
// (when given).
std::vector<announced_server> parse_servers(const DhtEntries& entries, std::vector<std::string>* problems = nullptr);

}  // namespace corolla
