// corolla chat: a terminal chat with a model, in this process or through a swarm (--initial_peers). In this process
// the conversation is kept in the KV cache: each turn feeds only the tokens the cache does not hold yet. Through a
// swarm each turn is a session of its own holding the whole conversation, as the API's chat completions are (a
// session's history can only grow, and a reply re-encoded in the template need not be the tokens generated).
// Commands: /reset (start over), /quit; any other line that is one word starting with '/' is taken for a mistyped
// command and not sent (a leading space sends it).
#include <algorithm>
#include <caf/all.hpp>
#include <functional>
#include <iostream>

#include "actors/client/client_api.hpp"
#include "actors/net/peer_tls.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/system/system_config.hpp"
#include "apps/corolla/cli_inputs.hpp"
#include "apps/corolla/commands.hpp"
#include "apps/corolla/node_flags.hpp"
#include "apps/corolla/stop_waiting_on_error.hpp"
#include "model/local_model.hpp"
#include "model/hub/fetch_model.hpp"
#include "model/tokenizer/chat_template.hpp"
#include "model/tokenizer/stream_decoder.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/tokenizer/unicode.hpp"

namespace corolla::cli {
namespace {

struct ChatOptions {
  std::string model = "demo";
  std::string system;
  int64_t context = 2048;
  int64_t max_new_tokens = 256;
  SamplingFlags sampling{0.7f, 40, 0.9f, 1.1f, 0};
  int threads = 0;
  std::vector<std::string> initial_peers;
  std::string swarm_id;
  SwarmCredentials credentials;
};

// One reply to the conversation's tokens: each new token given to on_token as it is chosen; returns the reply's
// tokens (without the one that ended it).
using ReplyFn =
    std::function<std::vector<int32_t>(const std::vector<int32_t>& ids, const std::function<void(int32_t)>& on_token)>;

// The KV cache holds `cached` (the ids fed so far, at positions 0..n-1); feeding a new prompt reuses the longest
// common prefix and overwrites the rest.
class CachedConversation {
 public:
  CachedConversation(LocalModel& model, int64_t context) : model_(model), context_(context) {
    model_.reset(1, context);
  }

  void reset() { cached_.clear(); }
  int64_t context() const { return context_; }

  // Feeds what `ids` adds to the cache; returns the logits after its last token.
  Tensor feed(const std::vector<int32_t>& ids) {
    if (static_cast<int64_t>(ids.size()) >= context_)
      throw std::invalid_argument("the conversation (" + std::to_string(ids.size()) +
                                  " tokens) no longer fits the context of " + std::to_string(context_) +
                                  " tokens: /reset to start over");
    size_t common = 0;
    while (common < cached_.size() && common + 1 < ids.size() && cached_[common] == ids[common]) ++common;
    std::vector<int32_t> fresh(ids.begin() + static_cast<std::ptrdiff_t>(common), ids.end());
    std::vector<int32_t> positions(fresh.size());
    for (size_t i = 0; i < fresh.size(); ++i) positions[i] = static_cast<int32_t>(common + i);
    Tensor logits = model_.forward(fresh, positions, true);
    cached_.assign(ids.begin(), ids.end());
    return logits;
  }

  Tensor feed_one(int32_t id) {
    const int32_t pos = static_cast<int32_t>(cached_.size());
    if (pos >= context_) throw std::invalid_argument("the context of " + std::to_string(context_) + " tokens is full");
    cached_.push_back(id);
    return model_.forward({&id, 1}, {&pos, 1}, true);
  }
  const std::vector<int32_t>& cached() const { return cached_; }

