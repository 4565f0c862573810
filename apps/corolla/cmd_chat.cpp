// corolla chat: a terminal chat with a model in this process. The conversation is kept in the KV cache: each
// turn feeds only the tokens the cache does not hold yet. Commands: /reset (start over), /quit; any other line
// that is one word starting with '/' is taken for a mistyped command and not sent (a leading space sends it).
#include <iostream>

#include "apps/corolla/cli_inputs.hpp"
#include "apps/corolla/commands.hpp"
#include "model/local_model.hpp"
#include "model/model_path.hpp"
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
};

// The KV cache holds `cached` (the ids fed so far, at positions 0..n-1); feeding a new prompt reuses the longest
// common prefix and overwrites the rest.
class CachedConversation {
 public:
  CachedConversation(LocalModel& model, int64_t context) : model_(model), context_(context) { model_.reset(1, context); }

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

int run(const ChatOptions& o) {
  const std::string path = resolve_model_path(o.model);
  Tokenizer tokenizer = Tokenizer::load(path);
  const ChatTemplate chat = ChatTemplate::for_tokenizer(tokenizer);
  auto backend = make_cpu_backend(o.threads);
  LocalModel model(open_weights(path), *backend);
  CachedConversation conversation(model, std::min<int64_t>(o.context, model.config().max_position));
  Sampler sampler(o.sampling.params());

  std::vector<ChatMessage> messages;
  if (!o.system.empty()) messages.push_back({"system", o.system});
  const size_t base = messages.size();
  std::cerr << "chat with " << path << " (" << to_string(chat.format()) << " template); /reset, /quit\n";
  std::string line;
  while (std::cout << "> " << std::flush, std::getline(std::cin, line)) {
    if (line == "/quit" || line == "/exit") break;
    if (line == "/reset") {
      messages.resize(base);
      conversation.reset();
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
      std::vector<int32_t> ids;
      try {
        ids = tokenizer.encode(chat.render(messages, true), {.add_special = false, .parse_special = true});
        Tensor logits = conversation.feed(ids);
        StreamDecoder decoder(tokenizer);
        std::vector<int32_t> reply;
        for (int64_t i = 0; i < o.max_new_tokens; ++i) {
          const int32_t next =
              sampler.next({logits.data_as<const float>(), static_cast<size_t>(logits.numel())}, conversation.cached());
          if (tokenizer.is_eos(next) || next == chat.end_of_turn_id()) break;
          reply.push_back(next);
          std::cout << decoder.push(next) << std::flush;
          logits = conversation.feed_one(next);
        }
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

}  // namespace

Runner add_chat(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  auto* cmd = app.add_subcommand("chat", "Chat with a model in the terminal");
  cmd->add_option("--model", o->model, "Model directory, .gguf file, or 'demo' (default)");
  cmd->add_option("--system", o->system, "System message");
  cmd->add_option("--context", o->context, "Tokens of conversation kept (KV cache size)")->check(CLI::Range(16, 1 << 20));
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Longest reply")->check(CLI::Range(1, 1 << 20));
  add_sampling_flags(*cmd, o->sampling);
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all cores)");
  return [o] { return run(*o); };
}

}  // namespace corolla::cli
