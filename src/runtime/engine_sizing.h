// size_engine: the memory budget, state ratio and max_running a command line gives the engine by
// default (hyla generate, serve, chat, bench --workload prefix): the running requests' state slots
// and KV pages (size_engine_memory) plus room for the snapshots the prefix cache keeps for them,
// so that a snapshot is not evicted as soon as it is taken.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "runtime/engine.h"

namespace hyla::runtime {

/// State slots one request of `tokens` tokens (prompt + new) holds over its life with the prefix
/// cache of `options`: its working slot and the snapshots its path keeps (EngineOptions::
/// prefix_cache; 1 when the cache is off). The prefix cache (cache/prefix_cache.h) leaves snapshots
///   - where a prefill chunk ends on the snapshot interval (wants_snapshot). A prefill alone in its
///     steps ends chunks every max_batch_tokens (aligned down to kPrefillAlign), so these are the
///     multiples of lcm(that chunk, snapshot_interval);
///   - every decode_interval tokens while decoding (wants_snapshot);
///   - on the interval inside a chunk (reserve_boundaries): weak, thinned to the deepest
///     max_path_weak_snapshots of the path (thin_weak);
///   - one before the last prompt token (a repeat of the prompt resumes there), one at a branch
///     point of the tree (where it left what matched), and one at its end, which takes over the
///     working slot (release adopts it): 3 more;
/// and cap_path keeps at most max_path_snapshots on the path. Positions counted are those below
/// `tokens`, each once, as though the whole of `tokens` were prompt for the chunk positions and
/// decoded for the decode ones: a bound for one request in its own steps. When requests share
/// steps, their chunks are shorter and may end on more interval positions; the cache then evicts
/// its least recently used snapshots, weak ones first.
int64_t snapshot_slots(const EngineOptions& options, int64_t tokens);

/// What size_engine gives the engine.
struct EngineSizing {
  int64_t budget_bytes = 0;  ///< EngineOptions::memory_budget_bytes
  double state_ratio = 0.9;  ///< EngineOptions::state_ratio
  int64_t max_running = 0;   ///< EngineOptions::max_running: the requests it was sized for
  int64_t state_slots = 0;   ///< slots the plan then holds at least (0: no linear layers)
  int64_t kv_pages = 0;      ///< pages the plan then holds at least (0: no attention layers)
};

/// A budget under which the longest options.max_running (all, when that is < 1) of
/// `request_tokens` (prompt + max_new_tokens each) run at once, each with its KV pages and
/// snapshot_slots(options, tokens) state slots (its working slot included). The cache keeps a
/// request's pages after it ends (the tokens of its snapshots' paths), so its pages stay counted
/// too. A model without linear or without attention layers has no prefix cache (Engine::create
/// ignores it): then one slot per request, as size_engine_memory. max_running is the count of
/// requests sized for; a user's budget (--budget-mib) is the caller's to prefer. With
/// options.tensor_parallel, one rank's budget. Errors: those of size_engine_memory, and a budget
/// beyond int64 bytes.
Result<EngineSizing> size_engine(const model::ModelConfig& config, const EngineOptions& options,
                                 std::vector<int64_t> request_tokens);

}  // namespace hyla::runtime
