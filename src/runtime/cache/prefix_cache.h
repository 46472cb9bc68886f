// PrefixCache: the prefix cache's policy over the engine's pools (DESIGN.md §6). It owns the radix
// tree (cache/radix_tree.h: token ids -> KV pages + at most one state snapshot per node), the
// snapshot tiers beyond the state pool (cache/snapshot_tiers.h) and the reference counts of the KV
// pages, which running requests and the tree share. Its interface is in ids only (tokens, slot
// ids, page ids); the engine decides when (admission, the step's chunk ends, a request's end) and
// asks it to:
//   match          the deepest cached snapshot of a request's tokens (locked until resume /
//   release) resume         copy that snapshot into the request's slot, share the pages before it
//   take_slot / take_pages / make_room   slots and pages by need, the least recently used cache
//                  entries giving theirs back first (a snapshot moves down the tiers or goes)
//   reserve_boundaries / keep_boundaries  slots for the states inside a prefill chunk, then those
//                  the step filled into the tree
//   snapshot       keep a request's state after its processed tokens: a copy, or (adopt) the
//                  working slot of a request that has ended
// With the cache off (or a model that is not a hybrid: it needs both pools) there is no tree: it
// only hands out slots and pages, one reference each.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/error.h"
#include "runtime/cache/radix_tree.h"
#include "runtime/cache/snapshot_tiers.h"
#include "runtime/memory/kv_page_pool.h"
#include "runtime/memory/state_pool.h"

namespace hyla::runtime {

/// The prefix cache: requests resume from the state snapshot of the longest cached prefix of their
/// tokens and share its KV pages.
struct PrefixCacheOptions {
  bool enabled = false;
  /// Prefill leaves a snapshot at every multiple of this many tokens: inside a chunk from the
  /// chunk kernel's boundary states (Batch::boundary_slots), or where a chunk ends; a multiple of
  /// kPrefillAlign (engine_options.h).
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

/// Counters over the cache's life and what it holds now (all zero when it is off).
struct PrefixCacheStats {
  int64_t lookups = 0;                ///< admissions that looked a prefix up
  int64_t hits = 0;                   ///< ... and resumed from a snapshot
  int64_t cached_tokens = 0;          ///< tokens not recomputed thanks to hits
  int64_t snapshots_taken = 0;        ///< snapshots written
  int64_t evictions = 0;              ///< snapshots evicted (with their nodes' KV when leaves)
  int64_t snapshots = 0;              ///< snapshots held now in state slots
  int64_t snapshot_bytes = 0;         ///< their bytes
  int64_t host_snapshots = 0;         ///< snapshots held in the host tier
  int64_t host_bytes = 0;             ///< their bytes
  int64_t host_moves = 0;             ///< snapshots moved to the host tier
  int64_t host_hits = 0;              ///< hits resumed from the host tier
  int64_t device_tier_snapshots = 0;  ///< snapshots held in the device tier (int8)
  int64_t device_tier_bytes = 0;      ///< their bytes
  int64_t device_tier_moves = 0;      ///< snapshots moved to the device tier
  int64_t device_tier_hits = 0;       ///< hits resumed from the device tier
  int64_t tokens = 0;                 ///< tokens the tree lists now
  int64_t pages = 0;                  ///< KV pages only the cache holds now
};

/// What match() found: where the request resumes, and what it resumes from.
struct PrefixHit {
  int64_t tokens = 0;          ///< resume position m: the snapshot holds the state after m tokens
  int64_t common = 0;          ///< tokens of the query found in the tree at all (>= tokens)
  int32_t snapshot = -1;       ///< a slot or tier id, -1 when m == 0
  CacheNode node = -1;         ///< the node ending at m, locked until resume() or release()
  std::vector<int32_t> pages;  ///< the pages of rows [0, m), one per page index
};

/// A snapshot the step writes inside a prefill chunk: the state after `position` tokens.
struct Boundary {
  int64_t position;
  int32_t slot;
};

class PrefixCache {
 public:
  /// The cache over `states` and `pages` (null: the model has no layer of that kind; both must
  /// outlive it), caching when options.enabled and both are there. Errors: the tiers'
  /// (SnapshotTiers::create: a device tier without int8, a budget that holds no entry).
  static Result<std::unique_ptr<PrefixCache>> create(StatePool* states, KvPagePool* pages,
                                                     const PrefixCacheOptions& options);
  bool enabled() const { return tree_.has_value(); }

