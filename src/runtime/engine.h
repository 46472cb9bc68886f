// Engine: continuous batching over the runtime pools, one step at a time (DESIGN.md §2, §6).
// The pipeline and its types:
//   request (prompt ids + SamplingParams) -> waiting queue (FCFS)           runtime/request.h
//     -> admitted: one StatePool slot + KV pages for the prompt; a page more as the sequence grows
//        (prefix cache on: resumed from the deepest cached snapshot of its tokens, sharing the
//        KV pages before it; snapshots left at chunk ends, before the last prompt token, at
//        branch points, while decoding and at the end: runtime/cache/prefix_cache.h)
//        (when the pool runs dry, the most recently admitted request is preempted: slot and
//        pages freed, back to waiting, later recomputed from prompt + its tokens so far)
//     -> each step: schedule -> build one model::Batch (decode tokens + C-aligned prefill chunks)
//        -> run Model::forward_batch, logits [B, vocab] picked on their device (step_picks.h;
//        rows to the host only to sample or for log-probabilities) -> process: a TokenEvent per
//        token (accept_token), snapshots, finishes
//     -> finished (stop token / max tokens / cancelled / error): slot and pages freed at once
// Where each part lives: this file and engine.cpp (creation, admission, preemption, the step),
// engine_options.h (the options and their checks), engine_speculative.cpp (verify steps and the
// MTP head's drafts), engine_ranks.cpp (tensor parallelism: one such engine per rank on its slice
// of the model, each running this same pipeline; rank 0's drives the others).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/device_memory.h"
#include "core/error.h"
#include "model/batch.h"
#include "model/model.h"
#include "runtime/cache/prefix_cache.h"
#include "runtime/decode_graphs.h"
#include "runtime/engine_options.h"
#include "runtime/memory/kv_page_pool.h"
#include "runtime/memory/memory_plan.h"
#include "runtime/memory/state_pool.h"
#include "runtime/request.h"
#include "runtime/sampling.h"
#include "runtime/spec/draft_model.h"
#include "runtime/tp/rank_group.h"
#include "runtime/tp/rank_threads.h"

namespace hyla::runtime {

struct StepPicks;

/// Speculative decoding's counters (all zero when it is off).
struct SpeculationStats {
  int64_t steps = 0;            ///< verify steps run
  int64_t sequences = 0;        ///< sequences verified, over those steps
  int64_t draft_tokens = 0;     ///< drafts verified
  int64_t accepted_tokens = 0;  ///< ... that stood
  int64_t emitted_tokens = 0;   ///< tokens verify steps emitted (accepted + one new each)
  /// Bytes the linear layers kept for the last verify step's commit (model/verify.h), and its
  /// sequences: per-draft states grow with K, replay inputs far less.
  int64_t record_bytes = 0;
  int64_t record_sequences = 0;
  /// Draft-model calls that failed (their steps decoded without drafts).
  int64_t draft_failures = 0;
};

struct EngineStats {
  // Requests and pools now.
  int64_t waiting = 0;  ///< added, not yet admitted
  int64_t running = 0;  ///< admitted: hold a slot and pages (prefilling or decoding)
  int64_t free_slots = 0;
  int64_t free_pages = 0;
  // Over the engine's life.
  int64_t finished = 0;          ///< cancelled and failed ones included
  int64_t tokens_generated = 0;  ///< sampled tokens
  int64_t prompt_tokens = 0;     ///< prefill tokens run (recomputed included)
  int64_t preemptions = 0;       ///< running requests sent back to waiting to free KV pages
  int64_t steps = 0;             ///< steps that ran a batch
  int64_t last_step_tokens = 0;  ///< new tokens (decodes + prefill chunks) of the last batch
  PrefixCacheStats cache{};
  SpeculationStats spec{};
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
  Engine(const model::Model& model, EngineOptions options);

  // Creation (engine.cpp), in this order.
  Status init_device();
  Status init_memory_plan();
  Status init_state_pool();
  Status init_kv_pool();
  Status init_prefix_cache();
  void init_decode_scratch();
  void init_batch_memory();
  /// CUDA: the engine's stream, the pinned staging of each step's indices, the decode graphs.
  Status init_stream();
  /// Sequences a step can hold at most (running requests): min(max_running, state slots).
  int64_t max_step_sequences() const;
  /// Bytes of the fused decode kernel's arrival counters + workspace (CUDA with linear layers;
  /// else 0).
  int64_t decode_scratch_bytes() const;

  // Admission, pages and preemption (engine.cpp).
  /// KV pages of a sequence of `tokens` tokens (0 for a model without attention layers).
  int64_t pages_for(int64_t tokens) const;
  /// Admits `r` when a slot and its prefill's pages can be had (evicting cache entries for them):
  /// from the prefix cache's longest snapshot of its tokens, else from zeros. False: it waits.
  bool try_admit(Request& r);
  /// Frees the request's slot and pages and sends it back to waiting, to be recomputed.
  void preempt(Request& r);
  /// Gives every decoding request the page its next token needs, preempting the most recently
  /// admitted requests while the pool has too few; ends those that could never fit (kError).
  void grow_decodes(std::vector<TokenEvent>& events);
  /// Frees the request's slot and pages (a finished one's state goes to the prefix cache) and
  /// drops it.
  void release(RequestId id, FinishReason reason, std::vector<TokenEvent>& events,
               std::string error = {});

