// Engine: continuous batching over the runtime pools, one step at a time (DESIGN.md §2, §6).
// The pipeline and its types:
//   request (prompt ids + SamplingParams) -> waiting queue (FCFS)
//     -> admitted: one StatePool slot + KV pages for the prompt; a page more as the sequence grows
//        (prefix cache on: resumed from the deepest cached snapshot of its tokens, sharing the
//        KV pages before it; snapshots left at chunk ends, before the last prompt token, at
//        branch points, while decoding and at the end; see docs/architecture.md)
//        (when the pool runs dry, the most recently admitted request is preempted: slot and
//        pages freed, back to waiting, later recomputed from prompt + its tokens so far)
//     -> each step: one model::Batch (decode tokens + C-aligned prefill chunks) over BatchMemory
//     -> Model::forward_batch -> logits [B, vocab] (to the host) -> Sampler -> TokenEvent per token
//     -> finished (stop token / max tokens / cancelled / error): slot and pages freed at once
// Tensor parallelism (EngineOptions::tensor_parallel): one such engine per rank on its slice of
// the model, each running this same pipeline; rank 0's drives the others (engine_ranks.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "model/batch.h"
#include "model/model.h"
#include "runtime/cache/radix_tree.h"
#include "runtime/cache/snapshot_tiers.h"
#include "runtime/decode_graphs.h"
#include "runtime/memory/kv_page_pool.h"
#include "runtime/memory/memory_plan.h"
#include "runtime/memory/state_pool.h"
#include "runtime/sampling.h"
#include "runtime/spec/draft_model.h"
#include "runtime/spec/ngram_drafter.h"
#include "runtime/tp/rank_group.h"
#include "runtime/tp/rank_threads.h"

