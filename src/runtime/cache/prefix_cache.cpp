// PrefixCache (see prefix_cache.h): the radix tree, the snapshot tiers and the KV page references.
#include "runtime/cache/prefix_cache.h"

#include <algorithm>

#include "core/check.h"

namespace hyla::runtime {

PrefixCache::PrefixCache(StatePool* states, KvPagePool* pages, const PrefixCacheOptions& options)
    : states_(states), pages_(pages), options_(options) {
  if (pages_) page_refs_.assign(size_t(pages_->capacity()), 0);
}

Result<std::unique_ptr<PrefixCache>> PrefixCache::create(StatePool* states, KvPagePool* pages,
                                                         const PrefixCacheOptions& options) {
  std::unique_ptr<PrefixCache> cache(new PrefixCache(states, pages, options));
  // The cache resumes from a state snapshot and the KV of the tokens before it: both kinds of
  // layer must be there (a model with only one kind is not a hybrid).
  if (!options.enabled || !states || !pages) return cache;
  cache->tree_.emplace(pages->page_size());
  if (options.device_tier_bytes > 0 || options.host_bytes > 0) {
    HYLA_ASSIGN_OR_RETURN(
        SnapshotTiers tiers,
        SnapshotTiers::create(
            *states, options.int8_snapshots ? SnapshotFormat::kInt8 : SnapshotFormat::kNative,
            options.device_tier_bytes, options.host_bytes));
    cache->tiers_.emplace(std::move(tiers));
  }
  return cache;
}

void PrefixCache::reclaim(const std::vector<int32_t>& slots, const std::vector<int32_t>& pages) {
  for (const int32_t slot : slots) {
    const Status freed = SnapshotTiers::is_tiered(slot) ? tiers_->erase(slot) : states_->free(slot);
    HYLA_CHECK(freed.ok(), "PrefixCache: a cached snapshot: ", freed.message());
  }
  drop_pages(pages);
  totals_.evictions += int64_t(slots.size());
}

void PrefixCache::reference(const std::vector<int32_t>& pages) {
  for (const int32_t page : pages) ++page_refs_[size_t(page)];
}

int32_t PrefixCache::take_slot() {
  if (states_->free_slots() == 0 && tree_) {
    // The least recently used snapshot in a slot moves to the first tier (making room there as
    // make_tier_room does), or goes when there is none or no room can be made.
    const CacheNode node =
        tree_->least_recent(false, [](int32_t id) { return !SnapshotTiers::is_tiered(id); });
    if (node >= 0 && tiers_ && make_tier_room(0)) {
      const int32_t slot = tree_->snapshot(node);
      tree_->move_snapshot(node, tiers_->put(0, *states_, slot));
      const Status freed = states_->free(slot);
      HYLA_CHECK(freed.ok(), freed.message());
      ++(tiers_->is_host_tier(0) ? totals_.host_moves : totals_.device_tier_moves);
    } else if (node >= 0) {
      std::vector<int32_t> slots, pages;
      tree_->drop(node, slots, pages);
      reclaim(slots, pages);
    }
  }
  Result<int32_t> slot = states_->allocate();
  return slot.ok() ? slot.value() : -1;
}

void PrefixCache::free_slot(int32_t slot) {
  // Freeing what this cache handed out cannot fail; a failure is an engine bug.
  const Status freed = states_->free(slot);
  HYLA_CHECK(freed.ok(), freed.message());
}

bool PrefixCache::make_tier_room(int tier) {
  while (!tiers_->has_room(tier)) {
    const CacheNode old =
        tree_->least_recent(false, [&](int32_t id) { return tiers_->tier_of(id) == tier; });
    if (old < 0) return false;  // every entry is locked
    if (tier + 1 < tiers_->count() && make_tier_room(tier + 1)) {
      tree_->move_snapshot(old, tiers_->move(tree_->snapshot(old), tier + 1));
      ++totals_.host_moves;  // only the host tier comes after another
    } else {
      std::vector<int32_t> slots, pages;
      tree_->drop(old, slots, pages);
      reclaim(slots, pages);
    }
  }
  return true;
}

int32_t PrefixCache::take_weak_slot() {
  if (states_->free_slots() == 0) {
    const CacheNode node = tree_->least_recent(
        false, [](int32_t id) { return !SnapshotTiers::is_tiered(id); }, /*weak_only=*/true);
    if (node < 0) return -1;
    std::vector<int32_t> slots, pages;
    tree_->drop(node, slots, pages);
    reclaim(slots, pages);
  }
  Result<int32_t> slot = states_->allocate();
  return slot.ok() ? slot.value() : -1;
}

void PrefixCache::make_room(int64_t pages) {
  while (tree_ && pages_->free_pages() < pages) {
    std::vector<int32_t> slots, released;
    if (!tree_->evict(true, slots, released)) return;
    reclaim(slots, released);
  }
}

std::optional<std::vector<int32_t>> PrefixCache::take_pages(int64_t n) {
  if (n == 0) return std::vector<int32_t>{};
  make_room(n);
  Result<std::vector<int32_t>> pages = pages_->allocate(n);
  if (!pages.ok()) return std::nullopt;
  for (const int32_t page : *pages) page_refs_[size_t(page)] = 1;
  return std::move(pages).value();
}

std::optional<std::vector<int32_t>> PrefixCache::take_pages(int64_t n, const PrefixHit& hit) {
  const int64_t shared = hit.tokens / pages_->page_size();  // whole pages taken as they are
  std::optional<std::vector<int32_t>> fresh = take_pages(n - shared);
  if (!fresh) return std::nullopt;
  std::vector<int32_t> pages(hit.pages.begin(), hit.pages.begin() + shared);
  reference(pages);
  pages.insert(pages.end(), fresh->begin(), fresh->end());
  return pages;
}

void PrefixCache::drop_pages(std::span<const int32_t> pages) {
  std::vector<int32_t> unused;
  for (const int32_t page : pages) {
    int32_t& refs = page_refs_[size_t(page)];
    HYLA_CHECK(refs > 0, "PrefixCache: page ", page, " dropped more often than it was taken");
    if (--refs == 0) unused.push_back(page);
  }
  if (unused.empty()) return;
  // Freeing what this cache allocated cannot fail; a failure is an engine bug.
  const Status freed = pages_->free(unused);
  HYLA_CHECK(freed.ok(), freed.message());
}

PrefixHit PrefixCache::match(std::span<const int32_t> tokens, int64_t limit) {
  if (!tree_) return {};
  PrefixMatch m = tree_->match(tokens, limit);
  ++totals_.lookups;
  if (m.node >= 0) tree_->lock(m.node);
  return PrefixHit{.tokens = m.tokens,
                   .common = m.common,
                   .snapshot = m.snapshot,
                   .node = m.node,
                   .pages = std::move(m.pages)};
}

void PrefixCache::release(const PrefixHit& hit) {
  if (hit.node >= 0) tree_->unlock(hit.node);
}

void PrefixCache::resume(const PrefixHit& hit, int32_t slot, std::span<const int32_t> pages) {
  // Resuming inside a page: the request writes the rest of it, so it takes a copy.
  if (pages_ && hit.tokens % pages_->page_size() != 0) {
    const size_t shared = size_t(hit.tokens / pages_->page_size());
    const Status copied = pages_->copy_page(hit.pages[shared], pages[shared]);
    HYLA_CHECK(copied.ok(), copied.message());
  }
  if (slot >= 0) {
    const int tier = SnapshotTiers::is_tiered(hit.snapshot) ? tiers_->tier_of(hit.snapshot) : -1;
    const Status state = hit.snapshot < 0 ? states_->zero(slot)
                         : tier >= 0      ? tiers_->load(hit.snapshot, *states_, slot)
                                          : states_->copy(hit.snapshot, slot);
    if (tier >= 0) ++(tiers_->is_host_tier(tier) ? totals_.host_hits : totals_.device_tier_hits);
    HYLA_CHECK(state.ok(), state.message());
  }
  release(hit);
  if (hit.tokens > 0) {
    ++totals_.hits;
    totals_.cached_tokens += hit.tokens;
  }
}

bool PrefixCache::wants_snapshot(int64_t position, int64_t prefill_len, int64_t branch) const {
  if (position <= 0) return false;
  if (position < prefill_len)
    return position == prefill_len - 1 || position == branch ||
           position % options_.snapshot_interval == 0;
  return options_.decode_interval > 0 && position % options_.decode_interval == 0;
}

std::vector<int32_t> PrefixCache::reserve_boundaries(std::span<const int32_t> tokens, int64_t begin,
                                                     int64_t count, int64_t chunk) {
  const int64_t entries = count / chunk;
  std::vector<int32_t> slots(size_t(entries), -1);
  // Candidates: on the interval, inside the chunk, not cached yet. Only the deepest few are kept
  // (thin_weak would drop the others at once), in slots that never cost a snapshot that proved
  // useful (take_weak_slot).
  int64_t kept = 0;
  const int64_t cap = options_.max_path_weak_snapshots;
  for (int64_t j = entries - 1; j >= 0 && (cap == 0 || kept < cap); --j) {
    const int64_t p = begin + chunk * (j + 1);
    if (p >= begin + count || p % options_.snapshot_interval != 0) continue;
    const CacheNode node = tree_->find(tokens.first(size_t(p)));
    if (node >= 0 && tree_->snapshot(node) >= 0) continue;
    const int32_t slot = take_weak_slot();
    if (slot < 0) break;
    slots[size_t(j)] = slot;
    ++kept;
  }
  return slots;
}

void PrefixCache::keep_boundaries(std::span<const int32_t> tokens, std::span<const int32_t> pages,
                                  std::span<const Boundary> boundaries, bool finite) {
  for (const Boundary& boundary : boundaries) {
    std::vector<int32_t> referenced;
    Result<bool> inserted = finite ? tree_->insert(tokens.first(size_t(boundary.position)), pages,
                                                   boundary.slot, referenced, /*weak=*/true)
                                   : Result<bool>(false);
    HYLA_CHECK(inserted.ok(), inserted.status().message());
    if (!inserted.value()) {
      free_slot(boundary.slot);
      continue;
    }
    reference(referenced);
    ++totals_.snapshots_taken;
  }
  // The deepest of them stands for the others on the path (thin_weak).
  if (boundaries.empty()) return;
  const CacheNode node = tree_->find(tokens.first(size_t(boundaries.back().position)));
  if (node < 0) return;
  std::vector<int32_t> slots, released;
  tree_->thin_weak(node, options_.max_path_weak_snapshots, slots, released);
  reclaim(slots, released);
}

bool PrefixCache::snapshot(std::span<const int32_t> tokens, std::span<const int32_t> pages,
                           int32_t slot, bool adopt) {
  // Already cached (a hit resumed right here, or an identical request came first): keep that one.
  if (const CacheNode node = tree_->find(tokens); node >= 0 && tree_->snapshot(node) >= 0)
    return false;
  const int32_t kept = adopt ? slot : take_slot();
  if (kept < 0) return false;
  if (!adopt) {
    const Status copied = states_->copy(slot, kept);
    HYLA_CHECK(copied.ok(), copied.message());
  }
  std::vector<int32_t> referenced;
  Result<bool> inserted = tree_->insert(tokens, pages, kept, referenced);
  HYLA_CHECK(inserted.ok(), inserted.status().message());
  if (!inserted.value()) {
    if (!adopt) free_slot(kept);
    return false;
  }
  reference(referenced);
  ++totals_.snapshots_taken;
  std::vector<int32_t> slots, released;
  tree_->cap_path(tree_->find(tokens), options_.max_path_snapshots, slots, released);
  reclaim(slots, released);
  return adopt;
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats s = totals_;
  if (!tree_) return s;
  const RadixTreeStats tree = tree_->stats();
  for (int t = 0; tiers_ && t < tiers_->count(); ++t) {
    const bool host = tiers_->is_host_tier(t);
    (host ? s.host_snapshots : s.device_tier_snapshots) = tiers_->entries(t);
    (host ? s.host_bytes : s.device_tier_bytes) = tiers_->bytes(t);
  }
  s.snapshots = tree.snapshots - s.host_snapshots - s.device_tier_snapshots;
  s.snapshot_bytes = s.snapshots * states_->slot_bytes();
  s.tokens = tree.tokens;
  // Pages only the tree references: all of a page's references are the tree's.
  std::vector<int32_t> slots, listed;
  tree_->references(slots, listed);
  std::vector<int32_t> tree_refs(page_refs_.size(), 0);
  for (const int32_t page : listed) ++tree_refs[size_t(page)];
  for (size_t page = 0; page < page_refs_.size(); ++page)
    s.pages += page_refs_[page] > 0 && tree_refs[page] == page_refs_[page];
  return s;
}

Status PrefixCache::check_invariants(std::span<const int32_t> request_slots,
                                     std::span<const int32_t> request_pages) const {
  const int64_t num_slots = states_ ? states_->capacity() : 0;
  const int64_t num_pages = pages_ ? pages_->capacity() : 0;
  // Per slot: 0 free, 1 a request's, 2 the cache's.
  std::vector<uint8_t> holder(size_t(num_slots), 0);
  for (const int32_t slot : request_slots) holder[size_t(slot)] = 1;
  std::vector<int32_t> page_refs(size_t(num_pages), 0);
  for (const int32_t page : request_pages) ++page_refs[size_t(page)];
  std::vector<int32_t> cache_slots, cache_pages;
  int64_t pooled_snapshots = 0;
  if (tree_) {
    HYLA_RETURN_IF_ERROR(tree_->check_invariants(true));
    tree_->references(cache_slots, cache_pages);
    for (const int32_t page : cache_pages) {
      if (page < 0 || page >= num_pages || !pages_->is_allocated(page))
        return internal_error("the prefix cache lists page ", page, ", not an allocated page of ",
                              num_pages);
      ++page_refs[size_t(page)];
    }
    for (const int32_t slot : cache_slots) {
      if (SnapshotTiers::is_tiered(slot)) {
        if (!tiers_ || tiers_->tier_of(slot) < 0)
          return internal_error("the prefix cache names tier snapshot ", slot,
                                ", which no tier holds");
        continue;
      }
      if (slot < 0 || slot >= num_slots || !states_->is_allocated(slot))
        return internal_error("the prefix cache holds slot ", slot, ", not an allocated slot of ",
                              num_slots);
      if (holder[size_t(slot)] != 0)
        return internal_error("slot ", slot, " is a cached snapshot and ",
                              holder[size_t(slot)] == 1 ? "a running request's working slot"
                                                        : "another cached snapshot");
      holder[size_t(slot)] = 2;
      ++pooled_snapshots;
    }
  }
  int64_t held_pages = 0;
  for (int64_t page = 0; page < num_pages; ++page) {
    if (page_refs[size_t(page)] != page_refs_[size_t(page)])
      return internal_error("page ", page, " has ", page_refs[size_t(page)],
                            " holders but a count of ", page_refs_[size_t(page)]);
    held_pages += page_refs[size_t(page)] > 0;
  }
  const int64_t held_slots = int64_t(request_slots.size()) + pooled_snapshots;
  if (states_ && held_slots + states_->free_slots() != num_slots)
    return internal_error(held_slots, " slots held (", pooled_snapshots, " by the cache) + ",
                          states_->free_slots(), " free != ", num_slots);
  if (pages_ && held_pages + pages_->free_pages() != num_pages)
    return internal_error(held_pages, " pages held + ", pages_->free_pages(),
                          " free != ", num_pages);
  return ok_status();
}

}  // namespace hyla::runtime
