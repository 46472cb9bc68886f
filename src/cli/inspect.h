// `hyla inspect MODEL_DIR | CONFIG.json`: what a checkpoint holds, per layer and role.
#pragma once

#include <string>

namespace hyla::cli {

/// Prints the report; returns the process exit code (1 on a bad config or checkpoint).
int run_inspect(const std::string& path);

}  // namespace hyla::cli
