// `hyla generate --model DIR --prompt-ids "1 2 3" [--prompt-ids ...]`: token ids in, generated ids
// out, every prompt in one batch through the runtime engine (continuous batching, chunked prefill).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace hyla::cli {

struct GenerateOptions {
  std::string model_dir;
  std::vector<std::string> prompt_ids;  ///< one prompt each: ids separated by spaces or commas
  int64_t max_new_tokens = 16;
  float temperature = 0.0f;  ///< 0 = greedy
  int64_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  int64_t budget_mib = 256;  ///< state slots + KV pages
  bool json = false;         ///< one JSON object instead of one line of ids per prompt
};

/// Runs the command: results to `out`, the memory plan, tokens/s and errors to `err`. Returns the
/// process exit code (1 on bad ids, a missing model or a failed generation).
int run_generate(const GenerateOptions& options, std::FILE* out = stdout, std::FILE* err = stderr);

}  // namespace hyla::cli
