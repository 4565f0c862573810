#include "apps/corolla/node_flags.hpp"

#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "actors/config/config_file.hpp"
#include "kernels/dtype.hpp"

namespace corolla::cli {
namespace {

// A CLI11 validator from one of the value checks shared with the files (actors/config/config_file.hpp).
CLI::Validator checked(std::optional<std::string> (*check)(const std::string&), const std::string& name) {
  return CLI::Validator(
      [check](std::string& value) {
        auto problem = check(value);
        return problem ? *problem : std::string();
      },
      "", name);
}

std::optional<std::string> check_block_range(const std::string& value) {
  int64_t first = 0, last = 0;
  return parse_block_range(value, first, last);
}

template <class T>
std::string dflt(const T& value) {
  std::ostringstream os;
  os << " (default " << value << ")";
  return os.str();
}

// Where a resolved configuration came from, for messages.
std::string source_of(const std::string& config) {
  return config.empty() ? std::string("command line") : config + " with the command-line flags";
}

}  // namespace

CLI::Validator multiaddr_as_host_port() {
  return CLI::Validator(
      [](std::string& value) {
        if (auto host_port = host_port_of_multiaddr(value)) {
          std::cerr << "note: --initial_peers " << value << " taken as " << *host_port
                    << " (Corolla's peers are HOST:PORT; a /p2p/ id is not used)\n";
          value = *host_port;
        }
        return std::string();
      },
      "", "");
}

void add_node_flags(CLI::App& cmd, NodeFlags& f) {
  const NodeConfig d;
  f.cmd = &cmd;
  cmd.add_option("--config", f.config,
                 "TOML file with the node's settings (config/node.toml documents them); "
                 "flags given here override it")
      ->type_name("FILE");
  cmd.add_option("model,--model", f.model,
                 "Model directory (config.json + safetensors), .gguf file, or 'demo' (also as the first argument)")
      ->type_name("PATH");
  auto* num = cmd.add_option("--num_blocks", f.num_blocks,
                             "Serve this many blocks, chosen where the swarm needs them (default: as many as fit)")
                  ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  auto* range = cmd.add_option("--block_indices", f.block_indices, "Serve exactly blocks FIRST:LAST (e.g. 10:20)")
                    ->check(checked(check_block_range, "FIRST:LAST"))
                    ->type_name("FIRST:LAST");
  num->excludes(range);
  cmd.add_option("--host", f.host, "Address to listen on" + dflt(d.host));
  cmd.add_option("--port", f.port, "Port to listen on; 0 picks a free one" + dflt(d.port))->check(CLI::Range(0, 65535));
  auto* peers = cmd.add_option("--initial_peers", f.initial_peers,
                               "HOST:PORT of nodes already in the swarm (several, separated by commas or spaces; "
                               "Petals' /ip4/HOST/tcp/PORT/p2p/ID taken as HOST:PORT)")
                    ->delimiter(',')
                    ->transform(multiaddr_as_host_port())
                    ->check(checked(check_peer_address, "HOST:PORT"))
                    ->type_name("HOST:PORT");
  auto* fresh = cmd.add_flag("--new_swarm", f.new_swarm, "Start a new swarm (no initial peers)");
  fresh->excludes(peers);
  cmd.add_option("--public_name", f.public_name, "Name shown to other peers; also names the default data directory");
  cmd.add_option("--swarm_id", f.swarm_id, "The swarm's DHT key prefix (default: derived from the model's name)")
      ->check(checked(check_swarm_id, "ID"));
  cmd.add_option("--dtype,--torch_dtype", f.dtype,
                 "Serving dtype of weights: auto, " + weight_dtype_list() +
                     " (torch's float16, bfloat16, float32 "
                     "too)" +
                     dflt(d.dtype))
      ->transform(CLI::Transformer(std::map<std::string, std::string>{
          {"float16", "f16"}, {"half", "f16"}, {"bfloat16", "bf16"}, {"float32", "f32"}, {"float", "f32"}}))
      ->check(checked(check_dtype, "DTYPE"));
  cmd.add_option("--device", f.device, "cpu, cuda or cuda:N" + dflt(d.device))->check(checked(check_device, "DEVICE"));
  cmd.add_option("--data_dir", f.data_dir,
                 "Directory of the node's database (default ${COROLLA_CACHE:-~/.cache/corolla}/node-PUBLIC_NAME, "
                 "or the next free node-PUBLIC_NAME-N when another node holds it)")
      ->type_name("DIR");
  cmd.add_option("--cache_tokens,--attn_cache_tokens", f.cache_tokens,
                 "KV-cache tokens per hosted block" + dflt(d.cache_tokens))
      ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  cmd.add_option("--kv_cache_dtype", f.kv_cache_dtype,
                 "KV caches' dtype: f32, or f16 (half the memory, values rounded to 11 bits; CPU backend)" +
                     dflt(d.kv_cache_dtype))
      ->check(checked(check_kv_cache_dtype, "DTYPE"));
  cmd.add_option("--threads", f.threads, "CPU threads; 0 = all cores" + dflt(d.threads))->check(CLI::Range(0, 4096));
  cmd.add_option("--step_timeout", f.step_timeout,
                 "Seconds to wait for the next step of an inference session" + dflt(d.step_timeout_s))
      ->check(CLI::PositiveNumber);
  cmd.add_option("--session_timeout", f.session_timeout,
                 "Longest life of an inference session, in seconds" + dflt(d.session_timeout_s))
      ->check(CLI::PositiveNumber);
  cmd.add_option("--max_sessions", f.max_sessions, "Concurrent inference sessions" + dflt(d.max_sessions))
      ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  cmd.add_option("--max_batch_tokens", f.max_batch_tokens,
                 "Tokens of concurrent sessions' steps run through the blocks as one batch (a longer prompt is "
                 "prefilled in chunks); 0 runs each step alone" +
                     dflt(d.max_batch_tokens))
      ->check(CLI::Range(int64_t{0}, kMaxBatchTokens));
  cmd.add_option("--max_sessions_per_peer", f.max_sessions_per_peer,
                 "Sessions one client or server process may hold here (default: half of --max_sessions)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  cmd.add_option("--cache_tokens_per_peer", f.cache_tokens_per_peer,
                 "KV-cache tokens per hosted block one client or server process may reserve here (default: half of "
                 "--cache_tokens)")
      ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  cmd.add_option("--peer_requests_per_second", f.peer_requests_per_second,
                 "Requests per second one client or server process may send here (a one-second burst)" +
                     dflt(d.peer_requests_per_second))
      ->check(CLI::PositiveNumber);
  cmd.add_option("--inject_wrong_outputs", f.inject_wrong_outputs,
                 "Chaos testing: make this fraction of step outputs wrong, for clients' spot checks to catch")
      ->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--inject_step_errors_after", f.inject_step_errors_after,
                 "Chaos testing: answer every step after the first N with an error (-1: never)")
      ->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()));
  cmd.add_option("--throughput", f.throughput,
                 "auto (measure once, then reuse), eval (measure again), or requests per second" + dflt(d.throughput))
      ->check(checked(check_throughput, "THROUGHPUT"));
  cmd.add_option("--update_period", f.update_period,
                 "Seconds between announcements of the node's blocks to the DHT" + dflt(d.update_period_s))
      ->check(CLI::PositiveNumber);
  cmd.add_option("--adapters", f.adapters,
                 "PEFT LoRA adapter directories to load; requests name one by its directory's name")
      ->type_name("DIR");
  cmd.add_option("--balance_quality", f.balance_quality,
                 "With --num_blocks: move to other blocks when the swarm's weakest block is below this fraction of "
                 "what moving could reach; 0 never moves" +
                     dflt(d.balance_quality))
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--mean_balance_check_period", f.mean_balance_check_period,
                 "With --num_blocks: mean seconds between balance checks (each waits a random time in 0..2x this)" +
                     dflt(d.mean_balance_check_period_s))
      ->check(CLI::PositiveNumber);
  cmd.add_option("--max_peer_connections", f.max_peer_connections,
                 "Open peer connections, both directions" + dflt(d.max_peer_connections))
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}));
  cmd.add_option("--max_peer_connections_per_address", f.max_peer_connections_per_address,
                 "Peer connections from one IP address" + dflt(d.max_peer_connections_per_address))
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}));
  cmd.add_option("--peer_connections_per_second", f.peer_connections_per_second,
                 "New peer connections accepted per second from one IP address" + dflt(d.peer_connections_per_second))
      ->check(CLI::PositiveNumber);
  cmd.add_option("--max_peer_frame_mb", f.max_peer_frame_mb,
                 "Largest message a peer may send, in MiB" + dflt(d.max_peer_frame_mb))
      ->check(CLI::Range(int64_t{1}, int64_t{4095}));
  cmd.add_option("--announce_address", f.announce_address,
                 "HOST:PORT peers dial to reach this node, when not --host and the port listened on (behind NAT, "
                 "or listening on 0.0.0.0)")
      ->check(checked(check_peer_address, "HOST:PORT"))
      ->type_name("HOST:PORT");
  add_credential_flags(cmd, f.credentials);
  // Petals' run_server flags, so that its command lines are understood (resolve_node_config says what they mean).
  cmd.add_option("--quant_type", f.quant_type, "Petals' weight quantization: int8 serves q8_0 (as --dtype q8_0)")
      ->check(CLI::IsMember({"none", "int8", "nf4"}));
  cmd.add_option("--max_disk_space", f.max_disk_space, "Petals' download cache limit (no meaning here)");
  cmd.add_option("--identity_path", f.identity_path, "Petals' identity file (no meaning here: see --data_dir)");
}

