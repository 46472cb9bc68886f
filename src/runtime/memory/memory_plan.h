// plan_memory: splits a memory budget between state slots (StatePool) and KV pages (KvPagePool),
// after reserving the per-step scratch that grows with the tokens of a step (Kimi K3's Attention
// Residuals: the bank of block snapshots), and reports the resulting limits (bytes per slot, max
// running requests, max context) through the API, so a caller sees why concurrency is what it is
// (DESIGN.md §6 "Slots").
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>

#include "core/error.h"
#include "model/config.h"
#include "runtime/memory/kv_page_pool.h"
#include "runtime/memory/state_pool.h"

namespace hyla::runtime {

/// A limit that the memory plan does not impose (no pool of that kind).
inline constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();

struct MemoryPlanOptions {
  StatePoolOptions state;  ///< dtypes of the state pool
  KvPagePoolOptions kv;    ///< page size and dtype of the KV pool
  /// New tokens of one step at most (EngineOptions::max_batch_tokens): sizes the per-step scratch.
  int64_t max_batch_tokens = 512;
};

struct MemoryPlan {
  std::string model_type;
  int64_t budget_bytes = 0;
  double state_ratio = 0;
  int64_t state_slots = 0;  ///< 0 for a model without linear layers
  int64_t kv_pages = 0;     ///< 0 for a model without attention layers
  int64_t page_size = 0;    ///< tokens per KV page
  int64_t bytes_per_slot = 0;
  int64_t bytes_per_kv_token = 0;
  /// Per-step scratch per new token (model::attn_res_scratch_bytes_per_token: Attention-Residual
  /// bank + mixture; 0 for models without them), reserved before the split.
  int64_t scratch_bytes_per_token = 0;
  int64_t scratch_bytes = 0;  ///< scratch_bytes_per_token * max_batch_tokens
  /// min(state_slots, kv_pages): a running request owns one slot and at least one page.
  int64_t max_running_requests = 0;
  /// kv_pages * page_size: every page to one request (kNoLimit without attention layers).
  int64_t max_context_tokens = 0;

  int64_t state_bytes() const { return state_slots * bytes_per_slot; }
  int64_t kv_bytes() const { return kv_pages * page_size * bytes_per_kv_token; }
  /// One human-readable paragraph with every number above.
  std::string summary() const;
};

/// Reserves the per-step scratch (scratch_bytes_per_token * options.max_batch_tokens), then
/// splits the rest of `budget_bytes` between the state pool and the KV pool.
///
/// `state_ratio` means what SGLang's --mamba-full-memory-ratio means: the ratio of state-pool bytes
/// to KV-pool bytes (not a fraction of the budget). The state pools get
/// budget * state_ratio / (1 + state_ratio), rounded down to whole slots; the KV pool gets the
/// rest, rounded down to whole pages. With the default 0.9 the state gets 0.9 / 1.9 = 47.4% of the
/// budget and KV 52.6%; raise it for more concurrent requests, lower it for longer contexts.
/// A model without linear layers gives the whole budget to KV, one without attention layers the
/// whole budget to state (state_ratio is then ignored).
///
/// Errors: budget <= 0; state_ratio negative or not finite; max_batch_tokens < 1; scratch that
/// leaves nothing; a share that holds no slot or no page ("plan_memory: budget 1.0 MiB holds no
/// state slot: one slot needs 12.3 MiB ...").
Result<MemoryPlan> plan_memory(const model::ModelConfig& config, int64_t budget_bytes,
                               double state_ratio = 0.9, const MemoryPlanOptions& options = {});

/// Tensor parallelism by head over `ranks` devices (model/tensor_parallel.h): the plan of one rank
/// (its config's shapes, shard_config, in the budget of its device) beside the whole model's plan
/// in the same budget on one device. A rank's state slot is 1/N of the whole one (the linear
/// layers' state is per head); its KV bytes per token are its KV heads' (MLA keeps the whole
/// latent on every rank).
struct TensorParallelPlan {
  int ranks = 1;
  MemoryPlan rank;   ///< one rank, budget_bytes of its device
  MemoryPlan whole;  ///< the unsharded model in the same budget
  /// Lines for `hyla inspect --tensor-parallel N`.
  std::string summary() const;
};
/// Errors: as plan_memory (for either plan) and shard_config (a count N does not divide, named).
Result<TensorParallelPlan> plan_tensor_parallel(const model::ModelConfig& config, int ranks,
                                                int64_t budget_bytes, double state_ratio = 0.9,
                                                const MemoryPlanOptions& options = {});

/// A budget and state ratio for plan_memory (see size_memory).
struct MemorySizing {
  int64_t budget_bytes = 0;
  double state_ratio = 0.9;
  int64_t state_slots = 0;  ///< what the plan then holds at least
  int64_t kv_pages = 0;
};

/// The budget and state ratio under which plan_memory holds every request of `request_tokens`
/// (prompt + max_new_tokens of each) running at once: a state slot each, the KV pages of each
/// one's tokens, and the per-step scratch; with a quarter slot or page of slack on each side, so
/// that neither share rounds down below its count. Errors: no request, a count < 1, or a total
/// beyond int64 bytes.
Result<MemorySizing> size_memory(const model::ModelConfig& config,
                                 std::span<const int64_t> request_tokens,
                                 const MemoryPlanOptions& options = {});

/// "512 B", "1.5 KiB", "12.3 MiB", "80.0 GiB": one decimal, binary units.
std::string format_bytes(int64_t bytes);

}  // namespace hyla::runtime
