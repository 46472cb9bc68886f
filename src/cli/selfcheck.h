// `hyla selfcheck`: checks the delta-rule core on this machine and times it.
#pragma once

#include <cstdint>
#include <string>

namespace hyla::cli {

struct SelfcheckOptions {
  int64_t bench_tokens = 4096;  ///< tokens of the timed single-sequence prefill
  int repeats = 3;              ///< timed repetitions (best is reported)
  int threads = 0;              ///< 0 = all cores
  std::string model_dir;        ///< model whose decode is timed; empty = the embedded demo model
  int64_t decode_tokens = 128;  ///< greedy tokens of that decode
};

/// Runs the checks and the short benchmark, prints a table; returns the process exit code.
int run_selfcheck(const SelfcheckOptions& options);

}  // namespace hyla::cli
