// `hyla bench --workload speculative`: decode speed with and without n-gram speculation.
//   prompts: "repetitive" (a random 32-token stretch repeated 8 times: the model's continuation
//   follows the pattern, the drafts stand) and "random" (random ids: the drafts seldom stand),
//   B sequences at once (B from --batch), --new greedy tokens each
//   setups: speculation off; n-gram drafts (K 4, adaptive) with each rollback mode (replay, step
//   states), and replay with a fixed K
// Each row a fresh engine; decode tokens/s counts the tokens after each sequence's first over the
// time from the first token to the end; the speed-up is against "off" for the same prompts and B
// in the same run. Also: the acceptance rate (accepted / drafted), the mean tokens a verified
// sequence emitted, and the bytes the linear layers keep per verified sequence for the commit.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <optional>
#include <string>

#include "cli/bench.h"
#include "core/error.h"
#include "model/model.h"

namespace hyla::cli {

/// The workload's rows to `out` (a table) and `results` (one JSON object each).
Status run_speculative_workload(const model::Model& model, Device device,
                                const BenchOptions& options,
                                const std::optional<std::string>& commit, std::FILE* out,
                                nlohmann::json& results);

}  // namespace hyla::cli
