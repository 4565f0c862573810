#define BOOST_TEST_MODULE node_config
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <unistd.h>

#include "actors/client/client_config.hpp"
#include "actors/config/config_file.hpp"
#include "actors/client/swarm_config.hpp"
#include "actors/server/node_config.hpp"
#include "apps/corolla/node_flags.hpp"

using namespace corolla;
namespace fs = std::filesystem;

namespace {

// A scratch directory for the files of one test case.
struct Files {
  fs::path dir;
  Files() {
    dir = fs::temp_directory_path() / ("corolla_test_node_config_" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  ~Files() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string path = (dir / name).string();
    std::ofstream(path) << text;
    return path;
  }
};

// Runs `fn`, which must throw ConfigError, and returns the message.
template <class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  BOOST_FAIL("no ConfigError thrown");
  return "";
}

void check_contains(const std::string& message, std::initializer_list<std::string> parts) {
  for (const auto& part : parts)
    BOOST_TEST(message.find(part) != std::string::npos, "'" << part << "' is not in: " << message);
}

std::string node_error(const Files& f, const std::string& text) {
  const std::string path = f.write("node.toml", text);
  return error_of([&] { load_node_config(path); });
}

std::string config_dir() { return std::string(COROLLA_CONFIG_DIR); }

}  // namespace

// ---- Node files

BOOST_FIXTURE_TEST_CASE(a_good_node_file_gives_its_values, Files) {
  const std::string path = write("node.toml", R"(# a node
model = "/models/llama"
block_indices = "10:20"
host = "0.0.0.0"
port = 31337
initial_peers = ["10.0.0.1:31331", "[::1]:31332", "peer.example.org:9000"]
public_name = "alice"
dtype = "q8_0"
device = "cuda:1"
data_dir = "/var/lib/corolla"
cache_tokens = 4096
kv_cache_dtype = "f16"
new_swarm = false
threads = 6
step_timeout_s = 12.5
session_timeout_s = 600
max_sessions = 8
throughput = 250.5
update_period_s = 15
balance_quality = 0.9
mean_balance_check_period_s = 30
)");
  const NodeConfig c = load_node_config(path);
  BOOST_TEST(c.model == "/models/llama");
  BOOST_TEST(!c.num_blocks);
  BOOST_TEST((c.block_indices == BlockRange{10, 20}));
  BOOST_TEST(c.host == "0.0.0.0");
  BOOST_TEST(c.port == 31337);
  BOOST_TEST(c.initial_peers == (std::vector<std::string>{"10.0.0.1:31331", "[::1]:31332", "peer.example.org:9000"}),
             boost::test_tools::per_element());
  BOOST_TEST(c.public_name == "alice");
  BOOST_TEST(c.dtype == "q8_0");
  BOOST_TEST(c.device == "cuda:1");
  BOOST_TEST(c.data_dir == "/var/lib/corolla");
  BOOST_TEST(c.cache_tokens == 4096);
  BOOST_TEST(c.kv_cache_dtype == "f16");
  BOOST_TEST(!c.new_swarm);
  BOOST_TEST(c.threads == 6);
  BOOST_TEST(c.step_timeout_s == 12.5);
  BOOST_TEST(c.session_timeout_s == 600.0);
  BOOST_TEST(c.max_sessions == 8);
  BOOST_TEST(c.throughput == "250.5");
  BOOST_TEST(c.update_period_s == 15.0);
  BOOST_TEST(c.balance_quality == 0.9);
  BOOST_TEST(c.mean_balance_check_period_s == 30.0);
  validate(c, path);
}

BOOST_FIXTURE_TEST_CASE(absent_keys_keep_their_defaults, Files) {
  const NodeConfig c = load_node_config(write("node.toml", "model = \"demo\"\nnum_blocks = 4\n"));
  NodeConfig expected;
  expected.model = "demo";
  expected.num_blocks = 4;
  BOOST_TEST((c == expected));
  BOOST_TEST(expected.host == "127.0.0.1");
  BOOST_TEST(expected.port == 0);
  BOOST_TEST(expected.dtype == "auto");
  BOOST_TEST(expected.device == "cpu");
  BOOST_TEST(expected.cache_tokens == 8192);
  BOOST_TEST(expected.kv_cache_dtype == "f32");
  BOOST_TEST(expected.step_timeout_s == 30.0);
  BOOST_TEST(expected.session_timeout_s == 300.0);
  BOOST_TEST(expected.max_sessions == 64);
  BOOST_TEST(expected.throughput == "auto");
  BOOST_TEST(expected.update_period_s == 60.0);
  BOOST_TEST(expected.balance_quality == 0.75);
  BOOST_TEST(expected.mean_balance_check_period_s == 120.0);
  // An empty file is a good file too; only validate() asks for a model.
  const NodeConfig empty = load_node_config(write("empty.toml", ""));
  BOOST_TEST((empty == NodeConfig{}));
  check_contains(error_of([&] { validate(empty, "x.toml"); }), {"x.toml: 'model' is not set"});
}

