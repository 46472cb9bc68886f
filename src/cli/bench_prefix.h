// `hyla bench --workload prefix`: what the prefix cache saves on a synthetic serving workload.
//   chat: C conversations share one system prompt; turn t of each re-sends the system prompt,
//         every earlier user message and reply, and a new user message (the turns of all
//         conversations arrive together, one wave per turn)
//   documents: D long documents, each asked Q questions (doc + question; one wave per question)
// Run with the cache off, then on; then on with a state pool that holds only the running wave and
// two spare slots (the KV pool unchanged), without and with an int8 device tier a quarter the size
// of the slots it lost; each on a fresh engine: prompt tokens, tokens reused from the
// cache, tokens computed, the hit rate (reused / prompt), time to first token per request (from
// its wave's arrival) and the wall time.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <optional>
#include <string>

#include "cli/bench.h"
#include "core/error.h"
#include "model/model.h"

namespace hyla::cli {

/// The workload's rows, each setup, to `out` (a table) and `results` (one JSON object each).
Status run_prefix_workload(const model::Model& model, Device device, const BenchOptions& options,
                           const std::optional<std::string>& commit, std::FILE* out,
                           nlohmann::json& results);

}  // namespace hyla::cli