  // The step (engine.cpp): schedule -> build -> run -> process results.
  std::vector<Scheduled> schedule(std::vector<TokenEvent>& events);
  model::Batch build_batch(const std::vector<Scheduled>& scheduled) const;
  /// Prefix cache, prefill steps: a slot for each state inside a chunk worth keeping, listed in
  /// batch.boundary_slots for the model to fill; per scheduled sequence (empty when the step
  /// writes none).
  std::vector<std::vector<Boundary>> reserve_boundaries(const std::vector<Scheduled>& scheduled,
                                                        model::Batch& batch);
  /// The step's forward pass on the engine's stream, then the pick (step_picks.h).
  Result<StepPicks> run_step(const model::Batch& batch, bool host_rows);
  /// A greedy decode step through its CUDA graph (runtime/decode_graphs.h).
  Result<StepPicks> replay_step(const model::Batch& batch);
  /// The step's results for each sequence: processed tokens, boundary states and snapshots kept,
  /// the picked token (or the error of a row that is not finite), the MTP head's runs.
  void process_results(const std::vector<Scheduled>& scheduled, const model::Batch& batch,
                       const StepPicks& picks, const std::vector<std::vector<Boundary>>& boundaries,
                       std::vector<TokenEvent>& events);
  /// A whole step failed (`failure`): its boundary slots go back, its requests end with the error.
  void fail_step(const std::vector<Scheduled>& scheduled,
                 const std::vector<std::vector<Boundary>>& boundaries, const Status& failure,
                 std::vector<TokenEvent>& events);
  /// The prefix cache keeps r's state after its processed tokens (a copy in another slot).
  void snapshot(Request& r);
  /// Whether the step that brought `r` to its processed count should leave a snapshot.
  bool wants_snapshot(const Request& r) const;
  /// A stream to run on: the engine's (CUDA), else the current one.
  Stream step_stream() const { return stream_.handle ? stream_ : current_stream(); }

  // Speculative decoding and the MTP head (engine_speculative.cpp).
  bool speculating() const {
    return options_.speculative.drafter != SpeculativeOptions::Drafter::kNone;
  }
  bool mtp_drafting() const {
    return options_.speculative.drafter == SpeculativeOptions::Drafter::kMtp;
  }
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
  /// kMtp, after a step: the positions one sequence ran and the tokens that follow them.
  struct MtpRun {
    RequestId id;
    int64_t begin;              ///< first position
    int32_t first_row;          ///< its first row in the step's final hiddens
    std::vector<int32_t> next;  ///< the token after each position
  };
  /// kMtp: the run of sequence b of a step once the token after its last position is known
  /// (appended to `runs`; nothing while it is not).
  static void add_mtp_run(const Scheduled& s, const model::Batch& batch, size_t b,
                          std::vector<MtpRun>& runs);
  /// kMtp: runs the MTP head over the step's positions (its KV rows), then drafts each decoding
  /// request's next tokens greedily, one depth per draft (Request::mtp_drafts). Failures leave
  /// no drafts (counted), never an error.
  void mtp_draft(const std::vector<MtpRun>& runs);

  // Tensor parallelism (engine_ranks.cpp).
  /// Every rank's engine on its slice, rank 0's returned.
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

  /// Tensor parallelism: this rank's slice of the model (model_ refers to it).
  std::unique_ptr<model::Model> own_model_;
  const model::Model& model_;
  EngineOptions options_;
  MemoryPlan plan_;
  // Memory.
  std::optional<StatePool> states_;  ///< absent for a model without linear layers
  std::optional<KvPagePool> pages_;  ///< absent for a model without attention layers
  /// Slots and pages by need, and the prefix cache over them (made by init_prefix_cache).
  std::unique_ptr<PrefixCache> cache_;
  Tensor decode_arrivals_;   ///< CUDA: [max_step_sequences, H] i32 zeros (BatchMemory)
  Tensor decode_workspace_;  ///< CUDA: f32, gated_delta_rule_decode_workspace_bytes (BatchMemory)
  model::BatchMemory memory_;
  // Running.
  Stream stream_{};  ///< CUDA: every step runs on it (create_stream); else none
  std::unique_ptr<model::HostStaging> staging_;  ///< CUDA: memory_.staging
  std::unique_ptr<DecodeGraphs> graphs_;         ///< CUDA with cuda_graphs, where supported
  std::map<RequestId, Request> requests_;        ///< waiting and running, in arrival (id) order
  std::vector<TokenEvent> pending_events_;       ///< cancels, reported by the next step
  RequestId next_id_ = 0;
  int64_t admissions_ = 0;  ///< admissions so far (Request::admission)
  EngineStats totals_;      ///< the counters over the engine's life; stats() adds the rest
  /// Why this rank's last step failed as a whole (its forward pass or the verify commit), which
  /// ends the step's requests; the rank loop then aborts the group. OK when it did not.
  Status step_failure_;
  // Speculation.
  model::VerifyRecord verify_record_;  ///< the linear layers' record of the last verify step
  std::unique_ptr<DraftModelDrafter> draft_model_;  ///< SpeculativeOptions::kDraftModel
  Tensor step_hidden_;  ///< kMtp: the step's final-normed hidden of every row
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