BOOST_FIXTURE_TEST_CASE(throughput_takes_words_numbers_and_numeric_strings, Files) {
  BOOST_TEST(load_node_config(write("a.toml", "throughput = \"eval\"\n")).throughput == "eval");
  BOOST_TEST(load_node_config(write("b.toml", "throughput = 100\n")).throughput == "100");
  BOOST_TEST(load_node_config(write("c.toml", "throughput = \"99.5\"\n")).throughput == "99.5");
  check_contains(node_error(*this, "throughput = \"fast\"\n"), {"node.toml:1: 'throughput' must be", "\"fast\""});
  check_contains(node_error(*this, "throughput = -3\n"), {"node.toml:1: 'throughput' must be", "got -3"});
}

BOOST_FIXTURE_TEST_CASE(an_unknown_key_is_an_error_with_a_suggestion, Files) {
  const std::string path = (dir / "node.toml").string();
  BOOST_TEST(node_error(*this, "model = \"demo\"\n\nnum_block = 10\n") ==
             path + ":3: unknown key 'num_block' (did you mean 'num_blocks'?)");
  BOOST_TEST(node_error(*this, "public-name = \"x\"\n") ==
             path + ":1: unknown key 'public-name' (did you mean 'public_name'?)");
  BOOST_TEST(node_error(*this, "colour = \"blue\"\n") == path + ":1: unknown key 'colour'");
  // Every unknown key is reported, in file order.
  BOOST_TEST(node_error(*this, "zzz = 1\nport = 1\naaa = 2\n") ==
             path + ":1: unknown key 'zzz'\n" + path + ":3: unknown key 'aaa'");
  // Tables are keys too.
  BOOST_TEST(node_error(*this, "model = \"demo\"\n[server]\nport = 1\n") == path + ":2: unknown key 'server'");
}

// A file's problems come together, a line each in file order, whatever the order the keys are read in: values of
// the wrong type or range and unknown keys.
BOOST_FIXTURE_TEST_CASE(every_problem_of_a_file_is_reported_at_once, Files) {
  const std::string path = (dir / "node.toml").string();
  BOOST_TEST(node_error(*this, "model = \"demo\"\nport = \"abc\"\nnum_block = 3\nthreads = -5\ncache_tokens = 1.5\n") ==
             path + ":2: 'port' must be an integer in 0..65535, got \"abc\"\n" + path +
                 ":3: unknown key 'num_block' (did you mean 'num_blocks'?)\n" + path +
                 ":4: 'threads' must be an integer in 0..4096, got -5\n" + path +
                 ":5: 'cache_tokens' must be an integer >= 1, got 1.5");
  // The checks of values read well (validate) report every problem too.
  const std::string values =
      write("values.toml", "model = \"demo\"\nupdate_period_s = 4000\ninject_wrong_outputs = 2.0\n");
  check_contains(error_of([&] { validate(load_node_config(values), values); }),
                 {"'inject_wrong_outputs' must be a number in 0..1", "\n", "'update_period_s' must be at most 1800"});
  // A rule that stops the reading comes after the problems found before it.
  check_contains(node_error(*this, "port = \"abc\"\nannounce_address = \"nowhere\"\n"),
                 {":1: 'port' must be an integer", "\n", ":2: 'announce_address' must hold"});
}

BOOST_FIXTURE_TEST_CASE(a_value_of_the_wrong_type_is_an_error, Files) {
  const std::string path = (dir / "node.toml").string();
  BOOST_TEST(node_error(*this, "model = \"demo\"\n\nport = \"abc\"\n") ==
             path + ":3: 'port' must be an integer in 0..65535, got \"abc\"");
  BOOST_TEST(node_error(*this, "model = 3\n") == path + ":1: 'model' must be a string, got 3");
  BOOST_TEST(node_error(*this, "new_swarm = \"yes\"\n") == path + ":1: 'new_swarm' must be true or false, got \"yes\"");
  BOOST_TEST(node_error(*this, "initial_peers = \"a:1\"\n") ==
             path + ":1: 'initial_peers' must be an array of strings, got \"a:1\"");
  BOOST_TEST(node_error(*this, "step_timeout_s = \"30\"\n") ==
             path + ":1: 'step_timeout_s' must be a number > 0, got \"30\"");
  BOOST_TEST(node_error(*this, "cache_tokens = 1.5\n") == path + ":1: 'cache_tokens' must be an integer >= 1, got 1.5");
  BOOST_TEST(node_error(*this, "kv_cache_dtype = \"bf16\"\n") ==
             path + ":1: 'kv_cache_dtype' must be f32 or f16, got \"bf16\"");
  BOOST_TEST(node_error(*this, "num_blocks = [1, 2]\n") ==
             path + ":1: 'num_blocks' must be an integer in 1..2147483647, got [ 1, 2 ]");
  BOOST_TEST(node_error(*this, "host = {}\n") == path + ":1: 'host' must be a string, got a table");
}

