// Tokenizer speed on one core: encode and decode MB/s on generated English text, for each external vocabulary
// (COROLLA_SHARED_TESTDATA/tokenizers/ggml-vocab-*.gguf) and, as a ratio, against the 5 MB/s goal. "encode" is
// the first pass over the text (empty word cache); "warm cache" the best of three more passes.
//   bench_tokenizer [megabytes=4] [vocab-dir] [write-text-to]
// The text is made from a fixed-seed random walk over the words of a paragraph written for this benchmark, with
// numbers and punctuation, so that word frequencies look like prose rather than one paragraph repeated.
#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.hpp"
#include "model/weights/gguf_file.hpp"

using namespace corolla;

namespace {

constexpr const char* kParagraph =
    "The harbour master kept a careful record of every vessel that entered the bay. In the spring the fishing "
    "boats came first, low in the water and smelling of tar, and after them the traders from the southern coast "
    "with their cargo of timber, wool, salt and wine. She wrote down the name of each ship, the hour of its "
    "arrival, the depth of the channel and the direction of the wind. Her ledgers filled a whole shelf of the "
    "office, and people from the town often asked her to settle arguments about storms that nobody else could "
    "remember clearly. It was not an exciting life, she admitted, but it was an orderly one, and she had come to "
    "believe that order was a kind of kindness: it let other people rely on you without having to think about "
    "it. When the new lighthouse was built on the northern headland, engineers arrived with drawings and "
    "instruments, and they were surprised to find that her numbers matched their measurements almost exactly. "
    "They offered her a position in the capital, with a larger salary and a view of the river, but she "
    "declined politely, saying that somebody had to watch the water here, and that the gulls would miss her.";

std::string english_text(size_t bytes) {
  std::vector<std::string> words;
  std::istringstream in(kParagraph);
  for (std::string w; in >> w;) {
    while (!w.empty() && (w.back() == ',' || w.back() == '.' || w.back() == ':')) w.pop_back();
    words.push_back(w);
  }
  std::mt19937 rng(12345);
  std::uniform_int_distribution<size_t> pick(0, words.size() - 1);
  std::uniform_int_distribution<int> len(6, 24), roll(0, 99);
  std::string text;
  text.reserve(bytes + 256);
  while (text.size() < bytes) {
    const int n = len(rng);
    for (int i = 0; i < n; ++i) {
      std::string w = words[pick(rng)];
      if (i == 0 && w[0] >= 'a' && w[0] <= 'z') w[0] = static_cast<char>(w[0] - 'a' + 'A');
      text += w;
      const int r = roll(rng);
      if (r < 3) {
        text += ' ';
        text += std::to_string(rng() % 100000);
      }
      if (i + 1 < n) text += r < 12 ? ", " : " ";
    }
    text += roll(rng) < 15 ? ".\n\n" : ". ";
  }
  return text;
}

// CPU time of this thread: on a machine shared with other work, it measures one core's throughput where wall
// time would measure the share of a core the scheduler gave us.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
double seconds_since(double t0) { return cpu_seconds() - t0; }

}  // namespace

int main(int argc, char** argv) {
  const double megabytes = argc > 1 ? std::atof(argv[1]) : 4.0;
  const std::filesystem::path dir =
      argc > 2 ? std::filesystem::path(argv[2]) : std::filesystem::path(COROLLA_SHARED_TESTDATA) / "tokenizers";
  const std::string text = english_text(static_cast<size_t>(megabytes * 1e6));
  if (argc > 3) std::ofstream(argv[3], std::ios::binary) << text;  // to time other tokenizers on the same text
  const double mb = text.size() / 1e6;
  std::printf("tokenizer benchmark: %.2f MB of generated English text, one thread, MB per CPU-second\n", mb);
  std::printf("%-10s %8s %9s %11s %11s %11s %9s\n", "vocab", "load s", "tokens", "encode MB/s", "warm cache",
              "decode MB/s", "vs 5 MB/s");
  bool any = false;
  for (const char* name : {"gpt-2", "llama-bpe", "llama-spm", "qwen2"}) {
    const auto path = dir / ("ggml-vocab-" + std::string(name) + ".gguf");
    if (!std::filesystem::exists(path)) continue;
    any = true;
    auto t0 = cpu_seconds();
    const Tokenizer tok = Tokenizer::from_gguf(*GgufFile::open(path.string()));
    const double load = seconds_since(t0);
    const EncodeOptions raw{.add_special = false, .parse_special = false};
    t0 = cpu_seconds();
    const auto ids = tok.encode(text, raw);
    const double first = seconds_since(t0);
    // Warm passes (the word cache is filled): the best of three, as other processes share the machine.
    double second = 1e30;
    std::vector<int32_t> again;
    for (int pass = 0; pass < 3; ++pass) {
      t0 = cpu_seconds();
      again = tok.encode(text, raw);
      second = std::min(second, seconds_since(t0));
    }
    t0 = cpu_seconds();
    const std::string back = tok.decode(ids);
    const double dec = seconds_since(t0);
    if (again != ids || back != text) {
      std::fprintf(stderr, "%s: encode/decode is not consistent\n", name);
      return 1;
    }
    std::printf("%-10s %8.2f %9zu %11.1f %11.1f %11.1f %8.1fx\n", name, load, ids.size(), mb / first, mb / second,
                mb / dec, mb / first / 5.0);
  }
  if (!any) std::printf("no vocabularies found in %s\n", dir.string().c_str());
  return 0;
}
