// What a server announces in the DHT, and how readers parse it back (plain functions; the server's announcer
// actor and the client's swarm view call them):
//   key     "{model_prefix}.{32g}-{32g+31}"  one per group of kBlocksPerKey blocks the server's span touches,
//                                            e.g. "llama-2-70b.32-63" for a server of blocks 40..52
//   subkey  the server's public key (hex) so each server holds its own entry under every group it serves
//   value   a signed record (signed_record.hpp) of encode(server_info): Cap'n Proto bytes (schema/server.capnp),
//           at most 64 KiB; the span and the address are in it, and `owner` is the signer
// Entries expire unless the server announces again. Groups rather than one key per block because every key costs
// a DHT lookup per announcement and per read: a server of 12 blocks announces 1 or 2 records instead of 12, and
// reading an 80-block swarm takes 3 lookups instead of 80. A reader of one block reads its group's key and keeps
// the servers whose span holds the block. Why 32: a key's replies grow with the servers touching its group
// (about servers x (32 + span) / blocks), but a lookup costs ~10 RPCs whatever it returns, so fewer, larger keys
// cost a joining swarm fewer events and fewer bytes (8, 16 and 32 blocks per key compared: docs/PERFORMANCE.md,
// "Simulator"). A key holds at most max_subkeys (1024) servers: about 2,800 servers of 12 blocks on one 120-block
// model, far beyond any public swarm.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "actors/protocol/unix_clock.hpp"
#include "actors/dht/dht_api.hpp"
#include "actors/protocol/messages.hpp"
#include "actors/trust/ed25519.hpp"

namespace corolla {

// The swarm id servers and clients agree on when none is given: the model's name (GGUF general.name, else the
// directory or file name), with every character outside [A-Za-z0-9_-] replaced by '-' (a '.' would clash
// with the block separator). Two swarms on one DHT never mix as long as their prefixes differ.
std::string default_model_prefix(const class WeightSource& source);

// The key listing the swarms served (subkey = "<model prefix>@<server's key>", payload = its block count as text).
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

// One record per group of blocks the server's span [first_block, last_block), signed by `signer` (info.owner
// becomes its public key) and expiring at `expiration` (an actor-clock time; the signature carries it as Unix
// time, as the signer's wall clock reads it). Throws std::invalid_argument when the info has no address or an empty
// span, or its record is over the DHT's 64 KiB value limit.
std::vector<dht_put> announce_puts(const SigningKey& signer, const std::string& model_prefix, server_info info,
                                   DhtTime expiration, const wall_clock& wall = {});
// The models list's entry for one swarm, from one of its servers.
dht_put models_put(const SigningKey& signer, const std::string& model_prefix, int64_t total_blocks, DhtTime expiration,
                   const wall_clock& wall = {});

struct announced_server {
  server_info info;
  DhtTime expiration{};
};

// Adds `s` to `by_address` (address -> the entry standing for that server) unless the entry there stands: a
// server is listed under several keys, and after moving also (as "offline") under its old ones until they expire;
// the entry announced last (latest expiration; on a tie, not "offline") stands for it. Between the entries of two
// owners claiming one address, one that is not "offline" stands.
void keep_standing(std::map<std::string, announced_server>& by_address, announced_server s);

// What is wrong with a server's info as a stranger may have written it (records are not signed yet), or "": a span
// outside 0 <= first < last <= total <= kMaxAnnouncedBlocks, a state other than joining/online/offline, or a
// rate, count or ping that is negative or not finite. Routing computes with these numbers (a graph node per
// block, costs from the rates): the client reads only infos that pass.
inline constexpr int64_t kMaxAnnouncedBlocks = 1 << 16;
std::string server_info_problem(const server_info& info);

// The servers in the entries of `key` (dht_get_reply::entries) at actor-clock time `now`, in subkey order. An
// entry whose record does not check (signed by the owner its subkey names, live by the entry's expiration, which the
// DHT node that read it cut to the signed expiry), whose payload does not decode, or whose info has a problem, is left
// out and described in `problems` (when given). Each info's `owner` is the record's signer, whatever the payload says.
std::vector<announced_server> parse_servers(const std::string& key, const DhtEntries& entries, DhtTime now,
                                            std::vector<std::string>* problems = nullptr);

}  // namespace corolla