BOOST_FIXTURE_TEST_CASE(out_of_range_values_are_errors, Files) {
  const std::string path = (dir / "node.toml").string();
  BOOST_TEST(node_error(*this, "port = 65536\n") == path + ":1: 'port' must be an integer in 0..65535, got 65536");
  BOOST_TEST(node_error(*this, "port = -1\n") == path + ":1: 'port' must be an integer in 0..65535, got -1");
  BOOST_TEST(node_error(*this, "num_blocks = 0\n") ==
             path + ":1: 'num_blocks' must be an integer in 1..2147483647, got 0");
  BOOST_TEST(node_error(*this, "threads = -2\n") == path + ":1: 'threads' must be an integer in 0..4096, got -2");
  BOOST_TEST(node_error(*this, "max_sessions = 0\n") ==
             path + ":1: 'max_sessions' must be an integer in 1..2147483647, got 0");
  BOOST_TEST(node_error(*this, "session_timeout_s = 0\n") ==
             path + ":1: 'session_timeout_s' must be a number > 0, got 0");
  BOOST_TEST(node_error(*this, "update_period_s = -0.5\n") ==
             path + ":1: 'update_period_s' must be a number > 0, got -0.5");
  BOOST_TEST(node_error(*this, "balance_quality = -1\n") ==
             path + ":1: 'balance_quality' must be a number >= 0, got -1");
  BOOST_TEST(node_error(*this, "mean_balance_check_period_s = 0\n") ==
             path + ":1: 'mean_balance_check_period_s' must be a number > 0, got 0");
  BOOST_TEST(node_error(*this, "step_timeout_s = inf\n") ==
             path + ":1: 'step_timeout_s' must be a number > 0, got inf");
  BOOST_TEST(node_error(*this, "dtype = \"f8\"\n") ==
             path + ":1: 'dtype' must be one of auto, f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, " +
                 "q4_K, q5_K, q6_K, iq4_nl, got \"f8\"");
  BOOST_TEST(node_error(*this, "device = \"gpu\"\n") ==
             path + ":1: 'device' must be \"cpu\", \"cuda\" or \"cuda:N\", got \"gpu\"");
  BOOST_TEST(node_error(*this, "device = \"cuda:x\"\n").find("'device' must be") != std::string::npos);
  BOOST_TEST(node_error(*this, "host = \"\"\n") == path + ":1: 'host' must not be empty");
  BOOST_TEST(node_error(*this, "model = \"\"\n").find(path + ":1: 'model' must not be empty") == 0);
  for (const char* good : {"cpu", "cuda", "cuda:0", "cuda:7"})
    BOOST_TEST(load_node_config(write("d.toml", std::string("device = \"") + good + "\"\n")).device == good);
}

BOOST_FIXTURE_TEST_CASE(block_indices_must_be_first_below_last, Files) {
  const std::string path = (dir / "node.toml").string();
  BOOST_TEST(node_error(*this, "block_indices = \"20:10\"\n") ==
             path +
                 ":1: 'block_indices' must be \"FIRST:LAST\" with 0 <= FIRST < LAST (e.g. \"10:20\"), got "
                 "\"20:10\": FIRST must be below LAST");
  BOOST_TEST(node_error(*this, "block_indices = \"a:b\"\n") ==
             path +
                 ":1: 'block_indices' must be \"FIRST:LAST\" with 0 <= FIRST < LAST (e.g. \"10:20\"), got "
                 "\"a:b\"");
  for (const char* bad : {"10", "10:10", "-1:3", "1:", ":3", "1:2:3", " 1:2", "1:99999999999"})
    check_contains(node_error(*this, std::string("block_indices = \"") + bad + "\"\n"),
                   {path + ":1: 'block_indices' must be \"FIRST:LAST\""});
  check_contains(node_error(*this, "block_indices = [10, 20]\n"), {"'block_indices' must be a string"});
  BOOST_TEST((load_node_config(write("ok.toml", "block_indices = \"0:1\"\n")).block_indices == BlockRange{0, 1}));
}

BOOST_FIXTURE_TEST_CASE(keys_that_exclude_each_other, Files) {
  const std::string path = (dir / "node.toml").string();
  BOOST_TEST(node_error(*this, "num_blocks = 4\nblock_indices = \"0:4\"\n") ==
             path + ":2: 'block_indices' and 'num_blocks' exclude each other: give one of them");
  BOOST_TEST(node_error(*this, "initial_peers = [\"a:1\"]\nnew_swarm = true\n") ==
             path + ":2: 'new_swarm' and 'initial_peers' exclude each other: a new swarm has no initial peers");
  // Neither is set together: fine.
  const NodeConfig c = load_node_config(write("ok.toml", "initial_peers = []\nnew_swarm = true\n"));
  BOOST_TEST(c.new_swarm);
  // validate() catches them in a configuration built another way.
  NodeConfig both;
  both.model = "demo";
  both.num_blocks = 3;
  both.block_indices = BlockRange{0, 3};
  BOOST_TEST(error_of([&] { validate(both, "flags"); }) ==
             "flags: 'num_blocks' and 'block_indices' exclude each other: give one of them");
  NodeConfig fresh;
  fresh.model = "demo";
  fresh.new_swarm = true;
  fresh.initial_peers = {"a:1"};
  check_contains(error_of([&] { validate(fresh, "flags"); }), {"flags: 'new_swarm' and 'initial_peers'"});
}

BOOST_FIXTURE_TEST_CASE(initial_peers_must_be_host_and_port, Files) {
  const std::string path = (dir / "node.toml").string();
  // The line is the bad element's own.
  BOOST_TEST(node_error(*this, "initial_peers = [\n  \"10.0.0.1:31331\",\n  \"localhost\",\n]\n") ==
             path +
                 ":3: 'initial_peers' must hold \"HOST:PORT\" addresses (e.g. \"127.0.0.1:31331\"), got "
                 "\"localhost\": no port");
  for (const char* bad : {"", ":31331", "host:", "host:0", "host:65536", "host:x1", "::1:31331", "[::1]31331", "[::1",
                          "/ip4/1.2.3.4/tcp/31337/p2p/QmXyz", "a b:1"})
    check_contains(node_error(*this, std::string("initial_peers = [\"") + bad + "\"]\n"),
                   {path + ":1: 'initial_peers' must hold \"HOST:PORT\" addresses"});
  check_contains(node_error(*this, "initial_peers = [\"a:1\", 2]\n"), {"'initial_peers' must be an array of strings"});
  const NodeConfig c =
      load_node_config(write("ok.toml", "initial_peers = [\"h:1\", \"[fe80::1]:65535\", \"1.2.3.4:31331\"]\n"));
  BOOST_TEST(c.initial_peers.size() == 3u);
}

