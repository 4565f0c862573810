// corolla tokenize: text → token ids (or ids → text with --decode) with a model's tokenizer.
//   corolla tokenize --model M (TEXT | --text T | --file F) [--raw] [--decode]
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "apps/corolla/cli_inputs.hpp"
#include "apps/corolla/commands.hpp"
#include "model/hub/fetch_model.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace corolla::cli {
namespace {

struct TokenizeOptions {
  std::string model, text, file;
  bool raw = false, decode = false;
};

std::string read_input(const TokenizeOptions& o) {
  if (o.file.empty()) return o.text;
  std::ifstream f(o.file, std::ios::binary);
  if (!f) throw std::runtime_error(o.file + ": cannot be opened");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

Runner add_tokenize(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  auto* cmd = app.add_subcommand("tokenize", "Turn text into token ids (or ids into text) with a model's tokenizer");
  cmd->add_option("--model,-m", o->model, "GGUF file, directory holding tokenizer.json, or 'demo'")->required();
  auto* text = cmd->add_option("text,--text,-t", o->text, "Text to tokenize (with --decode: token ids)");
  auto* file = cmd->add_option("--file,-f", o->file, "Read the text from this file")->check(CLI::ExistingFile);
  text->excludes(file);
  cmd->add_flag("--raw", o->raw,
                "Add no BOS/EOS and treat special-token text as plain text (default: what generation adds)");
  cmd->add_flag("--decode", o->decode, "Input holds token ids (space or comma separated); print the text");
  return [o, text, file] {
    if (text->count() == 0 && file->count() == 0) throw std::invalid_argument("tokenize needs --text or --file");
    const Tokenizer tok = Tokenizer::load(hub::locate_model(o->model, hub::ModelNeeds::tokenizer_only()));
    const std::string input = read_input(*o);
    if (o->decode) {
      std::cout << tok.decode(parse_id_list(input, "--decode")) << "\n";
      return 0;
    }
    const EncodeOptions opts{.add_special = !o->raw, .parse_special = !o->raw};
    const auto ids = tok.encode(input, opts);
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
    std::cout << "\n";
    return 0;
  };
}

}  // namespace corolla::cli