  // Slots and pages for running requests.
  /// A state slot: a free one, else one the cache gives back (its least recently used snapshot
  /// moves to the tiers or goes); -1 when neither.
  int32_t take_slot();
  /// Frees a slot take_slot gave (a request's working slot, or a boundary slot left unfilled).
  void free_slot(int32_t slot);
  /// `n` pages (one reference each), evicting cache leaves while the pool has too few; nullopt on
  /// failure (nothing taken).
  std::optional<std::vector<int32_t>> take_pages(int64_t n);
  /// The pages of a sequence resuming at `hit` and growing to `n` pages: the hit's whole pages
  /// (one more reference each), then fresh ones as take_pages(); nullopt (nothing taken) when too
  /// few can be had.
  std::optional<std::vector<int32_t>> take_pages(int64_t n, const PrefixHit& hit);
  /// Drops one reference to each page; a page nobody references goes back to the pool.
  void drop_pages(std::span<const int32_t> pages);
  /// Evicts cache entries until `pages` pages are free or nothing more can go.
  void make_room(int64_t pages);

  // Admission.
  /// The deepest cached snapshot whose path is a prefix of tokens[0, limit), locked (none when
  /// the cache is off).
  PrefixHit match(std::span<const int32_t> tokens, int64_t limit);
  /// Starts a request at `hit` (none: from zeros): its state slot `slot` (-1: no linear layers)
  /// gets the snapshot (from the pool or a tier, dequantised) or zeros; `pages` (from
  /// take_pages(n, hit)) get a copy of the partial page the hit ends in, which the request writes
  /// on. Unlocks the hit.
  void resume(const PrefixHit& hit, int32_t slot, std::span<const int32_t> pages);
  /// Unlocks a hit that is not resumed (the request waits).
  void release(const PrefixHit& hit);

  // Snapshots.
  /// Whether a request that has processed `position` tokens of a prefill of `prefill_len` (and a
  /// branch point at `branch`, 0 for none) should leave a snapshot there: on the snapshot
  /// interval, before the prefill's last token and at the branch point while prefilling; on the
  /// decode interval after.
  bool wants_snapshot(int64_t position, int64_t prefill_len, int64_t branch) const;
  /// Slots for the states a prefill chunk of tokens [begin, begin + count) of `tokens` passes at
  /// multiples of `chunk` inside it (entry j: after begin + chunk (j + 1) tokens; the chunk's end
  /// is not one: wants_snapshot takes that one after the step), -1 where none is kept. Kept: the
  /// deepest few (max_path_weak_snapshots) on the snapshot interval not cached yet, each in a slot
  /// that never costs a snapshot that proved useful.
  std::vector<int32_t> reserve_boundaries(std::span<const int32_t> tokens, int64_t begin,
                                          int64_t count, int64_t chunk);
  /// After the step: the filled boundary slots go into the tree under `tokens` (or back to the
  /// pool, when `finite` is false or the prefix got cached meanwhile); the deepest stands for the
  /// others on its path.
  void keep_boundaries(std::span<const int32_t> tokens, std::span<const int32_t> pages,
                       std::span<const Boundary> boundaries, bool finite);
  /// Keeps the state in `slot` after `tokens` (KV in `pages`): a copy in another slot, or with
  /// `adopt` that slot itself. A no-op when that prefix has a snapshot already or no slot can be
  /// had. True when the cache took `slot` (adopt only).
  bool snapshot(std::span<const int32_t> tokens, std::span<const int32_t> pages, int32_t slot,
                bool adopt);

  PrefixCacheStats stats() const;
  /// The tree's structure, and the pools against what holds them: every slot and page the cache
  /// lists allocated, no slot both a cached snapshot and one of `request_slots`, every page's
  /// count = its entries in `request_pages` + the tree's, held + free = each pool's capacity.
  Status check_invariants(std::span<const int32_t> request_slots,
                          std::span<const int32_t> request_pages) const;

 private:
  PrefixCache(StatePool* states, KvPagePool* pages, const PrefixCacheOptions& options);
  /// Returns what an eviction freed to the pools.
  void reclaim(const std::vector<int32_t>& slots, const std::vector<int32_t>& pages);
  /// Room for one entry in tier `tier`: its least recently used entries move to the next tier
  /// (which makes room the same way) or go. False when every entry there is locked.
  bool make_tier_room(int tier);
  /// For a snapshot inside a chunk (a guess, weak in the tree): a free slot, else one taken from
  /// the least recently used weak snapshot, never from one that proved useful; -1 when neither.
  int32_t take_weak_slot();
  /// Takes a reference to each page the tree newly lists.
  void reference(const std::vector<int32_t>& pages);

  StatePool* states_;
  KvPagePool* pages_;
  PrefixCacheOptions options_;
  std::optional<RadixTree> tree_;       ///< when caching
  std::optional<SnapshotTiers> tiers_;  ///< its tiers beyond the pool, if any
  /// References per KV page (requests' page tables + the tree's tokens): a page is allocated in
  /// the pool exactly while it has one.
  std::vector<int32_t> page_refs_;
  PrefixCacheStats totals_;  ///< the counters; stats() adds what it holds now
};

}  // namespace hyla::runtime