void add_credential_flags(CLI::App& cmd, SwarmCredentials& f) {
  cmd.add_flag("--tls", f.tls, "Encrypt every peer link with TLS (all nodes of the swarm must)");
  cmd.add_option("--swarm_authority", f.authority,
                 "A private swarm's authority certificate (PEM; `corolla keys authority` writes it): only its members "
                 "connect, over mutual TLS")
      ->type_name("FILE");
  cmd.add_option("--certificate", f.certificate,
                 "This node's certificate, issued by the swarm's authority "
                 "(`corolla keys issue`)")
      ->type_name("FILE");
  cmd.add_option("--private_key", f.private_key, "The key of --certificate")->type_name("FILE");
}

void apply_credential_flags(const CLI::App& cmd, const SwarmCredentials& f, SwarmCredentials& c) {
  if (cmd.count("--tls")) c.tls = f.tls;
  if (cmd.count("--swarm_authority")) c.authority = f.authority;
  if (cmd.count("--certificate")) c.certificate = f.certificate;
  if (cmd.count("--private_key")) c.private_key = f.private_key;
}

SwarmCredentials credentials_from_flags(const CLI::App& cmd, const SwarmCredentials& f) {
  SwarmCredentials c;
  apply_credential_flags(cmd, f, c);
  if (auto p = check_credentials(c)) throw ConfigError("--" + p->key + " " + p->problem);
  return c;
}

