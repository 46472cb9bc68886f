// RadixTree: the prefix cache's index (DESIGN.md §6). A tree over token ids shared by every
// request; it holds ids only, never tensors:
//   per token  the KV page that holds its K/V rows (row position % page_size of that page)
//   per node   at most one state snapshot: a state-pool slot with every linear layer's conv + SSM
//              state after the node's last token
// A hybrid model can resume only where a snapshot exists, so a match is the deepest node on the
// prompt's path that has one; the tokens after it are recomputed. Every leaf has a snapshot (a path
// below the deepest snapshot is useless and is pruned at once), so evicting KV (leaves) and
// evicting snapshots (any unlocked node) are one tree with two LRU orders.
//
// Pages are shared, not owned: the tree holds one reference per token it lists (the caller counts
// them, see `insert` and the `released` lists). A page listed for position p holds correct rows for
// every position of its page up to p along the path (whoever wrote p had them, by writing or by
// copying the page), so a resumed request takes, for each page index j < ceil(m / page_size), the
// page of the path's last position in it: whole pages shared read-only, the partial last one
// copied.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "core/error.h"

namespace hyla::runtime {

/// A node's handle (stable while the node exists); -1 is none.
using CacheNode = int32_t;

struct PrefixMatch {
  int64_t tokens = 0;     ///< resume position m: the snapshot holds the state after tokens[0, m)
  int32_t snapshot = -1;  ///< its slot, -1 when m == 0
  CacheNode node = -1;    ///< the node ending at m (-1 when m == 0)
  /// For each page index j < ceil(m / page_size): the page holding rows [j ps, min((j+1) ps, m)).
  std::vector<int32_t> pages;
  int64_t common = 0;  ///< tokens of the query found in the tree at all (>= tokens)
};

struct RadixTreeStats {
  int64_t nodes = 0;      ///< without the root
  int64_t tokens = 0;     ///< tokens listed (each holds a page reference)
  int64_t snapshots = 0;  ///< nodes with a snapshot
};

class RadixTree {
 public:
  explicit RadixTree(int64_t page_size);

  /// The deepest node with a snapshot whose path is a prefix of tokens[0, limit); its path and
  /// snapshot become the most recently used. m == 0 (no node) is a miss.
  PrefixMatch match(std::span<const int32_t> tokens, int64_t limit);
  /// The node ending exactly at tokens' end, or -1 (no split, no LRU change).
  CacheNode find(std::span<const int32_t> tokens) const;
  /// The node's snapshot slot, -1 for none.
  int32_t snapshot(CacheNode node) const;

  /// Adds the path tokens (position p's KV in pages[p / page_size]), splitting nodes where it
  /// leaves the tree, and puts `snapshot` on the node ending at its end. Tokens already in the
  /// tree keep the tree's pages; each newly listed token appends its page to `referenced` (the
  /// caller adds one reference per entry). Returns false and changes nothing when that node has a
  /// snapshot already (the caller keeps its slot). A `weak` snapshot is a guess (a position on an
  /// interval): thin_weak and cap_path drop weak ones first, and a match makes one strong.
  /// Errors: empty tokens, too few pages.
  Result<bool> insert(std::span<const int32_t> tokens, std::span<const int32_t> pages,
                      int32_t snapshot, std::vector<int32_t>& referenced, bool weak = false);

  /// Locked nodes keep their snapshot and stay (a request copying from it).
  void lock(CacheNode node);
  void unlock(CacheNode node);

  /// Removes the least recently used unlocked snapshot (`leaf_only`: only a leaf's, which frees
  /// KV). A leaf loses its node too, and so do its ancestors left as leaves
  /// without a snapshot. Appends the freed slot to `slots` and one page per unlisted token to
  /// `released`. False when nothing could be evicted.
  bool evict(bool leaf_only, std::vector<int32_t>& slots, std::vector<int32_t>& released);
  /// The least recently used unlocked node whose snapshot `eligible` accepts (a leaf with
  /// `leaf_only`; only a weak one with `weak_only`), -1 when none.
  CacheNode least_recent(bool leaf_only, const std::function<bool(int32_t)>& eligible,
                         bool weak_only = false) const;
  /// Gives a node that has a snapshot another snapshot id (the same state, moved).
  void move_snapshot(CacheNode node, int32_t snapshot);
  /// Drops the node's snapshot as evict() does (the node too when it is a leaf).
  void drop(CacheNode node, std::vector<int32_t>& slots, std::vector<int32_t>& released);
  /// At most `cap` snapshots on the path to `node`: the least recently used of the others on the
  /// path (unlocked, weak ones first) go, as evict() does (0: no cap).
  void cap_path(CacheNode node, int64_t cap, std::vector<int32_t>& slots,
                std::vector<int32_t>& released);
  /// At most `cap` weak snapshots on the path to `node` (its own included): the shallowest others
  /// go (a deeper one resumes every prompt that passes them), as evict() does (0: no cap).
  void thin_weak(CacheNode node, int64_t cap, std::vector<int32_t>& slots,
                 std::vector<int32_t>& released);

  RadixTreeStats stats() const;
  /// Every snapshot slot and every listed page (one entry per token), for the owner's checks.
  void references(std::vector<int32_t>& slots, std::vector<int32_t>& pages) const;
  /// Structure: children keyed by their first token, edges non-empty, one page per token, depth
  /// sums, every leaf with a snapshot, no lock left when `expect_unlocked`.
  Status check_invariants(bool expect_unlocked) const;

 private:
  struct Node {
    CacheNode parent = -1;
    int64_t depth = 0;                      ///< tokens from the root to the node's end
    std::vector<int32_t> tokens;            ///< the edge from the parent
    std::vector<int32_t> pages;             ///< one per edge token
    std::map<int32_t, CacheNode> children;  ///< by first token
    int32_t snapshot = -1;
    bool weak = false;  ///< the snapshot is a guess not matched yet (see insert)
    int32_t locks = 0;
    int64_t used = 0;  ///< LRU clock of the last match / insert through it
    bool alive = false;
  };

  CacheNode new_node();
  /// Splits `node`'s edge after `keep` tokens; returns the new upper node (no snapshot).
  CacheNode split(CacheNode node, int64_t keep);
  /// Removes a leaf without a snapshot and lock, and its ancestors that become such leaves.
  void prune(CacheNode node, std::vector<int32_t>& released);
  void drop_snapshot(CacheNode node, std::vector<int32_t>& slots, std::vector<int32_t>& released);

  int64_t page_size_;
  std::vector<Node> nodes_;  ///< [0] is the root
  std::vector<CacheNode> free_nodes_;
  int64_t clock_ = 0;
};

}  // namespace hyla::runtime
