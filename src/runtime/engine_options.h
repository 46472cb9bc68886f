// The engine's options, one struct per concern (see engine.h for the engine itself):
//   EngineOptions           memory budget and pools, batching, device, context limit, profiling
//   PrefixCacheOptions      the prefix cache (runtime/cache/prefix_cache.h)
//   SpeculativeOptions      speculative decoding (runtime/engine_speculative.cpp)
//   TensorParallelOptions   tensor parallelism (runtime/engine_ranks.cpp)
// and the checks and memory sizing that follow from them.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "model/model.h"
#include "model/verify.h"
#include "runtime/cache/prefix_cache.h"
#include "runtime/memory/memory_plan.h"
#include "runtime/spec/draft_model.h"
#include "runtime/spec/ngram_drafter.h"
#include "runtime/tp/rank_group.h"

namespace hyla::runtime {

/// Prefill chunks end on multiples of this many prompt tokens (the chunk delta rule's C), unless
/// they end the prompt, so the state carried between chunks is the chunk kernel's boundary state.
inline constexpr int64_t kPrefillAlign = 64;

/// Speculative decoding (DESIGN.md §6): decode steps verify drafted tokens, 1 + K per request.
struct SpeculativeOptions {
  enum class Drafter : uint8_t {
    kNone,        ///< plain decoding
    kNgram,       ///< drafts from the request's own tokens (runtime/spec/ngram_drafter.h)
    kDraftModel,  ///< greedy drafts of a small model (runtime/spec/draft_model.h)
    kMtp,         ///< greedy drafts of the model's own MTP head (model/mtp.h)
  };
  Drafter drafter = Drafter::kNone;
  int64_t draft_tokens = 4;  ///< K: drafts per request and step, in [1, kMaxDraftTokens]
  /// Each request drafts at most its last verdict's accepted drafts + 1 (at least 1, at most K):
  /// fewer tokens to verify where drafts fail, back to K as they stand.
  bool adaptive = true;
  /// How the linear layers roll back to the accepted tokens (model/verify.h).
  model::VerifyMode mode = model::VerifyMode::kReplay;
  NgramOptions ngram{};
  /// kDraftModel: the draft model (same vocabulary as the model, weights on the engine's device;
  /// it must outlive the engine) and its own pools' options.
  const model::Model* draft_model = nullptr;
  DraftModelOptions draft{};
};

/// The most drafts one verify step takes per request.
inline constexpr int64_t kMaxDraftTokens = 16;

/// Tensor parallelism by head (model/tensor_parallel.h): the model runs as `ranks` slices, each
/// with its own engine and pools (a rank's state per sequence is 1/N), the ranks' partial sums
/// added by a RankGroup's all-reduce. Every rank schedules the same requests the same way and gets
/// the same logits, so they stay in step; Engine::create returns rank 0's engine, which drives the
/// others (runtime/engine_ranks.cpp).
struct TensorParallelOptions {
  int ranks = 1;  ///< N; 1: the whole model on one engine
  /// Makes the group's communicators; empty: LocalGroup (ranks as threads of this process adding
  /// host tensors, so every rank on the host).
  RankGroupFactory group{};
  /// Rank r's device (N entries); empty: EngineOptions::device for every rank.
  std::vector<Device> devices{};
};

struct EngineOptions {
  int64_t memory_budget_bytes = int64_t{256} << 20;  ///< state slots + KV pages, see plan_memory
  double state_ratio = 0.9;                          ///< state bytes : KV bytes
  int64_t page_size = 64;                            ///< tokens per KV page
  /// New tokens per step (decodes + prefill chunks), >= kPrefillAlign. Every decode runs each
  /// step; prefill chunks fill what is left.
  int64_t max_batch_tokens = 512;
  int64_t max_running = 64;         ///< admitted requests at once (also bounded by the state slots)
  DType state_dtype = DType::kF32;  ///< SSM state: f32 | bf16
  DType conv_dtype = DType::kBF16;  ///< conv state: f32 | bf16
  DType kv_dtype = DType::kF32;     ///< KV pages: f32 | bf16
  /// Where the pools live and the model runs: the host or a CUDA device; the model's weights must
  /// be there too (Model::to). On CUDA the engine also owns the fused decode kernel's arrival
  /// counters and workspace (model::BatchMemory); greedy tokens are picked on the device, and a
  /// step's logits come to the host only for requests that sample or ask for log-probabilities.
  Device device = Device::cpu();
  /// The most the pools may take on `device` (state + KV + per-step scratch), checked by
  /// Engine::create before it allocates; 0: what the device has (the host: host_memory()'s
  /// MemAvailable; CUDA: device_free_memory()'s free bytes).
  int64_t memory_limit_bytes = 0;
  /// Context limit in tokens; 0 = the model's (ModelConfig::max_context, from config.json's
  /// max_position_embeddings; 0 there too = unknown). add_request refuses a longer prompt unless
  /// allow_long_context.
  int64_t max_context = 0;
  bool allow_long_context = false;
  /// Optional profiling: each step's time by layer kind is added here (model/layer_times.h; it
  /// waits for the device at every layer boundary, so steps run slower).
  model::LayerTimes* layer_times = nullptr;
  /// CUDA: replay greedy decode steps as CUDA graphs (runtime/decode_graphs.h) where the model
  /// allows; false: every step runs its kernels one launch at a time.
  bool cuda_graphs = true;
  /// Snapshots live in the state pool's slots that no running request holds, and the cached
  /// prefixes' KV in pages that none holds: both are taken back (least recently used first)
  /// before a request waits or is preempted. Needs linear and attention layers (else ignored).
  PrefixCacheOptions prefix_cache{};
  /// Off by default. A step whose sequences are all decodes verifies each one's drafts; steps
  /// with prefill chunks decode one token each, as without it.
  SpeculativeOptions speculative{};
  /// Off by default (1 rank). With N ranks the memory budget, limit and plan are each rank's.
  TensorParallelOptions tensor_parallel{};
};

/// The MemoryPlanOptions (dtypes, page size, device, scratch) that `options` implies.
MemoryPlanOptions memory_plan_options(const EngineOptions& options);

/// A memory budget and state ratio for `options` (see size_memory) under which every request of
/// `request_tokens` (prompt + max_new_tokens each) can run at once, up to options.max_running of
/// them (the longest); more wait for a free slot. With options.tensor_parallel, one rank's budget
/// (its slice's shapes). Errors: those of size_memory, and of shard_config (a count the ranks do
/// not divide, named).
Result<MemorySizing> size_engine_memory(const model::ModelConfig& config,
                                        const EngineOptions& options,
                                        std::vector<int64_t> request_tokens);

/// Options out of range, or naming what `model` lacks (an MTP head, a draft model of its
/// vocabulary and device): the error Engine::create returns, naming the option.
Status check_engine_options(const EngineOptions& options, const model::Model& model);

}  // namespace hyla::runtime