NodeConfig resolve_node_config(const NodeFlags& f) {
  NodeConfig c = f.config.empty() ? NodeConfig{} : load_node_config(f.config);
  auto given = [&](const char* name) { return f.cmd && f.cmd->count(name) > 0; };
  if (given("--model")) c.model = f.model;
  if (given("--num_blocks")) {
    c.num_blocks = f.num_blocks;
    c.block_indices.reset();
  }
  if (given("--block_indices")) {
    int64_t first = 0, last = 0;
    if (auto problem = parse_block_range(f.block_indices, first, last))
      throw ConfigError("--block_indices: " + *problem);
    c.block_indices = BlockRange{static_cast<int>(first), static_cast<int>(last)};
    c.num_blocks.reset();
  }
  if (given("--host")) c.host = f.host;
  if (given("--port")) c.port = static_cast<uint16_t>(f.port);
  if (given("--initial_peers")) {
    c.initial_peers = f.initial_peers;
    c.new_swarm = false;
  }
  if (given("--new_swarm")) {
    c.new_swarm = f.new_swarm;
    if (c.new_swarm) c.initial_peers.clear();
  }
  if (given("--public_name")) c.public_name = f.public_name;
  if (given("--swarm_id")) c.swarm_id = f.swarm_id;
  if (given("--dtype")) c.dtype = f.dtype;
  if (given("--device")) c.device = f.device;
  if (given("--data_dir")) c.data_dir = f.data_dir;
  if (given("--cache_tokens")) c.cache_tokens = f.cache_tokens;
  if (given("--kv_cache_dtype")) c.kv_cache_dtype = f.kv_cache_dtype;
  if (given("--threads")) c.threads = f.threads;
  if (given("--step_timeout")) c.step_timeout_s = f.step_timeout;
  if (given("--session_timeout")) c.session_timeout_s = f.session_timeout;
  if (given("--max_sessions")) c.max_sessions = f.max_sessions;
  if (given("--max_batch_tokens")) c.max_batch_tokens = f.max_batch_tokens;
  if (given("--max_sessions_per_peer")) c.max_sessions_per_peer = f.max_sessions_per_peer;
  if (given("--cache_tokens_per_peer")) c.cache_tokens_per_peer = f.cache_tokens_per_peer;
  if (given("--peer_requests_per_second")) c.peer_requests_per_second = f.peer_requests_per_second;
  if (given("--inject_step_errors_after")) c.inject_step_errors_after = f.inject_step_errors_after;
  if (given("--inject_wrong_outputs")) c.inject_wrong_outputs = f.inject_wrong_outputs;
  if (given("--throughput")) c.throughput = f.throughput;
  if (given("--update_period")) c.update_period_s = f.update_period;
  if (given("--adapters")) c.adapters = f.adapters;
  if (given("--balance_quality")) c.balance_quality = f.balance_quality;
  if (given("--mean_balance_check_period")) c.mean_balance_check_period_s = f.mean_balance_check_period;
  if (given("--max_peer_connections")) c.max_peer_connections = f.max_peer_connections;
  if (given("--max_peer_connections_per_address"))
    c.max_peer_connections_per_address = f.max_peer_connections_per_address;
  if (given("--peer_connections_per_second")) c.peer_connections_per_second = f.peer_connections_per_second;
  if (given("--max_peer_frame_mb")) c.max_peer_frame_mb = f.max_peer_frame_mb;
  if (given("--announce_address")) c.announce_address = f.announce_address;
  if (f.cmd) apply_credential_flags(*f.cmd, f.credentials, c.credentials);
  if (given("--quant_type") && f.quant_type != "none") {
    if (f.quant_type == "nf4")
      throw ConfigError("--quant_type nf4: Corolla has no NF4 weights; for 4-bit weights use --dtype q4_K (or q4_0)");
    if (given("--dtype")) throw ConfigError("--quant_type int8 and --dtype: give one of them (int8 is --dtype q8_0)");
    c.dtype = "q8_0";
  }
  if (given("--max_disk_space"))
    throw ConfigError(
        "--max_disk_space has no meaning here: Corolla reads model files where they are and keeps only "
        "converted weights, in the node's database (--data_dir)");
  if (given("--identity_path"))
    throw ConfigError(
        "--identity_path has no meaning here: a node's identity is kept in its database; the same "
        "--data_dir (or --public_name) keeps it across restarts");

  const std::string source = source_of(f.config);
  if (c.model.empty()) throw ConfigError(source + ": no model: pass --model, or set 'model' in the --config file");
  validate(c, source);
  return c;
}

