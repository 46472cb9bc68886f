// `hyla generate`: two modes through the runtime engine (continuous batching, chunked prefill).
//   hyla generate [--model DIR] "prompt text"   text in, text streamed out (needs the tokenizer,
//                                                i.e. a build with PCRE2 + ICU, and
//                                                DIR/tokenizer.json)
//   hyla generate [--model DIR] --prompt-ids "1 2 3" [--prompt-ids ...]   ids in, ids out, batched
// DIR defaults to the embedded demo model (models/hyla-demo, see default_model_dir). --device
// cpu|cuda|auto (default auto: the GPU when one is visible) says where the model runs. A prompt "-"
// (text or ids) is read from stdin. Each refused or failed request is reported on stderr and the
// others run to the end (exit code 1 then). The memory budget is sized from the model and the
// requests unless --budget-mib gives it. Speed: decode tokens over decode time (the steps that ran
// no prompt tokens), in both modes; the prefill (prompt tokens, time to first token) apart.
// --tensor-parallel N runs the model as N slices by head (one engine and thread per rank).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/linear_backends.h"

namespace hyla::cli {

struct GenerateOptions {
  std::string model_dir;                ///< empty: default_model_dir()
  std::string prompt_text;              ///< text mode: the prompt (UTF-8); "-": stdin
  std::vector<std::string> prompt_ids;  ///< ids mode: one prompt each, ids split by spaces/commas
                                        ///< (or newlines); "-": one prompt from stdin
  std::string tokenizer_path;           ///< text mode; empty: <model_dir>/tokenizer.json
  /// Unset: 16 in ids mode, 128 in text mode.
  std::optional<int64_t> max_new_tokens;
  /// Unset: 0 (greedy) in ids mode, 0.8 in text mode (a tiny model loops when greedy).
  std::optional<float> temperature;
  int64_t top_k = 0;
  /// Unset: 1 (off) in ids mode, 0.95 in text mode.
  std::optional<float> top_p;
  int64_t seed = 0;  ///< >= 0
  /// State slots + KV pages. Unset: sized for every prompt at prompt + max_new_tokens at once,
  /// with the prefix cache's snapshots of them (runtime::size_engine), at most 3/4 of the host's
  /// available memory.
  std::optional<int64_t> budget_mib;
  bool json = false;                    ///< one JSON object instead of lines of ids / streamed text
  bool ignore_eos = false;              ///< text mode: keep going past the end-of-text token
  bool allow_long_context = false;      ///< run prompts longer than max_position_embeddings
  std::string device = "auto";          ///< cpu | cuda | auto (CUDA when a device is visible)
  std::string prefix_cache = "on";      ///< on | off: the engine's prefix cache
  int64_t prefix_cache_host_mib = 0;    ///< host memory for snapshots leaving the state pool
  int64_t prefix_cache_device_mib = 0;  ///< device memory for int8 snapshots leaving it
  std::string prefix_cache_int8 = "off";  ///< on | off: snapshots outside the pool in int8
  /// ids mode: each prompt starts once the previous one has finished (so it can reuse them).
  bool sequential = false;
  /// off | ngram | mtp | draft:DIR: drafts verified by the model (cli/speculative.h, engine.h)
  std::string speculative = "off";
  int64_t draft_tokens = 4;          ///< K: drafts per request and step
  std::string spec_mode = "replay";  ///< replay | states: how linear layers roll back
  /// --linear-attn-*-backend: which implementation runs each linear-attention phase
  /// (model/linear_backends.h); all unset: auto.
  model::LinearAttnBackendFlags linear_attn;
  /// --tensor-parallel N: the model split by head over N ranks (runtime::TensorParallelOptions;
  /// on the CPU, N threads of this process), the budget each rank's. 1: off.
  int tensor_parallel = 1;
};

/// Checks every numeric option's range; the message names the option, its value and the range.
Status validate(const GenerateOptions& options);

/// The embedded demo model's folder: $HYLA_DEMO_MODEL when set; else the first of
/// <source dir>/models/hyla-demo (compiled in) and <executable dir>/../../models/hyla-demo that
/// holds a config.json; else the compiled-in path (so that the error names it).
std::string default_model_dir();

/// Runs the command: results to `out` (text mode streams there, flushing after each token), the
/// loading progress, memory plan, tokens/s and errors to `err`; a prompt "-" is read from `in`.
/// Returns the process exit code: 2 on an option out of range, 1 on a bad prompt, a missing model
/// or tokenizer, a build without the tokenizer, a --device this build or machine does not have,
/// or any request refused or failed (the others still run to the end and print).
int run_generate(const GenerateOptions& options, std::FILE* out = stdout, std::FILE* err = stderr,
                 std::FILE* in = stdin);

/// Adds config.json's eos_token_id (an integer or a list) in `model_dir` to `ids`; nothing when
/// the file or the field is missing or malformed.
void add_config_eos_ids(const std::string& model_dir, std::set<int64_t>& ids);

}  // namespace hyla::cli
