// What this machine can do, measured: the fp32 FMA peak, the sgemm rate of the loaded OpenBLAS
// kernels, the read bandwidth over a buffer of a given size, and the demo model's decode rate
// against the bound that bandwidth sets. Used by `hyla selfcheck`.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"

namespace hyla::cli {

struct MachineFigures {
  double fma_peak_gflops = 0;  ///< independent vector FMAs on every thread
  double sgemm_gflops = 0;     ///< one 64 x 256 x 1024 sgemm per thread at a time, all threads
  double read_gbps = 0;        ///< summing `read_bytes` split over the threads, best pass
  int64_t read_bytes = 0;
};

/// Measures the figures above with the current thread count (about a second in all).
MachineFigures measure_machine(int64_t read_bytes);

/// Bytes of the checkpoint's *.safetensors files in `dir` (every weight as stored: a decode step
/// reads each once, the tied embedding whole as the lm_head); 0 when there are none.
int64_t checkpoint_bytes(const std::string& dir);

struct DecodeFigures {
  std::string model;
  double tokens_per_s = 0;  ///< decode tokens / decode time, one sequence, greedy
  int64_t tokens = 0;
};

/// Decodes `new_tokens` greedy tokens of one sequence on the model in `dir` (prompt: 16 fixed
/// token ids).
Result<DecodeFigures> measure_decode(const std::string& dir, int64_t new_tokens);

}  // namespace hyla::cli