void add_client_flags(CLI::App& cmd, ClientFlags& f) {
  const ClientConfig d;
  f.cmd = &cmd;
  cmd.add_option("--config", f.config,
                 "TOML file with the client's settings (config/client.toml documents them); "
                 "flags given here override it")
      ->type_name("FILE");
  cmd.add_option("--model", f.model, "Model directory (config.json + safetensors), .gguf file, or 'demo'")
      ->type_name("PATH");
  cmd.add_option("--initial_peers", f.initial_peers,
                 "HOST:PORT of nodes in the swarm (several, separated by commas or spaces)")
      ->delimiter(',')
      ->transform(multiaddr_as_host_port())
      ->check(checked(check_peer_address, "HOST:PORT"))
      ->type_name("HOST:PORT");
  cmd.add_option("--mode", f.mode, "push (servers forward to the next one) or relay (the client relays)" + dflt(d.mode))
      ->check(CLI::IsMember({"push", "relay"}));
  cmd.add_option("--max_length", f.max_length, "Longest session, prompt and generated tokens" + dflt(d.max_length))
      ->check(CLI::Range(int64_t{1}, int64_t{std::numeric_limits<int32_t>::max()}));
  cmd.add_option("--request_timeout", f.request_timeout,
                 "Seconds to wait for a server's reply before trying another" + dflt(d.request_timeout_s))
      ->check(CLI::PositiveNumber);
}

ClientConfig resolve_client_config(const ClientFlags& f) {
  ClientConfig c = f.config.empty() ? ClientConfig{} : load_client_config(f.config);
  auto given = [&](const char* name) { return f.cmd && f.cmd->count(name) > 0; };
  if (given("--model")) c.model = f.model;
  if (given("--initial_peers")) c.initial_peers = f.initial_peers;
  if (given("--mode")) c.mode = f.mode;
  if (given("--max_length")) c.max_length = f.max_length;
  if (given("--request_timeout")) c.request_timeout_s = f.request_timeout;

  const std::string source = source_of(f.config);
  if (c.model.empty()) throw ConfigError(source + ": no model: pass --model, or set 'model' in the --config file");
  if (c.initial_peers.empty())
    throw ConfigError(source +
                      ": no initial peers: pass --initial_peers HOST:PORT, or set 'initial_peers' in the "
                      "--config file");
  validate(c, source);
  return c;
}

}  // namespace corolla::cli
