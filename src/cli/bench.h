// `hyla bench`: the engine's speed on one model and device, in the cases of llama-bench and
// llama-batched-bench, with random prompt ids (fixed seed) and greedy sampling:
//   prefill_<P>        one prompt of P tokens (chunks of --step-tokens): P / prefill time
//   decode_depth_<D>   one sequence after a prompt of D tokens (D = 0: one token), --new tokens:
//                      decode tokens / decode time
//   batch_decode_<B>   B sequences of --batch-prompt tokens, prefilled together in one step, then
//                      --new tokens each: decode tokens of all B / decode time
// Decode time is the time of the steps that ran no prompt token (each ends with the logits on the
// host, so it includes the device's work). Prints a markdown table; --json FILE writes one object
// per case (name, device, model, tokens, seconds, tokens_per_s, commit when known).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/linear_backends.h"

namespace hyla::cli {

struct BenchOptions {
  std::string model_dir;  ///< empty: default_model_dir()
  std::string device = "auto";
  std::vector<int64_t> prompt = {512, 4096};    ///< prefill cases: prompt tokens
  std::vector<int64_t> depth = {0, 4096};       ///< one-sequence decode cases: tokens before
  std::vector<int64_t> batch = {1, 4, 16, 64};  ///< aggregate decode cases: sequences
  int64_t batch_prompt = 512;                   ///< prompt tokens of each batched sequence
  int64_t new_tokens = 128;                     ///< generated tokens per sequence (>= 2)
  int64_t step_tokens = 2048;                   ///< prefill chunk (EngineOptions::max_batch_tokens)
  std::string json_path;                        ///< empty: no JSON file
  /// standard: the cases above; prefix: the prefix cache's workload (cli/bench_prefix.h), cache
  /// off and on (--new is its reply length, --step-tokens its chunk); speculative: decode with
  /// and without n-gram speculation (cli/bench_spec.h; --batch, --new).
  std::string workload = "standard";
  /// Also run every case with the time split by layer kind (model/layer_times.h; synchronised at
  /// each layer, so slower): a second table of ms per step, and "layer_ms_per_step" in the JSON.
  bool profile = false;
  /// The standard workload's cases with the model split by head over N ranks (threads on the
  /// host, one GPU each on CUDA; cli/device.h tensor_parallel_options); 1: off.
  int tensor_parallel = 1;
  /// --linear-attn-*-backend: which implementation runs each linear-attention phase
  /// (model/linear_backends.h); all unset: auto.
  model::LinearAttnBackendFlags linear_attn;
};

/// Checks every option's range; the message names the option, its value and the range.
Status validate(const BenchOptions& options);

/// Runs every case: the table to `out`, progress and errors to `err`. Returns the exit code: 2 on
/// an option out of range, 1 on a missing model, a --device this build or machine lacks, a case
/// that failed (the others still run) or a JSON file that could not be written.
int run_bench(const BenchOptions& options, std::FILE* out = stdout, std::FILE* err = stderr);

}  // namespace hyla::cli