BOOST_FIXTURE_TEST_CASE(broken_syntax_and_missing_files, Files) {
  const std::string path = (dir / "node.toml").string();
  const std::string broken = node_error(*this, "model = \"demo\"\nport = \n");
  BOOST_TEST(broken.find(path + ":2:") == 0, broken);
  check_contains(broken, {"invalid TOML"});
  check_contains(node_error(*this, "model = \"demo\n"), {path + ":1:", "invalid TOML"});
  check_contains(node_error(*this, "port = 1\nport = 2\n"), {path + ":2:", "invalid TOML"});
  const std::string missing = (dir / "nope.toml").string();
  BOOST_TEST(error_of([&] { load_node_config(missing); }) ==
             missing + ": cannot read the file: No such file or directory");
  BOOST_TEST(error_of([&] { load_node_config(dir.string()); }) ==
             dir.string() + ": cannot read the file: it is a directory");
}

BOOST_AUTO_TEST_CASE(the_default_data_dir_follows_the_cache_and_the_public_name) {
  const char* old = std::getenv("COROLLA_CACHE");
  const std::string saved = old ? old : "";
  ::setenv("COROLLA_CACHE", "/tmp/cc", 1);
  NodeConfig c;
  BOOST_TEST(node_data_dir(c) == "/tmp/cc/node-default");
  c.public_name = "alice's node/1";
  BOOST_TEST(node_data_dir(c) == "/tmp/cc/node-alice_s_node_1");
  c.data_dir = "/srv/corolla";
  BOOST_TEST(node_data_dir(c) == "/srv/corolla");
  c.data_dir = "~/corolla";
  BOOST_TEST(node_data_dir(c) == std::string(std::getenv("HOME")) + "/corolla");
  if (old)
    ::setenv("COROLLA_CACHE", saved.c_str(), 1);
  else
    ::unsetenv("COROLLA_CACHE");
}

BOOST_FIXTURE_TEST_CASE(a_printed_node_configuration_reads_back_the_same, Files) {
  NodeConfig c;
  c.model = "models/with \"quotes\"\\and\ttabs";
  c.num_blocks = 7;
  c.host = "::1";
  c.port = 65535;
  c.initial_peers = {"a:1", "[::1]:2"};
  c.public_name = "bob";
  c.dtype = "bf16";
  c.device = "cuda";
  c.data_dir = "/d";
  c.cache_tokens = 1;
  c.threads = 3;
  c.step_timeout_s = 0.1;
  c.session_timeout_s = 1e9;
  c.max_sessions = 1;
  c.throughput = "eval";
  c.update_period_s = 2.5;
  c.balance_quality = 1.5;
  c.mean_balance_check_period_s = 7.25;
  c.announce_address = "node.example.org:443";
  c.credentials = SwarmCredentials{true, "ca.crt", "me.crt", "me.key"};
  BOOST_TEST((load_node_config(write("out.toml", to_toml(c))) == c));
  NodeConfig d;
  d.model = "demo";
  d.block_indices = BlockRange{3, 9};
  d.new_swarm = true;
  d.data_dir = "/d";
  BOOST_TEST((load_node_config(write("out.toml", to_toml(d))) == d));
}

BOOST_FIXTURE_TEST_CASE(a_private_swarms_credentials_go_together, Files) {
  const NodeConfig c = load_node_config(write("node.toml",
                                              "model = \"demo\"\nswarm_authority = \"s/authority.crt\"\n"
                                              "certificate = \"s/a.crt\"\nprivate_key = \"s/a.key\"\n"));
  BOOST_TEST(c.credentials.private_swarm());
  BOOST_TEST(c.credentials.encrypted());
  BOOST_TEST(c.credentials.certificate == "s/a.crt");
  const NodeConfig t = load_node_config(write("node.toml", "tls = true\n"));
  BOOST_TEST((t.credentials.encrypted() && !t.credentials.private_swarm()));
  check_contains(node_error(*this, "certificate = \"a.crt\"\nprivate_key = \"a.key\"\n"),
                 {"'swarm_authority' is not set", "tls = true"});
  check_contains(node_error(*this, "swarm_authority = \"ca.crt\"\nprivate_key = \"a.key\"\n"),
                 {"'certificate' is not set", "corolla keys issue"});
  check_contains(node_error(*this, "swarm_authority = \"ca.crt\"\ncertificate = \"a.crt\"\n"),
                 {"'private_key' is not set"});
  check_contains(node_error(*this, "certificate = \"\"\n"), {"node.toml:1: 'certificate' must not be empty"});
  check_contains(node_error(*this, "tls = 1\n"), {"'tls' must be true or false"});
  check_contains(node_error(*this, "announce_address = \"nowhere\"\n"), {"node.toml:1: 'announce_address'"});
}

