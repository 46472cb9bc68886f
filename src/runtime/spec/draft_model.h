// Draft-model drafting for speculative decoding (DESIGN.md §6): a small model of the same
// vocabulary, run by our own Model::forward_batch over pools of its own, proposes each request's
// next K tokens greedily. Per request it keeps a state slot and KV pages holding a prefix of the
// request's sequence, so each call runs only the tokens added since the last one (the verify
// step's accepted drafts and its new token), then K - 1 decode steps on a scratch copy of the slot.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "model/batch.h"
#include "model/model.h"
#include "runtime/memory/kv_page_pool.h"
#include "runtime/memory/memory_plan.h"
#include "runtime/memory/state_pool.h"

namespace hyla::runtime {

struct DraftModelOptions {
  /// The draft model's state slots + KV pages + per-step scratch (plan_memory), on its device.
  int64_t memory_budget_bytes = int64_t{64} << 20;
  double state_ratio = 0.9;  ///< state bytes : KV bytes, as EngineOptions::state_ratio
  /// Requests whose state the drafter holds at once; one more evicts the least recently used.
  int64_t max_requests = 64;
  /// Tokens of one catch-up forward call (several requests packed), >= kDraftPrefillAlign.
  int64_t max_batch_tokens = 512;
  DType state_dtype = DType::kF32;  ///< SSM state: f32 | bf16
  DType conv_dtype = DType::kBF16;  ///< conv state: f32 | bf16
  DType kv_dtype = DType::kF32;     ///< KV pages: f32 | bf16
  int64_t page_size = 64;           ///< tokens per KV page
};

/// The MemoryPlanOptions (dtypes, page size, scratch) that `options` implies, pools on `device`.
MemoryPlanOptions draft_memory_plan_options(const DraftModelOptions& options, Device device);

/// A memory budget and state ratio (size_memory) under which the drafter holds every request of
/// `request_tokens` at once (each the length of its sequence + K), each with the scratch slot its
/// drafts run in: no eviction, and every query its K drafts while the sequences stay within
/// those lengths. Errors: those of size_memory.
Result<MemorySizing> size_draft_memory(const model::ModelConfig& config,
                                       const DraftModelOptions& options,
                                       std::span<const int64_t> request_tokens);

/// Catch-up chunks end on multiples of this many tokens unless they end the sequence (the chunk
/// delta rule's C, as the engine's kPrefillAlign): the state between chunks is the chunk
/// kernel's boundary state.
inline constexpr int64_t kDraftPrefillAlign = 64;
/// The most drafts one query may ask for.
inline constexpr int64_t kMaxDraftModelTokens = 256;

/// One request's question: the drafts that follow `tokens`.
struct DraftQuery {
  int64_t id = -1;  ///< the request (any value; the drafter keeps its state under it)
  /// The request's whole sequence so far (prompt + generated), non-empty; the drafts follow its
  /// last token. Read during propose() only.
  std::span<const int32_t> tokens{};
  int64_t k = 0;  ///< drafts wanted, in [0, kMaxDraftModelTokens]
};

struct DraftModelStats {
  int64_t requests = 0;        ///< requests whose state the drafter holds now
  int64_t proposals = 0;       ///< queries answered with k > 0
  int64_t drafts = 0;          ///< tokens proposed
  int64_t prefill_tokens = 0;  ///< catch-up tokens run through the draft model
  int64_t prefill_steps = 0;   ///< catch-up forward calls
  int64_t decode_steps = 0;    ///< forward calls for drafts 2..k
  /// Held states dropped to make room for another request (it re-prefills when it comes back).
  int64_t evictions = 0;
  /// Held states dropped because the query's sequence no longer began with the held tokens.
  int64_t resets = 0;
  /// Queries given fewer than k drafts for lack of slots or pages (none at all included).
  int64_t short_queries = 0;
  /// Queries whose draft logits were NaN or inf (drafting stopped there; a bad catch-up resets).
  int64_t non_finite = 0;
  int64_t used_slots = 0, state_slots = 0;  ///< state pool (0 without linear layers)
  int64_t used_pages = 0, kv_pages = 0;     ///< KV pool (0 without attention layers)
};

/// Proposes greedy drafts of a draft model for many requests at once. Not thread-safe.
///
/// Per request it holds a slot and pages with the state after `tokens`, a prefix of the request's
/// sequence, and the draft model's greedy token after it. propose(): when the held tokens are not
/// a prefix of the query's (the caller's sequence changed), the state cannot be rolled back and
/// is dropped (`resets`); otherwise the tokens past it are prefilled (chunked, several requests
/// per forward call), whose last logits give draft 1. Drafts 2..k come from k - 1 batched decode
/// steps on scratch copies of the slots, writing KV rows at positions n.. of the request's pages:
/// past the held prefix, so the next catch-up rewrites them and the held state stays exact.
///
/// Memory: pools of its own on the model's device, sized by plan_memory. A request that needs a
/// slot or pages when none are free takes them from the least recently used request not in the
/// current call (evicted: it re-prefills later); when even that cannot give them, it gets fewer
/// drafts (none when its catch-up does not fit), never an error.
class DraftModelDrafter {
 public:
  /// Plans memory and builds the pools on draft.device(). Errors: options out of range, a budget
  /// that holds no slot or page (plan_memory's message).
  static Result<std::unique_ptr<DraftModelDrafter>> create(const model::Model& draft,
                                                           DraftModelOptions options = {});
  DraftModelDrafter(const DraftModelDrafter&) = delete;
  DraftModelDrafter& operator=(const DraftModelDrafter&) = delete;

