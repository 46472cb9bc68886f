// size_engine (see engine_sizing.h): size_engine_memory for the running requests, then the state
// share grown by the slots of their snapshots.
#include "runtime/engine_sizing.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "model/tensor_parallel.h"

namespace hyla::runtime {

namespace {

/// Both kinds of layer: the only models the engine keeps a prefix cache for.
bool is_hybrid(const model::ModelConfig& config) {
  const auto linear = [](model::MixerKind k) { return model::is_linear_mixer(k); };
  return std::any_of(config.mixers.begin(), config.mixers.end(), linear) &&
         !std::all_of(config.mixers.begin(), config.mixers.end(), linear);
}

}  // namespace

int64_t snapshot_slots(const EngineOptions& options, int64_t tokens) {
  const PrefixCacheOptions& c = options.prefix_cache;
  if (!c.enabled || tokens < 1) return 1;
  const int64_t below = tokens - 1;  // positions 1 .. tokens - 1 (the end is one of the 3 below)
  const auto multiples = [&](int64_t step) { return step > 0 ? below / step : 0; };
  const auto lcm = [](int64_t a, int64_t b) { return a > 0 && b > 0 ? std::lcm(a, b) : 0; };
  const int64_t interval = c.snapshot_interval;
  const int64_t chunk =
      std::max(kPrefillAlign, options.max_batch_tokens / kPrefillAlign * kPrefillAlign);
  const int64_t chunk_ends = lcm(chunk, interval);  // chunk ends on the interval
  const int64_t decode = c.decode_interval;
  // Strong: chunk ends on the interval or decode positions (each position once).
  const int64_t strong =
      multiples(chunk_ends) + multiples(decode) - multiples(lcm(chunk_ends, decode));
  // Weak: the other positions on the interval, at most max_path_weak_snapshots of them.
  const int64_t strong_on_interval =
      multiples(chunk_ends) + multiples(lcm(interval, decode)) - multiples(lcm(chunk_ends, decode));
  int64_t weak = multiples(interval) - strong_on_interval;
  if (c.max_path_weak_snapshots > 0) weak = std::min(weak, c.max_path_weak_snapshots);
  // Before the last prompt token, the branch point, the end.
  int64_t slots = strong + weak + 3;
  if (c.max_path_snapshots > 0) slots = std::min(slots, c.max_path_snapshots);
  return std::max<int64_t>(slots, 1);
}

Result<EngineSizing> size_engine(const model::ModelConfig& config, const EngineOptions& options,
                                 std::vector<int64_t> request_tokens) {
  std::sort(request_tokens.begin(), request_tokens.end(), std::greater<>());
  if (options.max_running >= 1 && int64_t(request_tokens.size()) > options.max_running)
    request_tokens.resize(size_t(options.max_running));
  HYLA_ASSIGN_OR_RETURN(const MemorySizing running,
                        size_engine_memory(config, options, request_tokens));
  EngineSizing sizing{.budget_bytes = running.budget_bytes,
                      .state_ratio = running.state_ratio,
                      .max_running = int64_t(request_tokens.size()),
                      .state_slots = running.state_slots,
                      .kv_pages = running.kv_pages};
  if (!options.prefix_cache.enabled || !is_hybrid(config)) return sizing;

  int64_t slots = 0;
  for (const int64_t n : request_tokens) slots += snapshot_slots(options, n);
  const int64_t extra = slots - int64_t(request_tokens.size());
  if (extra <= 0) return sizing;
  // The running requests' plan, split as plan_memory splits it: scratch, then the state share
  // (slots + a quarter slot of slack) and the KV share. The snapshots' slots go on the state share.
  HYLA_ASSIGN_OR_RETURN(const model::ModelConfig rank,
                        options.tensor_parallel.ranks == 1
                            ? Result<model::ModelConfig>(config)
                            : model::shard_config(config, 0, options.tensor_parallel.ranks));
  const MemoryPlanOptions plan_options = memory_plan_options(options);
  HYLA_ASSIGN_OR_RETURN(const MemoryPlan plan,
                        plan_memory(rank, running.budget_bytes, running.state_ratio, plan_options));
  const double pool = double(running.budget_bytes - plan.scratch_bytes);
  const double kv_share = pool / (1.0 + running.state_ratio);
  const double state_share = pool - kv_share + double(extra) * double(plan.bytes_per_slot);
  const double budget = std::ceil(double(plan.scratch_bytes) + state_share + kv_share);
  if (!(budget < 0.5 * double(std::numeric_limits<int64_t>::max())))
    return Status(ErrorCode::kOutOfMemory,
                  str_cat("size_engine: ", slots, " state slots of ",
                          format_bytes(plan.bytes_per_slot), " and the KV pages of ",
                          request_tokens.size(), " requests need more than int64 bytes"));
  sizing.budget_bytes = int64_t(budget);
  sizing.state_ratio = state_share / kv_share;
  HYLA_ASSIGN_OR_RETURN(const MemoryPlan grown,
                        plan_memory(rank, sizing.budget_bytes, sizing.state_ratio, plan_options));
  int64_t pages = 0;
  for (const int64_t n : request_tokens) pages += (n + options.page_size - 1) / options.page_size;
  if (grown.state_slots < slots || grown.kv_pages < pages)
    return internal_error("size_engine: the plan of ", format_bytes(sizing.budget_bytes), " holds ",
                          grown.state_slots, " slots and ", grown.kv_pages,
                          " pages, fewer than the ", slots, " and ", pages, " it was sized for");
  sizing.state_slots = grown.state_slots;
  sizing.kv_pages = grown.kv_pages;
  return sizing;
}

}  // namespace hyla::runtime