// ---- Client files

BOOST_FIXTURE_TEST_CASE(client_files, Files) {
  const std::string path = write("client.toml", R"(model = "demo"
initial_peers = ["127.0.0.1:31331", "127.0.0.1:31332"]
mode = "relay"
max_length = 512
request_timeout_s = 5
)");
  const ClientConfig c = load_client_config(path);
  BOOST_TEST(c.model == "demo");
  BOOST_TEST(c.initial_peers.size() == 2u);
  BOOST_TEST(c.mode == "relay");
  BOOST_TEST(c.max_length == 512);
  BOOST_TEST(c.request_timeout_s == 5.0);
  validate(c, path);
  BOOST_TEST((load_client_config(write("out.toml", to_toml(c))) == c));

  const ClientConfig d;
  BOOST_TEST(d.mode == "push");
  BOOST_TEST(d.max_length == 2048);
  BOOST_TEST(d.request_timeout_s == 30.0);

  auto err = [&](const std::string& text) {
    const std::string p = write("bad.toml", text);
    return error_of([&] { load_client_config(p); });
  };
  const std::string bad = (dir / "bad.toml").string();
  BOOST_TEST(err("mod = \"push\"\n") == bad + ":1: unknown key 'mod' (did you mean 'mode'?)");
  BOOST_TEST(err("mode = \"pull\"\n") == bad + ":1: 'mode' must be \"push\" or \"relay\", got \"pull\"");
  BOOST_TEST(err("max_length = 0\n") == bad + ":1: 'max_length' must be an integer in 1..2147483647, got 0");
  BOOST_TEST(err("request_timeout_s = 0\n") == bad + ":1: 'request_timeout_s' must be a number > 0, got 0");
  check_contains(err("initial_peers = [\"localhost\"]\n"), {bad + ":1: 'initial_peers' must hold", "\"localhost\""});
  check_contains(err("num_blocks = 3\n"), {bad + ":1: unknown key 'num_blocks'"});
  check_contains(err("mode = \n"), {bad + ":1:", "invalid TOML"});

  ClientConfig no_peers;
  no_peers.model = "demo";
  BOOST_TEST(error_of([&] { validate(no_peers, "c.toml"); }) ==
             "c.toml: 'initial_peers' is empty: give the \"HOST:PORT\" of at least one node");
}

// ---- Local swarms

BOOST_FIXTURE_TEST_CASE(a_swarm_file_inherits_top_level_keys, Files) {
  const std::string path = write("swarm.toml", R"(model = "demo"
dtype = "q8_0"
num_blocks = 5
initial_peers = ["127.0.0.1:4001"]

[[server]]
port = 4001
public_name = "a"
new_swarm = true

[[server]]
port = 4002
public_name = "b"
block_indices = "5:10"
dtype = "f32"

[[server]]
public_name = "c"
)");
  const SwarmConfig s = load_swarm_config(path);
  BOOST_REQUIRE_EQUAL(s.servers.size(), 3u);
  // server[0]: new_swarm drops the inherited initial_peers.
  BOOST_TEST(s.servers[0].new_swarm);
  BOOST_TEST(s.servers[0].initial_peers.empty());
  BOOST_TEST(*s.servers[0].num_blocks == 5);
  BOOST_TEST(s.servers[0].dtype == "q8_0");
  // server[1]: block_indices drops the inherited num_blocks; its own dtype wins.
  BOOST_TEST(!s.servers[1].num_blocks);
  BOOST_TEST((s.servers[1].block_indices == BlockRange{5, 10}));
  BOOST_TEST(s.servers[1].dtype == "f32");
  BOOST_TEST(s.servers[1].initial_peers == std::vector<std::string>{"127.0.0.1:4001"});
  BOOST_TEST(s.servers[2].port == 0);
  BOOST_TEST(s.servers[2].model == "demo");
  // The client inherits model and initial_peers.
  BOOST_TEST(s.client.model == "demo");
  BOOST_TEST(s.client.initial_peers == std::vector<std::string>{"127.0.0.1:4001"});
  BOOST_TEST(s.client.mode == "push");
  validate(s, path);
  // Printed with data_dir resolved, it reads back the same.
  SwarmConfig resolved = s;
  for (auto& node : resolved.servers) node.data_dir = node_data_dir(node);
  BOOST_TEST((load_swarm_config(write("out.toml", to_toml(s))) == resolved));
}

