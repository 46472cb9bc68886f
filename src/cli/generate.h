// `hyla generate`: two modes through the runtime engine (continuous batching, chunked prefill).
//   hyla generate [--model DIR] "prompt text"   text in, text streamed out (needs the tokenizer,
//                                                i.e. a build with PCRE2 + ICU, and
//                                                DIR/tokenizer.json)
//   hyla generate [--model DIR] --prompt-ids "1 2 3" [--prompt-ids ...]   ids in, ids out, batched
// DIR defaults to the embedded demo model (models/hyla-demo, see default_model_dir).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace hyla::cli {

struct GenerateOptions {
  std::string model_dir;                ///< empty: default_model_dir()
  std::string prompt_text;              ///< text mode: the prompt (UTF-8)
  std::vector<std::string> prompt_ids;  ///< ids mode: one prompt each, ids split by spaces/commas
  std::string tokenizer_path;           ///< text mode; empty: <model_dir>/tokenizer.json
  /// Unset: 16 in ids mode, 128 in text mode.
  std::optional<int64_t> max_new_tokens;
  /// Unset: 0 (greedy) in ids mode, 0.8 in text mode (a tiny model loops when greedy).
  std::optional<float> temperature;
  int64_t top_k = 0;
  /// Unset: 1 (off) in ids mode, 0.95 in text mode.
  std::optional<float> top_p;
  uint64_t seed = 0;
  int64_t budget_mib = 256;  ///< state slots + KV pages
  bool json = false;         ///< one JSON object instead of lines of ids / streamed text
  bool ignore_eos = false;   ///< text mode: keep going past the end-of-text token
};

/// The embedded demo model's folder: $HYLA_DEMO_MODEL when set; else the first of
/// <source dir>/models/hyla-demo (compiled in) and <executable dir>/../../models/hyla-demo that
/// holds a config.json; else the compiled-in path (so that the error names it).
std::string default_model_dir();

/// Runs the command: results to `out` (text mode streams there, flushing after each token), the
/// loading progress, memory plan, tokens/s and errors to `err`. Returns the process exit code (1 on
/// a bad prompt, a missing model or tokenizer, a build without the tokenizer, a failed generation).
int run_generate(const GenerateOptions& options, std::FILE* out = stdout, std::FILE* err = stderr);

}  // namespace hyla::cli