namespace hyla::runtime {

/// Prefill chunks end on multiples of this many prompt tokens (the chunk delta rule's C), unless
/// they end the prompt, so the state carried between chunks is the chunk kernel's boundary state.
inline constexpr int64_t kPrefillAlign = 64;

/// The prefix cache (runtime/cache/radix_tree.h, DESIGN.md §6): requests resume from the state
/// snapshot of the longest cached prefix of their tokens and share its KV pages.
struct PrefixCacheOptions {
  bool enabled = false;
  /// Prefill leaves a snapshot at every multiple of this many tokens: inside a chunk from the
  /// chunk kernel's boundary states (Batch::boundary_slots), or where a chunk ends; a multiple of
  /// kPrefillAlign.
  int64_t snapshot_interval = 64;
  /// Decoding leaves a snapshot every this many tokens of the sequence (0: never).
  int64_t decode_interval = 256;
  /// At most this many snapshots on one path from the root (0: no cap); older ones on the path go.
  int64_t max_path_snapshots = 32;
  /// ... of which at most this many from inside chunks (weak in the tree until a match uses
  /// them; the shallowest go: a deeper one on the same path resumes every prompt that passes
  /// them), 0: no cap.
  int64_t max_path_weak_snapshots = 4;
  /// Snapshots that must leave the state pool (their slot is wanted) move to these tiers instead
  /// of being dropped, and a hit copies them back (runtime/cache/snapshot_tiers.h): first
  /// `device_tier_bytes` on the engine's device (int8 only; taken on top of the memory budget),
  /// then `host_bytes` of host memory; 0: no such tier.
  int64_t device_tier_bytes = 0;
  int64_t host_bytes = 0;
  /// The tiers hold int8 snapshots: each SSM state row of d_k with one fp32 scale (at most
  /// max |row| / 254 off per element, kernels/int8_rows.h), conv windows in their dtype; about a
  /// quarter of an f32 slot. Snapshots in the state pool stay exact.
  bool int8_snapshots = false;
};

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
  /// counters and workspace (model::BatchMemory), and copies each step's logits to the host,
  /// where the sampling runs.
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

using RequestId = int64_t;

enum class FinishReason {
  kNone,       ///< not finished
  kStopToken,  ///< generated one of SamplingParams::stop_token_ids (it is the last token)
  kMaxTokens,  ///< generated max_new_tokens
  kCancelled,  ///< Engine::cancel
  kError,      ///< the step's forward failed, the request's logits were not finite, or its
               ///< sequence outgrew the whole KV pool; TokenEvent::error says why
};
const char* finish_reason_name(FinishReason reason);

/// What one step did for one request: a sampled token, a finish, or both.
struct TokenEvent {
  RequestId request = -1;
  int32_t token = -1;  ///< -1 when no token came with the event (cancel, error)
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  std::string error;  ///< reason == kError: what failed (names the request and the step)
  /// SamplingParams::logprobs: the token's log-probability (sampling.h says of which distribution).
  std::optional<double> logprob{};
  /// SamplingParams::top_logprobs > 0: that many most likely tokens, best first, ties -> lower id.
  std::vector<TokenLogprob> top_logprobs{};
  /// Prompt tokens taken from the prefix cache when the request was first admitted (0: none).
  int64_t cached_tokens = 0;
};

struct EngineStats {
  int64_t waiting = 0;   ///< added, not yet admitted
  int64_t running = 0;   ///< admitted: hold a slot and pages (prefilling or decoding)
  int64_t finished = 0;  ///< over the engine's life, cancelled and failed ones included
  int64_t free_slots = 0;
  int64_t free_pages = 0;
  int64_t tokens_generated = 0;  ///< sampled tokens over the engine's life
  int64_t prompt_tokens = 0;  ///< prefill tokens run over the engine's life (recomputed included)
  int64_t preemptions = 0;    ///< running requests sent back to waiting to free KV pages
  int64_t steps = 0;          ///< steps that ran a batch
  int64_t last_step_tokens = 0;  ///< new tokens (decodes + prefill chunks) of the last batch
  // Prefix cache (all zero when it is off):
  int64_t cache_lookups = 0;         ///< admissions that looked a prefix up
  int64_t cache_hits = 0;            ///< ... and resumed from a snapshot
  int64_t cached_tokens = 0;         ///< tokens not recomputed thanks to hits
  int64_t snapshots_taken = 0;       ///< snapshots written
  int64_t cache_evictions = 0;       ///< snapshots evicted (with their nodes' KV when leaves)
  int64_t cache_snapshots = 0;       ///< snapshots held now in state slots
  int64_t cache_snapshot_bytes = 0;  ///< their bytes
  int64_t cache_host_snapshots = 0;  ///< snapshots held in the host tier
  int64_t cache_host_bytes = 0;      ///< their bytes
  int64_t cache_host_moves = 0;      ///< snapshots moved to the host tier
  int64_t cache_host_hits = 0;       ///< hits resumed from the host tier
  int64_t cache_device_tier_snapshots = 0;  ///< snapshots held in the device tier (int8)
  int64_t cache_device_tier_bytes = 0;      ///< their bytes
  int64_t cache_device_tier_moves = 0;      ///< snapshots moved to the device tier
  int64_t cache_device_tier_hits = 0;       ///< hits resumed from the device tier
  int64_t cache_tokens = 0;                 ///< tokens the tree lists now
  int64_t cache_pages = 0;                  ///< KV pages only the cache holds now
  // Speculative decoding (all zero when it is off):
  int64_t spec_steps = 0;            ///< verify steps run
  int64_t spec_sequences = 0;        ///< sequences verified, over those steps
  int64_t spec_draft_tokens = 0;     ///< drafts verified
  int64_t spec_accepted_tokens = 0;  ///< ... that stood
  int64_t spec_emitted_tokens = 0;   ///< tokens verify steps emitted (accepted + one new each)
  /// Bytes the linear layers kept for the last verify step's commit (model/verify.h), and its
  /// sequences: per-draft states grow with K, replay inputs far less.
  int64_t spec_record_bytes = 0;
  int64_t spec_record_sequences = 0;
  /// Draft-model calls that failed (their steps decoded without drafts).
  int64_t spec_draft_failures = 0;
};

/// Owns the pools of one model and schedules requests over them, FCFS. Not thread-safe: one
/// caller drives add_request / cancel / step.
///
/// A step: (1) every running request whose prompt is done gets one decode token; (2) prefills
/// continue or start in arrival order while the step's new tokens stay <= max_batch_tokens. A chunk
/// ends on a multiple of kPrefillAlign prompt tokens or at the prompt's end; one that cannot
/// (too little room left) waits for the next step, and so do the requests after it (FCFS, no
/// overtaking). Admitting a waiting request takes a free slot (zeroed) and the KV pages of the
/// tokens it has to prefill (never more than are free: admission does not preempt).
///
/// Pages by need: before each step every decoding request gets the page its next token needs.
/// When the pool has too few, the most recently admitted running request is preempted (slot and
/// pages freed, `preemptions` counted) until the rest fit. It keeps its prompt, generated tokens
/// and Sampler, and waits in its arrival position (ahead of every later arrival); once admitted
/// again it prefills prompt + generated tokens (the usual chunked prefill) and its last chunk
/// samples its next token, so the token stream goes on unchanged (the same tokens for greedy, the
/// same draws for a seeded sampler) and no event is repeated. A request whose next token would
/// need more pages than the whole pool ends with kError.
/// One step's picks on the host (defined in engine.cpp).
struct StepPicks;

class Engine {
 public:
  /// Plans memory (plan_memory) and builds the pools; prints nothing. Errors: options out of
  /// range; a CUDA device in a build without CUDA, or one that is not visible; a model whose
  /// weights are on another device than options.device; a budget that holds no slot or page; a
  /// plan that needs more than the device's available memory (or options.memory_limit_bytes),
  /// checked before anything is allocated.
  ///
  /// With options.tensor_parallel.ranks = N > 1, `model` is the whole model on the host: each
  /// rank's engine runs its slice (model::shard_model, moved to the rank's device) over pools of
  /// the slice's shapes, and the engine returned is rank 0's. Its add_request / cancel / step do
  /// the same on every rank (step: on every rank's thread at once) and report rank 0's results;
  /// plan() and stats() are rank 0's. A rank whose step fails aborts the group: that step's
  /// requests end with its error, and so does every other request; later add_request calls are
  /// refused with it. Ranks whose events part (a bug) end the same way. Errors, besides the
  /// above: N < 1, a count N does not divide (shard_config names it), a model not on the host,
  /// the MTP head or a draft model as drafter, ranks on a device the group cannot serve (the
  /// default LocalGroup: the host only).
  static Result<std::unique_ptr<Engine>> create(const model::Model& model,
                                                EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const MemoryPlan& plan() const { return plan_; }
  const EngineOptions& options() const { return options_; }

  /// Queues a request. Errors, at once and with nothing taken: an empty prompt, a token outside
  /// the vocabulary, invalid sampling params, a prompt longer than options.max_context (unless
  /// allow_long_context), or a request that could never be admitted (its prompt needs more KV
  /// pages than the whole pool, or the plan has no slot). A request whose prompt fits but whose
  /// generated tokens outgrow the whole pool ends with kError when they do (see step()).
  Result<RequestId> add_request(std::vector<int32_t> prompt, SamplingParams params);
  /// Ends a waiting or running request now and frees its slot and pages; the next step() reports
  /// it (finished, kCancelled). Error: an unknown or already finished id.
  Status cancel(RequestId id);
  /// Runs one batch step and returns its events (empty when idle). A request whose row of logits
  /// holds NaN or inf ends with kError (naming the request, the step and the value); the others
  /// in the batch go on.
  std::vector<TokenEvent> step();
  /// CUDA graph use so far (all zero on the CPU or with cuda_graphs off).
  DecodeGraphStats graph_stats() const;

  /// No request waiting or running, and no event pending.
  bool idle() const;
  EngineStats stats() const;
  /// The engine's bookkeeping, checked (for tests; O(requests + pages)): no slot or page owned
  /// twice, every owned one allocated in its pool, owned + free = the pool, each running request
  /// holding the pages of the tokens it has processed, waiting requests holding nothing.
  Status check_invariants() const;
  /// The MTP head's drafts for the request's next step (SpeculativeOptions::kMtp; for tests), and
  /// the logit each won with: empty when it has none or the request is unknown.
  std::pair<std::vector<int32_t>, std::vector<float>> mtp_drafts(RequestId id) const;

 private:
  struct Request {
    Request(RequestId id_, std::vector<int32_t> prompt_, const SamplingParams& params)
        : id(id_), prompt(std::move(prompt_)), sampler(params) {}
    RequestId id;
    std::vector<int32_t> prompt;
    std::vector<int32_t> generated;
    Sampler sampler;
    int32_t slot = -1;           ///< -1 while waiting (or for a model without linear layers)
    std::vector<int32_t> pages;  ///< KV pages of the tokens so far, in token order
    int64_t processed = 0;       ///< tokens in the slot / pages (prompt and fed-back tokens)
    /// Tokens to prefill before decoding: the prompt; after a preemption, prompt + generated.
    int64_t prefill_len = int64_t(prompt.size());
    int64_t admission = -1;  ///< when it was last admitted (Engine::admissions_), for preemption
    bool admitted = false;
    int64_t cached = -1;  ///< prefix-cache tokens at its first admission (-1: not admitted yet)
    /// Prefix cache: where the prefill stops once to leave a snapshot where the tree branches
    /// (the end of what matched), 0 for none.
    int64_t branch = 0;
    /// Speculative decoding: the drafter over prompt + generated, and the acceptance draws.
    std::unique_ptr<NgramDrafter> drafter;
    std::mt19937_64 spec_rng;
    int64_t spec_k = 0;  ///< adaptive K: its next step's most drafts (0: not verified yet, K)
    /// kMtp: the MTP head's drafts after the last step (for its next tokens).
    std::vector<int32_t> mtp_drafts;
    std::vector<float> mtp_draft_logits;  ///< the logit each draft won with
    bool prefill_done() const { return processed >= prefill_len; }
  };
  /// One sequence of the step's batch.
  struct Scheduled {
    Request* request;
    int64_t begin;  ///< first new token's position (== request->processed)
    int64_t count;  ///< new tokens
  };

  Engine(const model::Model& model, EngineOptions options);
  /// Tensor parallelism (engine_ranks.cpp): every rank's engine on its slice, rank 0's returned.
  static Result<std::unique_ptr<Engine>> create_ranks(const model::Model& whole,
                                                      EngineOptions options);
  /// Rank r's engine (rank 0: this one).
  Engine& rank_engine(int r);
  /// What add_request / cancel / step do on this rank alone (the whole of it without tensor
  /// parallelism).
  Result<RequestId> rank_add_request(std::vector<int32_t> prompt, SamplingParams params);
  Status rank_cancel(RequestId id);
  std::vector<TokenEvent> rank_step();
  /// Tensor parallelism: add_request / cancel / step on every rank.
  Result<RequestId> add_request_on_ranks(std::vector<int32_t> prompt, const SamplingParams& params);
  Status cancel_on_ranks(RequestId id);
  std::vector<TokenEvent> step_ranks();
  /// The group failed: every request of this rank ends with `error`.
  void end_all(const std::string& error, std::vector<TokenEvent>& events);
  /// Every other rank's check_invariants, and its counts equal to this rank's.
  Status check_other_ranks() const;
  Status init_device();
  /// CUDA: the engine's stream, the pinned staging of each step's indices, the decode graphs.
  Status init_stream();
  Status init_memory_plan();
  Status init_state_pool();
  Status init_kv_pool();
  void init_decode_scratch();
  void init_batch_memory();
  /// Sequences a step can hold at most (running requests): min(max_running, state slots).
  int64_t max_step_sequences() const;
  /// Bytes of the fused decode kernel's arrival counters + workspace (CUDA with linear layers;
  /// else 0).
  int64_t decode_scratch_bytes() const;

  /// KV pages of a sequence of `tokens` tokens (0 for a model without attention layers).
  int64_t pages_for(int64_t tokens) const;
  /// Admits `r` when a slot and its prefill's pages can be had (evicting cache entries for them):
  /// from the prefix cache's longest snapshot of its tokens, else from zeros. False: it waits.
  bool try_admit(Request& r);
  /// The request's tokens so far: prompt, then generated.
  std::vector<int32_t> sequence(const Request& r) const;
  /// A state slot: a free one, else one the prefix cache gives back (its least recently used
  /// snapshot moves to the tiers or goes); -1 when neither.
  int32_t take_slot();
  /// Room for one entry in tier `tier`: its least recently used entries move to the next tier
  /// (which makes room the same way) or go. False when every entry there is locked.
  bool make_tier_room(int tier);
  /// For a snapshot inside a chunk (a guess, weak in the tree): a free slot, else one taken from
  /// the least recently used weak snapshot, never from one that proved useful; -1 when neither.
  int32_t take_weak_slot();
  /// `n` pages (one reference each), evicting cache leaves while the pool has too few; empty on
  /// failure (nothing taken).
  std::optional<std::vector<int32_t>> take_pages(int64_t n);
  /// Drops one reference to each page; a page nobody references goes back to the pool.
  void drop_pages(std::span<const int32_t> pages);
  /// Evicts cache entries until `pages` pages are free or nothing more can go.
  void make_room(int64_t pages);
  /// Returns what an eviction freed to the pools.
  void reclaim(const std::vector<int32_t>& slots, const std::vector<int32_t>& pages);
  /// Puts the state of `r` after its processed tokens into the prefix cache (a no-op when the
  /// cache holds that prefix's snapshot already or no slot can be had): a copy in another slot,
  /// or with `adopt` (a request that has ended) its working slot itself (r.slot becomes -1).
  void snapshot(Request& r, bool adopt);
  /// A snapshot the step writes inside a prefill chunk: the state after `position` tokens.
  struct Boundary {
    int64_t position;
    int32_t slot;
  };
  /// Prefix cache, prefill steps: a slot for each state inside a chunk worth keeping (on the
  /// snapshot interval, not cached yet), listed in batch.boundary_slots for the model to fill;
  /// per scheduled sequence (empty when the step writes none).
  std::vector<std::vector<Boundary>> reserve_boundaries(const std::vector<Scheduled>& scheduled,
                                                        model::Batch& batch);
  /// After the step: the filled slots go into the cache under r's tokens (or back to the pool,
  /// when the step's logits for r were not finite or the prefix got cached meanwhile).
  void keep_boundaries(const Request& r, const std::vector<Boundary>& list, bool finite);
  /// Whether the step that brought `r` to its processed count should leave a snapshot.
  bool wants_snapshot(const Request& r) const;
  /// Frees the request's slot and pages and sends it back to waiting, to be recomputed.
  void preempt(Request& r);
  /// Gives every decoding request the page its next token needs, preempting the most recently
  /// admitted requests while the pool has too few; ends those that could never fit (kError).
  void grow_decodes(std::vector<TokenEvent>& events);
  /// A step of decodes alone, when speculation is on and some request has drafts: verifies them
  /// (one forward over 1 + K tokens each), emits the accepted tokens and one more, and rolls the
  /// state and page table back to them. False (nothing done): the step decodes as usual.
  bool speculate(const std::vector<Scheduled>& scheduled, std::vector<TokenEvent>& events);
  /// The most drafts `r` may have this step: K (adaptive: its last verdict's), at most up to its
  /// last token.
  int64_t draft_limit(const Request& r) const;
  /// Each scheduled request's drafts (n-gram or draft model), with the KV pages they need taken.
  std::vector<std::vector<int32_t>> drafts_for(const std::vector<Scheduled>& scheduled);
  /// Cuts `drafts` to what `r`'s KV pages can hold, taking free pages for them first (drafts
  /// never preempt anyone).
  void fit_drafts(Request& r, std::vector<int32_t>& drafts);
  /// Gives `r` the pages of `tokens` tokens from free pages only (speculation's KV rows never
  /// preempt or evict anyone); false, with nothing taken, when too few are free.
  bool extend_pages_from_free(Request& r, int64_t tokens);
  /// The request's token at `position` of prompt + generated.
  static int32_t token_at(const Request& r, int64_t position) {
    const int64_t n = int64_t(r.prompt.size());
    return position < n ? r.prompt[size_t(position)] : r.generated[size_t(position - n)];
  }
  bool mtp_drafting() const {
    return options_.speculative.drafter == SpeculativeOptions::Drafter::kMtp;
  }
  /// kMtp, after a step: the positions one sequence ran and the tokens that follow them.
  struct MtpRun {
    RequestId id;
    int64_t begin;              ///< first position
    int32_t first_row;          ///< its first row in the step's final hiddens
    std::vector<int32_t> next;  ///< the token after each position
  };
  /// kMtp: runs the MTP head over the step's positions (its KV rows), then drafts each decoding
  /// request's next tokens greedily, one depth per draft (Request::mtp_drafts). Failures leave
  /// no drafts (counted), never an error.
  void mtp_draft(const std::vector<MtpRun>& runs);
  /// Frees the request's slot and pages and drops it.
  void release(RequestId id, FinishReason reason, std::vector<TokenEvent>& events,
               std::string error = {});
  std::vector<Scheduled> schedule(std::vector<TokenEvent>& events);
  /// The step's forward pass on the engine's stream, then the pick (engine.cpp's StepPicks).
  Result<StepPicks> run_step(const model::Batch& batch, bool host_rows);
  /// A greedy decode step through its CUDA graph (runtime/decode_graphs.h).
  Result<StepPicks> replay_step(const model::Batch& batch);
  model::Batch build_batch(const std::vector<Scheduled>& scheduled) const;

  /// Tensor parallelism: this rank's slice of the model (model_ refers to it).
  std::unique_ptr<model::Model> own_model_;
  const model::Model& model_;
  EngineOptions options_;
  MemoryPlan plan_;
  std::optional<StatePool> states_;  ///< absent for a model without linear layers
  std::optional<KvPagePool> pages_;  ///< absent for a model without attention layers
  /// References per KV page (requests' page tables + the prefix cache's tokens): a page is
  /// allocated in pages_ exactly while it has one.
  std::vector<int32_t> page_refs_;
  std::optional<RadixTree> cache_;  ///< prefix cache, when enabled and the model allows
  /// Its tiers beyond the pool (PrefixCacheOptions::device_tier_bytes / host_bytes), if any.
  std::optional<SnapshotTiers> tiers_;
  Tensor decode_arrivals_;   ///< CUDA: [max_step_sequences, H] i32 zeros (BatchMemory)
  Tensor decode_workspace_;  ///< CUDA: f32, gated_delta_rule_decode_workspace_bytes (BatchMemory)
  model::BatchMemory memory_;
  Stream stream_{};  ///< CUDA: every step runs on it (create_stream); else none
  std::unique_ptr<model::HostStaging> staging_;  ///< CUDA: memory_.staging
  std::unique_ptr<DecodeGraphs> graphs_;         ///< CUDA with cuda_graphs, where supported
  std::map<RequestId, Request> requests_;        ///< waiting and running, in arrival (id) order
  std::vector<TokenEvent> pending_events_;       ///< cancels, reported by the next step
  RequestId next_id_ = 0;
  int64_t admissions_ = 0;             ///< admissions so far (Request::admission)
  model::VerifyRecord verify_record_;  ///< the linear layers' record of the last verify step
  std::unique_ptr<DraftModelDrafter> draft_model_;  ///< SpeculativeOptions::kDraftModel
  Tensor step_hidden_;  ///< kMtp: the step's final-normed hidden of every row
  EngineStats totals_;  ///< finished, tokens_generated, prompt_tokens, steps, preemptions
  /// Why this rank's last step failed as a whole (its forward pass or the verify commit), which
  /// ends the step's requests; the rank loop then aborts the group. OK when it did not.
  Status step_failure_;
  /// Rank 0 of a tensor-parallel group (engine_ranks.cpp): the other ranks' engines, the group's
  /// communicators and a thread per rank.
  struct Ranks;
  std::unique_ptr<Ranks> ranks_;
};

/// Rank 0's view of its tensor-parallel group. It is destroyed threads first (none left
/// running), then the engines (each with its device current), then the communicators they used.
struct Engine::Ranks {
  ~Ranks();
  std::unique_ptr<RankGroup> group;
  std::vector<std::unique_ptr<Engine>> others;  ///< ranks 1 .. N-1
  std::unique_ptr<RankThreads> threads;
  /// Why the group stopped (a rank's failure, or ranks that parted); OK while it runs.
  Status failure;
};

/// Runs `prompts` through one engine to completion: the generated ids of each prompt, in order.
/// Errors: a refused request or a failed step (its message).
Result<std::vector<std::vector<int32_t>>> generate(const model::Model& model,
                                                   const std::vector<std::vector<int32_t>>& prompts,
                                                   const SamplingParams& params,
                                                   const EngineOptions& options = {});

}  // namespace hyla::runtime