BOOST_FIXTURE_TEST_CASE(a_swarm_client_without_peers_joins_the_servers_with_fixed_ports, Files) {
  const SwarmConfig s = load_swarm_config(write("swarm.toml", R"(model = "demo"
[[server]]
port = 5001
public_name = "a"
new_swarm = true
[[server]]
public_name = "b"
initial_peers = ["127.0.0.1:5001"]
[[server]]
host = "::1"
port = 5003
public_name = "c"
initial_peers = ["127.0.0.1:5001"]
[client]
mode = "relay"
)"));
  BOOST_TEST(s.client.initial_peers == (std::vector<std::string>{"127.0.0.1:5001", "[::1]:5003"}),
             boost::test_tools::per_element());
  BOOST_TEST(s.client.mode == "relay");
}

BOOST_FIXTURE_TEST_CASE(swarm_errors_name_the_server, Files) {
  const std::string path = (dir / "swarm.toml").string();
  auto err = [&](const std::string& text) {
    write("swarm.toml", text);
    return error_of([&] { load_swarm_config(path); });
  };
  BOOST_TEST(err("model = \"demo\"\n") == path + ": no [[server]] table: a swarm needs at least one server");
  BOOST_TEST(err("model = \"demo\"\n[server]\nport = 1\n") ==
             path + ":2: 'server' must be an array of tables, written [[server]], got a table");
  BOOST_TEST(err("model = \"demo\"\n[[servers]]\nport = 1\n") ==
             path + ":2: unknown key 'servers' (did you mean 'server'?)");
  BOOST_TEST(err("model = \"demo\"\n[[server]]\nport = 1\n[[server]]\nnum_block = 2\n") ==
             path + ":5: unknown key 'server[1].num_block' (did you mean 'server[1].num_blocks'?)");
  BOOST_TEST(err("model = \"demo\"\n[[server]]\nport = \"x\"\n") ==
             path + ":3: 'server[0].port' must be an integer in 0..65535, got \"x\"");
  BOOST_TEST(err("model = \"demo\"\nmode = \"push\"\n[[server]]\nport = 1\n") ==
             path + ":2: unknown key 'mode' (did you mean 'model'?)");
  // Every server's problems and the client's, together.
  BOOST_TEST(err("[[server]]\nport = 1\n[[server]]\nport = 2\npublic_name = \"b\"\n") ==
             path + ":1: 'server[0].model' is not set: give a model directory, a .gguf file or \"demo\"\n" + path +
                 ":3: 'server[1].model' is not set: give a model directory, a .gguf file or \"demo\"\n" + path +
                 ": 'client.model' is not set: give a model directory, a .gguf file or \"demo\"");
  BOOST_TEST(err("model = \"demo\"\n[[server]]\nport = 7\n[[server]]\nport = 7\npublic_name = \"b\"\n") ==
             path + ":4: 'server[1].port' is 7, as is 'server[0].port': give each server its own port");
  check_contains(err("model = \"demo\"\n[[server]]\nport = 7\n[[server]]\nport = 8\n"),
                 {path + ":4: 'server[1].data_dir' is", "as is 'server[0].data_dir'", "'public_name' or 'data_dir'"});
  BOOST_TEST(err("model = \"demo\"\n[[server]]\nport = 7\n[client]\nmode = \"pull\"\n") ==
             path + ":5: 'client.mode' must be \"push\" or \"relay\", got \"pull\"");
  BOOST_TEST(err("model = \"demo\"\n[[server]]\nport = 7\n[client]\nnum_blocks = 1\n") ==
             path + ":5: unknown key 'client.num_blocks'");
  BOOST_TEST(err("model = \"demo\"\nclient = 3\n[[server]]\nport = 7\n") ==
             path + ":2: 'client' must be a table, written [client], got 3");
  check_contains(err("model = \"demo\"\n[[server]]\nport = 0\n"),
                 {path + ": 'client.initial_peers' is not set and no server has a fixed port"});
  BOOST_TEST(err("model = \"demo\"\nnew_swarm = true\ninitial_peers = [\"a:1\"]\n[[server]]\n") ==
             path + ":2: 'new_swarm' and 'initial_peers' exclude each other: a new swarm has no initial peers");
}

// ---- Command-line flags over files

namespace {

struct NodeCli {
  CLI::App app{"test"};
  cli::NodeFlags flags;
  NodeCli() { cli::add_node_flags(app, flags); }
  NodeConfig resolve(const std::string& args) {
    app.parse(args, false);
    return cli::resolve_node_config(flags);
  }
};

struct ClientCli {
  CLI::App app{"test"};
  cli::ClientFlags flags;
  ClientCli() { cli::add_client_flags(app, flags); }
  ClientConfig resolve(const std::string& args) {
    app.parse(args, false);
    return cli::resolve_client_config(flags);
  }
};

const char* kNodeFile = R"(model = "demo"
num_blocks = 6
port = 31331
host = "0.0.0.0"
dtype = "f16"
threads = 4
initial_peers = ["10.0.0.1:31331"]
step_timeout_s = 10
)";

}  // namespace

BOOST_FIXTURE_TEST_CASE(flags_given_beat_the_file_and_flags_not_given_leave_it, Files) {
  const std::string path = write("node.toml", kNodeFile);
  const NodeConfig plain = NodeCli().resolve("--config " + path);
  BOOST_TEST((plain == load_node_config(path)));

  const NodeConfig c = NodeCli().resolve("--config " + path +
                                         " --port 40000 --threads 0 --dtype q4_0 --step_timeout 2.5"
                                         " --public_name x --data_dir /d --cache_tokens 100 --device cuda:2"
                                         " --kv_cache_dtype f32"
                                         " --session_timeout 9 --max_sessions 3 --throughput 12 --update_period 4"
                                         " --balance_quality 0 --mean_balance_check_period 5"
                                         " --model other.gguf --host 127.0.0.2");
  BOOST_TEST(c.port == 40000);
  BOOST_TEST(c.threads == 0);  // a flag given with the default value still beats the file
  BOOST_TEST(c.dtype == "q4_0");
  BOOST_TEST(c.step_timeout_s == 2.5);
  BOOST_TEST(c.public_name == "x");
  BOOST_TEST(c.data_dir == "/d");
  BOOST_TEST(c.cache_tokens == 100);
  BOOST_TEST(c.kv_cache_dtype == "f32");  // the file's f16, overridden
  BOOST_TEST(c.device == "cuda:2");
  BOOST_TEST(c.session_timeout_s == 9.0);
  BOOST_TEST(c.max_sessions == 3);
  BOOST_TEST(c.throughput == "12");
  BOOST_TEST(c.update_period_s == 4.0);
  BOOST_TEST(c.balance_quality == 0.0);
  BOOST_TEST(c.mean_balance_check_period_s == 5.0);
  BOOST_TEST(c.model == "other.gguf");
  BOOST_TEST(c.host == "127.0.0.2");
  // Untouched: from the file.
  BOOST_TEST(*c.num_blocks == 6);
  BOOST_TEST(c.initial_peers == std::vector<std::string>{"10.0.0.1:31331"});
}

