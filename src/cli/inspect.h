// `hyla inspect MODEL_DIR | CONFIG.json`: what a checkpoint holds, per layer and role.
#pragma once

#include <cstdint>
#include <string>

namespace hyla::cli {

struct InspectOptions {
  /// > 1: also the memory plan of one rank of that many (hyla inspect --tensor-parallel N)
  int tensor_parallel = 1;
  int64_t budget_mib = 1024;  ///< each rank's state + KV budget for that plan
};

/// Prints the report; returns the process exit code (1 on a bad config, checkpoint or option).
int run_inspect(const std::string& path, const InspectOptions& options = {});

}  // namespace hyla::cli