  /// For each query, in order: up to q.k greedy tokens of the draft model after q.tokens (exactly
  /// model::greedy_generate(draft, q.tokens, q.k) up to float summation order; fewer when memory
  /// is short or a logit row is not finite). Runs on the current stream.
  /// Errors, checked before anything runs or changes (naming the query's index and id): empty
  /// tokens, a token outside [0, vocab), k outside [0, kMaxDraftModelTokens], an id twice in one
  /// call. A failed forward call is returned too (the held states it was writing are forgotten).
  Result<std::vector<std::vector<int32_t>>> propose(std::span<const DraftQuery> queries);
  /// The request ended: frees its slot and pages. An id the drafter holds nothing for (never
  /// queried, released, or evicted) is a no-op.
  void release(int64_t id);

  DraftModelStats stats() const;
  const MemoryPlan& plan() const { return plan_; }
  /// The bookkeeping, checked (for tests): every held slot and page allocated and owned once,
  /// owned = used in the pools (no scratch slot left over), pages covering the held tokens.
  Status check_invariants() const;

 private:
  /// What the drafter keeps for one request.
  struct Held {
    int32_t slot = -1;            ///< -1: none (or a model without linear layers)
    std::vector<int32_t> pages;   ///< cover at least `tokens`; extra ones are the last drafts' rows
    std::vector<int32_t> tokens;  ///< the prefix of the request's sequence the slot and pages hold
    int32_t next = -1;            ///< the greedy token after `tokens` (when non-empty)
    int64_t last_use = 0;         ///< DraftModelDrafter::clock_ at its last query
  };
  /// One query of a propose() call being answered.
  struct Work {
    size_t query;
    int64_t id;
    std::span<const int32_t> tokens;
    int64_t k = 0;          ///< drafts granted (memory allowing), <= the query's k
    int32_t scratch = -1;   ///< slot the drafts 2..k run in
    int64_t processed = 0;  ///< catch-up position
    std::vector<int32_t> drafts{};
  };

  DraftModelDrafter(const model::Model& draft, DraftModelOptions options);
  Status init_pools();
  void init_batch_memory();

  Status validate(std::span<const DraftQuery> queries) const;
  /// Takes what query `w` needs (slot, pages of its tokens, then what drafts fit); false when
  /// its catch-up cannot fit.
  bool admit(Work& w, int64_t wanted);
  /// Runs the catch-up and draft steps of one round of admitted queries.
  Status run_round(std::vector<Work>& round);
  Status catch_up(std::vector<Work>& round);
  Status draft(std::vector<Work>& round);
  /// Greedy ids and non-finite counts of each row of `logits` [B, V] (kernels::argmax).
  Result<std::vector<std::pair<int32_t, int32_t>>> picks(const model::Batch& batch);

  /// A free slot, evicting unpinned requests for one; -1 when none can be had.
  int32_t take_slot();
  /// Adds `n` pages to `h` (evicting unpinned requests while too few are free); false, nothing
  /// taken, when they cannot be had.
  bool take_pages(Held& h, int64_t n);
  /// Pages that evictions and surplus trimming could free now, plus the free ones.
  int64_t obtainable_pages() const;
  /// Frees the pages beyond its tokens' of every unpinned request; true when some were freed.
  bool trim_surplus();
  /// What an eviction is for: only requests that hold it are candidates.
  enum class Room : uint8_t { kSlot, kPages, kEntry };
  /// Evicts the least recently used unpinned request that holds `room`; false when none does.
  bool evict_one(Room room);
  void drop(int64_t id);
  /// Forgets the held state (the slot will be zeroed before it is filled again).
  void reset(Held& h);
  int64_t pages_for(int64_t tokens) const;

  const model::Model& model_;
  DraftModelOptions options_;
  MemoryPlan plan_;
  std::optional<StatePool> states_;  ///< absent for a model without linear layers
  std::optional<KvPagePool> pages_;  ///< absent for a model without attention layers
  model::BatchMemory memory_;
  std::map<int64_t, Held> held_;
  /// Requests of the current call that must not be evicted (pending or in the running round).
  std::set<int64_t> pinned_;
  int64_t clock_ = 0;
  DraftModelStats totals_;
};

}  // namespace hyla::runtime