BOOST_FIXTURE_TEST_CASE(a_flag_drops_what_it_excludes_from_the_file, Files) {
  const std::string path = write("node.toml", kNodeFile);
  const NodeConfig a = NodeCli().resolve("--config " + path + " --block_indices 10:20");
  BOOST_TEST((a.block_indices == BlockRange{10, 20}));
  BOOST_TEST(!a.num_blocks);
  const NodeConfig b = NodeCli().resolve("--config " + path + " --new_swarm");
  BOOST_TEST(b.new_swarm);
  BOOST_TEST(b.initial_peers.empty());

  const std::string fresh = write("fresh.toml", "model = \"demo\"\nblock_indices = \"0:5\"\nnew_swarm = true\n");
  const NodeConfig c = NodeCli().resolve("--config " + fresh + " --num_blocks 3 --initial_peers a:1");
  BOOST_TEST(*c.num_blocks == 3);
  BOOST_TEST(!c.block_indices);
  BOOST_TEST(!c.new_swarm);
  BOOST_TEST(c.initial_peers == std::vector<std::string>{"a:1"});
}

BOOST_AUTO_TEST_CASE(initial_peers_take_commas_and_spaces) {
  const NodeConfig c = NodeCli().resolve("--model demo --initial_peers a:1,b:2 c:3 --port 5");
  BOOST_TEST(c.initial_peers == (std::vector<std::string>{"a:1", "b:2", "c:3"}), boost::test_tools::per_element());
  BOOST_TEST(c.port == 5);
  const ClientConfig d = ClientCli().resolve("--model demo --initial_peers a:1 b:2,c:3");
  BOOST_TEST(d.initial_peers == (std::vector<std::string>{"a:1", "b:2", "c:3"}), boost::test_tools::per_element());
}

// Petals' run_server command lines: the model first, torch's dtype names, its cache flag, int8 weights and
// multiaddresses mean here what they mean there; its flags with no meaning here are refused with what to use.
BOOST_AUTO_TEST_CASE(petals_flags_mean_the_same_here) {
  const NodeConfig c = NodeCli().resolve(
      "demo --torch_dtype bfloat16 --attn_cache_tokens 512 "
      "--initial_peers /ip4/10.1.2.3/tcp/31337/p2p/QmAbc,/dns/example.org/tcp/8000 /ip6/::1/tcp/5");
  BOOST_TEST(c.model == "demo");
  BOOST_TEST(c.dtype == "bf16");
  BOOST_TEST(c.cache_tokens == 512);
  BOOST_TEST(c.initial_peers == (std::vector<std::string>{"10.1.2.3:31337", "example.org:8000", "[::1]:5"}),
             boost::test_tools::per_element());
  BOOST_TEST(NodeCli().resolve("--model demo --dtype float32").dtype == "f32");
  BOOST_TEST(NodeCli().resolve("--model demo --quant_type int8").dtype == "q8_0");
  BOOST_TEST(NodeCli().resolve("--model demo --quant_type none --dtype f16").dtype == "f16");
  check_contains(error_of([] { NodeCli().resolve("--model demo --quant_type nf4"); }), {"nf4", "--dtype q4_K"});
  check_contains(error_of([] { NodeCli().resolve("--model demo --quant_type int8 --dtype f16"); }),
                 {"give one of them"});
  check_contains(error_of([] { NodeCli().resolve("--model demo --max_disk_space 10GB"); }),
                 {"--max_disk_space has no meaning here", "--data_dir"});
  check_contains(error_of([] { NodeCli().resolve("--model demo --identity_path id.key"); }),
                 {"--identity_path has no meaning here", "--data_dir"});
  // Not multiaddresses of a TCP peer: left to the HOST:PORT check, which refuses them.
  for (const char* bad : {"/ip4/1.2.3.4/udp/5", "/ip4/1.2.3.4/tcp/0", "/ip4//tcp/5", "/ip4/1.2.3.4/tcp/5/p2p",
                          "/onion3/x/tcp/5", "ip4/1.2.3.4/tcp/5"}) {
    BOOST_TEST(!host_port_of_multiaddr(bad), bad);
    NodeCli cli;
    BOOST_CHECK_THROW(cli.app.parse(std::string("--model demo --initial_peers ") + bad, false), CLI::ParseError);
  }
}