 private:
  LocalModel& model_;
  int64_t context_;
  std::vector<int32_t> cached_;
};

// The tokens that end a reply: the model's ends of text and the chat template's end of turn.
std::vector<int32_t> reply_end_tokens(const Tokenizer& tokenizer, const ChatTemplate& chat) {
  std::vector<int32_t> ends = tokenizer.eos_ids();
  if (chat.end_of_turn_id() >= 0) ends.push_back(chat.end_of_turn_id());
  return ends;
}

bool ends_reply(const std::vector<int32_t>& ends, int32_t id) {
  return std::find(ends.begin(), ends.end(), id) != ends.end();
}

// The terminal loop over a reply engine: commands, the chat template, streaming the reply as text.
int chat_loop(const ChatOptions& o, const std::string& where, const Tokenizer& tokenizer, const ChatTemplate& chat,
              const ReplyFn& reply_to, const std::function<void()>& reset) {
  std::vector<ChatMessage> messages;
  if (!o.system.empty()) messages.push_back({"system", o.system});
  const size_t base = messages.size();
  std::cerr << "chat with " << where << " (" << to_string(chat.format()) << " template); /reset, /quit\n";
  std::string line;
  while (std::cout << "> " << std::flush, std::getline(std::cin, line)) {
    if (line == "/quit" || line == "/exit") break;
    if (line == "/reset") {
      messages.resize(base);
      reset();
      std::cout << "(conversation cleared)\n";
      continue;
    }
    if (line.empty()) continue;
    if (line[0] == '/' && line.find_first_of(" \t") == std::string::npos) {
      std::cout << "unknown command " << line << " (commands: /reset, /quit; to send it as text, start the line "
                << "with a space)\n";
      continue;
    }
    try {
      tok::check_utf8(line);  // errors name the offset in what the user typed
      messages.push_back({"user", line});
      try {
        const auto ids = tokenizer.encode(chat.render(messages, true), {.add_special = false, .parse_special = true});
        StreamDecoder decoder(tokenizer);
        const auto reply = reply_to(ids, [&](int32_t id) { std::cout << decoder.push(id) << std::flush; });
        std::cout << decoder.flush() << "\n";
        messages.push_back({"assistant", tokenizer.decode(reply, true)});
      } catch (...) {
        messages.pop_back();
        throw;
      }
    } catch (const std::exception& e) {
      std::cout << "error: " << e.what() << "\n";
    }
  }
  return 0;
}

// The generation of one reply: ends at the model's ends of text and the template's end of turn.
GenerationParams reply_params(const ChatOptions& o, const Tokenizer& tokenizer, const ChatTemplate& chat) {
  GenerationParams params;
  params.max_new_tokens = o.max_new_tokens;
  params.sampling = o.sampling.params();
  params.eos_token_ids = reply_end_tokens(tokenizer, chat);
  return params;
}

// Shows each token of a reply but the one that ends it (`ends`: the reply's end tokens).
TokenCallback show_reply(const std::vector<int32_t>& ends, const std::function<void(int32_t)>& on_token) {
  return [&ends, &on_token](int32_t id) {
    if (!ends_reply(ends, id)) on_token(id);
    return true;
  };
}

// The reply's tokens without the one that ended it.
std::vector<int32_t> without_end(std::vector<int32_t> reply, GenerationEnd end) {
  if (end == GenerationEnd::end_token) reply.pop_back();
  return reply;
}

int run_local(const ChatOptions& o, const std::string& path) {
  Tokenizer tokenizer = Tokenizer::load(path);
  const ChatTemplate chat = ChatTemplate::for_tokenizer(tokenizer);
  auto backend = make_cpu_backend(o.threads);
  LocalModel model(open_weights(path), *backend);
  CachedConversation conversation(model, std::min<int64_t>(o.context, model.config().max_position));
  const GenerationParams params = reply_params(o, tokenizer, chat);
  const std::vector<int32_t> ends = end_tokens(params, model.config());
  const ReplyFn reply_to = [&](const std::vector<int32_t>& ids, const std::function<void(int32_t)>& on_token) {
    Tensor logits = conversation.feed(ids);
    TokenGeneration reply(params, ends, conversation.cached(), show_reply(ends, on_token));
    run_generation(reply, std::move(logits), [&](int32_t id) { return conversation.feed_one(id); });
    return without_end(reply.tokens(), reply.end());
  };
  return chat_loop(o, path, tokenizer, chat, reply_to, [&] { conversation.reset(); });
}

int run_swarm(const ChatOptions& o, const std::string& path) {
  Tokenizer tokenizer = Tokenizer::load(path);
  const ChatTemplate chat = ChatTemplate::for_tokenizer(tokenizer);
  auto source = open_weights(path);
  auto backend = std::shared_ptr<Backend>(make_cpu_backend(o.threads));
  auto head = std::make_shared<const ClientHead>(*source, *backend);  // only the head's tensors are read
  const int64_t context = std::min<int64_t>(o.context, head->config().max_position);

  corolla_config cfg;
  cfg.tls = PeerTls::make(o.credentials);
  caf::actor_system sys{cfg};
  stop_waiting_on_error unwinding{sys};
  caf::scoped_actor self{sys};
  auto client = spawn_swarm_client(sys, cli_client_options(o.initial_peers, o.swarm_id, *source), head);

  const GenerationParams params = reply_params(o, tokenizer, chat);
  const std::vector<int32_t> ends = end_tokens(params, head->config());
  const ReplyFn reply_to = [&](const std::vector<int32_t>& ids, const std::function<void(int32_t)>& on_token) {
    const int64_t max_length = static_cast<int64_t>(ids.size()) + o.max_new_tokens;
    if (max_length > context)
      throw std::invalid_argument("the conversation (" + std::to_string(ids.size()) + " tokens and a reply of up to " +
                                  std::to_string(o.max_new_tokens) + ") no longer fits the context of " +
                                  std::to_string(context) + " tokens: /reset to start over");
    // Tokens are shown from the session's thread as they are chosen; its reply comes after the last of them.
    generate_request req{ids, params};
    req.on_token = show_reply(ends, on_token);
    generate_result reply;
    std::string failure;
    self->request(client, caf::infinite, open_session_request{max_length})
        .receive(
            [&](inference_session_actor session) {
              self->request(session, caf::infinite, std::move(req))
                  .receive([&](generate_result& r) { reply = std::move(r); },
                           [&](caf::error& e) { failure = describe(e); });
              self->send(session, close_atom::value);
            },
            [&](caf::error& e) { failure = describe(e); });
    if (!failure.empty()) throw std::runtime_error(failure);
    return without_end(std::move(reply.tokens), reply.end);
  };
  const int rc = chat_loop(o, path + " through the swarm", tokenizer, chat, reply_to, [] {});
  self->send_exit(client, caf::exit_reason::user_shutdown);
  return rc;
}

}  // namespace

Runner add_chat(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  auto* cmd = app.add_subcommand("chat", "Chat with a model in the terminal");
  cmd->add_option("--model", o->model, "Model directory, .gguf file, or 'demo' (default)");
  cmd->add_option("--system", o->system, "System message");
  cmd->add_option("--context", o->context, "Tokens of conversation kept (KV cache size)")
      ->check(CLI::Range(16, 1 << 20));
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Longest reply")->check(CLI::Range(1, 1 << 20));
  add_sampling_flags(*cmd, o->sampling);
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all cores)");
  cmd->add_option("--initial_peers", o->initial_peers,
                  "Chat through the swarm: HOST:PORT of any of its servers or DHT nodes (the model's file still "
                  "gives the tokenizer, embeddings and LM head)")
      ->delimiter(',')
      ->transform(multiaddr_as_host_port());
  cmd->add_option("--swarm_id", o->swarm_id, "The swarm's DHT key prefix (default: derived from the model's name)");
  add_credential_flags(*cmd, o->credentials);
  return [o, cmd] {
    o->credentials = credentials_from_flags(*cmd, o->credentials);
    const std::string path = hub::locate_model(
        o->model, o->initial_peers.empty() ? hub::ModelNeeds::everything() : hub::ModelNeeds::client_head());
    return o->initial_peers.empty() ? run_local(*o, path) : run_swarm(*o, path);
  };
}

}  // namespace corolla::cli