BOOST_AUTO_TEST_CASE(bad_flags_are_parse_errors) {
  for (const char* args :
       {"--model demo --dtype f8", "--model demo --initial_peers localhost", "--model demo --block_indices 20:10",
        "--model demo --block_indices a:b", "--model demo --port 70000", "--model demo --num_blocks 0",
        "--model demo --device gpu", "--model demo --throughput fast", "--model demo --step_timeout 0",
        "--model demo --balance_quality -0.5", "--model demo --mean_balance_check_period 0",
        "--model demo --num_blocks 3 --block_indices 0:3", "--model demo --new_swarm --initial_peers a:1",
        "--model demo --num_block 3", "--model demo --kv_cache_dtype q8_0"}) {
    NodeCli cli;
    BOOST_CHECK_THROW(cli.app.parse(args, false), CLI::ParseError);
  }
  for (const char* args : {"--model demo --initial_peers a:1 --mode pull", "--initial_peers a:1 --max_length 0",
                           "--initial_peers a:1 --request_timeout -1"}) {
    ClientCli cli;
    BOOST_CHECK_THROW(cli.app.parse(args, false), CLI::ParseError);
  }
  // The message names the flag and the problem.
  NodeCli cli;
  try {
    cli.app.parse("--dtype f8", false);
    BOOST_FAIL("no error");
  } catch (const CLI::ParseError& e) {
    check_contains(e.what(), {"--dtype", "must be one of auto"});
  }
}

BOOST_FIXTURE_TEST_CASE(resolving_without_a_file_needs_the_required_keys, Files) {
  const NodeConfig c = NodeCli().resolve("--model demo");
  NodeConfig expected;
  expected.model = "demo";
  BOOST_TEST((c == expected));
  BOOST_TEST(error_of([] { NodeCli().resolve("--port 1"); }) ==
             "command line: no model: pass --model, or set 'model' in the --config file");
  const std::string no_model = write("node.toml", "port = 1\n");
  check_contains(error_of([&] { NodeCli().resolve("--config " + no_model); }),
                 {no_model + " with the command-line flags: no model"});
  check_contains(error_of([&] { NodeCli().resolve("--config " + (dir / "missing.toml").string()); }),
                 {"missing.toml: cannot read the file"});
  check_contains(error_of([&] { NodeCli().resolve("--config " + write("bad.toml", "prot = 1\n")); }),
                 {"bad.toml:1: unknown key 'prot' (did you mean 'port'?)"});
  BOOST_TEST(error_of([] { ClientCli().resolve("--model demo"); }) ==
             "command line: no initial peers: pass --initial_peers HOST:PORT, or set 'initial_peers' in the "
             "--config file");
}

BOOST_FIXTURE_TEST_CASE(client_flags_beat_the_client_file, Files) {
  const std::string path =
      write("client.toml", "model = \"demo\"\ninitial_peers = [\"h:1\"]\nmode = \"relay\"\nmax_length = 100\n");
  const ClientConfig plain = ClientCli().resolve("--config " + path);
  BOOST_TEST((plain == load_client_config(path)));
  const ClientConfig c = ClientCli().resolve("--config " + path + " --mode push --request_timeout 3");
  BOOST_TEST(c.mode == "push");
  BOOST_TEST(c.request_timeout_s == 3.0);
  BOOST_TEST(c.max_length == 100);
  BOOST_TEST(c.initial_peers == std::vector<std::string>{"h:1"});
  const ClientConfig d = ClientCli().resolve("--config " + path + " --initial_peers x:2 --max_length 7 --model m");
  BOOST_TEST(d.initial_peers == std::vector<std::string>{"x:2"});
  BOOST_TEST(d.max_length == 7);
  BOOST_TEST(d.model == "m");
  BOOST_TEST(d.mode == "relay");
}

// ---- The example files shipped in config/

BOOST_AUTO_TEST_CASE(the_shipped_node_file_loads) {
  const std::string path = config_dir() + "/node.toml";
  const NodeConfig c = load_node_config(path);
  validate(c, path);
  BOOST_TEST(c.model == "demo");
  BOOST_TEST((c.block_indices == BlockRange{0, 10}));
  BOOST_TEST(c.port == 31331);
  BOOST_TEST(c.new_swarm);
}

BOOST_AUTO_TEST_CASE(the_shipped_client_file_loads) {
  const std::string path = config_dir() + "/client.toml";
  const ClientConfig c = load_client_config(path);
  validate(c, path);
  BOOST_TEST((c == ClientConfig{"demo", {"127.0.0.1:31331"}, "push", 2048, 30.0}));
}

BOOST_AUTO_TEST_CASE(the_shipped_local_swarm_splits_the_demo_model_in_three) {
  const SwarmConfig s = load_swarm_config(config_dir() + "/swarm-local.toml");
  BOOST_REQUIRE_EQUAL(s.servers.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const NodeConfig& n = s.servers[static_cast<size_t>(i)];
    BOOST_TEST(n.model == "demo");
    BOOST_TEST(n.host == "127.0.0.1");
    BOOST_TEST(n.port == 31331 + i);
    BOOST_TEST((n.block_indices == BlockRange{10 * i, 10 * i + 10}));
    BOOST_TEST(n.new_swarm == (i == 0));
    BOOST_TEST(n.initial_peers.size() == (i == 0 ? 0u : 1u));
  }
  BOOST_TEST(s.client.model == "demo");
  BOOST_TEST(s.client.initial_peers == std::vector<std::string>{"127.0.0.1:31331"});
  BOOST_TEST(s.client.mode == "push");
}
