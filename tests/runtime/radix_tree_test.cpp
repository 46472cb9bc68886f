// RadixTree (runtime/cache/radix_tree.h): matching, splitting, the page rule, eviction orders,
// locks and the per-path cap on hand-made trees, then random inserts / evictions against a plain
// list of the cached prefixes.
#include "runtime/cache/radix_tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

namespace hyla::runtime {
namespace {

using Tokens = std::vector<int32_t>;

Tokens range(int32_t first, int32_t n) {
  Tokens t;
  for (int32_t i = 0; i < n; ++i) t.push_back(first + i);
  return t;
}

Tokens cat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

void expect_valid(const RadixTree& tree) {
  const Status s = tree.check_invariants(true);
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST(RadixTreeTest, MatchIsTheDeepestSnapshotWithinTheLimit) {
  RadixTree tree(4);
  std::vector<int32_t> referenced;
  const Tokens a = range(1, 10);  // positions 0..9 on pages 100, 101, 102
  ASSERT_TRUE(tree.insert(a, Tokens{100, 101, 102}, 7, referenced).value());
  EXPECT_EQ(referenced, (std::vector<int32_t>{100, 100, 100, 100, 101, 101, 101, 101, 102, 102}));
  expect_valid(tree);

  PrefixMatch m = tree.match(cat(a, {50}), 11);
  EXPECT_EQ(m.tokens, 10);
  EXPECT_EQ(m.snapshot, 7);
  EXPECT_EQ(m.pages, (std::vector<int32_t>{100, 101, 102}));
  EXPECT_EQ(m.common, 10);
  // The limit keeps the match short of the query's end: no snapshot at or before 9.
  m = tree.match(a, 9);
  EXPECT_EQ(m.tokens, 0);
  EXPECT_EQ(m.snapshot, -1);
  EXPECT_EQ(m.common, 10);
  // A query that leaves the edge midway matches nothing but says how far it agreed.
  m = tree.match(cat(range(1, 5), {99}), 6);
  EXPECT_EQ(m.tokens, 0);
  EXPECT_EQ(m.common, 5);

  // A snapshot inside the edge splits it; the split invents no snapshot of its own.
  referenced.clear();
  ASSERT_TRUE(tree.insert(range(1, 3), Tokens{200}, 8, referenced).value());
  EXPECT_TRUE(referenced.empty());  // every token was listed already
  m = tree.match(a, 9);
  EXPECT_EQ(m.tokens, 3);
  EXPECT_EQ(m.snapshot, 8);
  EXPECT_EQ(m.pages, (std::vector<int32_t>{100}));  // the tree's page, not the new one
  EXPECT_EQ(tree.stats().snapshots, 2);
  EXPECT_EQ(tree.stats().tokens, 10);
  expect_valid(tree);

  // The same prefix again: refused, nothing changes.
  referenced.clear();
  EXPECT_FALSE(tree.insert(range(1, 3), Tokens{300}, 9, referenced).value());
  EXPECT_TRUE(referenced.empty());
  EXPECT_EQ(tree.snapshot(tree.find(range(1, 3))), 8);
}

TEST(RadixTreeTest, PagesComeFromThePathsLastPositionInEachPage) {
  RadixTree tree(4);
  std::vector<int32_t> referenced;
  ASSERT_TRUE(tree.insert(range(1, 10), Tokens{100, 101, 102}, 7, referenced).value());
  // A branch after position 5 (inside page 1): its request copied page 101 into 201 and wrote
  // positions 5.. there.
  const Tokens b = cat(range(1, 5), {90, 91, 92, 93});
  referenced.clear();
  ASSERT_TRUE(tree.insert(b, Tokens{100, 201, 202}, 8, referenced).value());
  EXPECT_EQ(referenced, (std::vector<int32_t>{201, 201, 201, 202}));
  const PrefixMatch m = tree.match(cat(b, {0}), 10);
  EXPECT_EQ(m.tokens, 9);
  // Page 1 holds positions 4..7: the last of them (7) was written into 201.
  EXPECT_EQ(m.pages, (std::vector<int32_t>{100, 201, 202}));
  expect_valid(tree);
}

TEST(RadixTreeTest, EvictionFollowsUseAndPrunesLeavesWithoutSnapshots) {
  RadixTree tree(2);
  std::vector<int32_t> referenced;
  const Tokens root = range(1, 4);
  ASSERT_TRUE(tree.insert(root, Tokens{10, 11}, 1, referenced).value());
  ASSERT_TRUE(tree.insert(cat(root, Tokens{5, 6}), Tokens{10, 11, 12}, 2, referenced).value());
  ASSERT_TRUE(tree.insert(cat(root, Tokens{7, 8}), Tokens{10, 11, 13}, 3, referenced).value());
  expect_valid(tree);
  tree.match(cat(root, {5, 6, 0}), 7);  // the {5, 6} leaf (and the root path) used last

  // Leaves only: {7, 8} is the least recently used leaf; its two tokens' page goes too.
  std::vector<int32_t> slots, released;
  ASSERT_TRUE(tree.evict(true, slots, released));
  EXPECT_EQ(slots, (std::vector<int32_t>{3}));
  EXPECT_EQ(released, (std::vector<int32_t>{13, 13}));
  expect_valid(tree);

  // Any node: with the leaf locked, the inner snapshot goes; its node stays for the leaf below.
  slots.clear();
  released.clear();
  const CacheNode leaf = tree.find(cat(root, {5, 6}));
  tree.lock(leaf);
  ASSERT_TRUE(tree.evict(false, slots, released));
  EXPECT_EQ(slots, (std::vector<int32_t>{1}));
  EXPECT_TRUE(released.empty());
  EXPECT_EQ(tree.stats().tokens, 6);
  EXPECT_FALSE(tree.evict(false, slots, released));  // the only snapshot left is locked
  EXPECT_TRUE(tree.check_invariants(false).ok());
  EXPECT_FALSE(tree.check_invariants(true).ok());  // a lock is left
  tree.unlock(leaf);
  ASSERT_TRUE(tree.evict(true, slots, released));
  // The leaf and its snapshot-less ancestor go: the tree is empty.
  EXPECT_EQ(slots, (std::vector<int32_t>{1, 2}));
  std::sort(released.begin(), released.end());
  EXPECT_EQ(released, (std::vector<int32_t>{10, 10, 11, 11, 12, 12}));
  EXPECT_EQ(tree.stats().nodes, 0);
  expect_valid(tree);
}

// A match makes a weak snapshot strong; a weak-only request finds only weak ones.
TEST(RadixTreeTest, AMatchMakesAWeakSnapshotStrong) {
  RadixTree tree(4);
  std::vector<int32_t> referenced;
  ASSERT_TRUE(tree.insert(range(1, 8), Tokens{0, 1}, 1, referenced).value());         // strong
  ASSERT_TRUE(tree.insert(range(50, 8), Tokens{2, 3}, 2, referenced, true).value());  // weak
  ASSERT_TRUE(tree.insert(range(90, 8), Tokens{4, 5}, 3, referenced, true).value());  // weak
  tree.match(cat(range(50, 8), {0}), 9);  // slot 2 proves useful: strong now
  EXPECT_EQ(tree.least_recent(false, nullptr, /*weak_only=*/true), tree.find(range(90, 8)));
  EXPECT_EQ(tree.least_recent(false, nullptr), tree.find(range(1, 8)));  // plain LRU
  std::vector<int32_t> slots, released;
  ASSERT_TRUE(tree.evict(false, slots, released));
  EXPECT_EQ(slots, (std::vector<int32_t>{1}));
  EXPECT_EQ(tree.least_recent(false, nullptr, /*weak_only=*/true), tree.find(range(90, 8)));
  expect_valid(tree);
}

TEST(RadixTreeTest, ThinningKeepsTheDeepestWeakSnapshotsOfAPath) {
  RadixTree tree(64);
  std::vector<int32_t> referenced, slots, released;
  Tokens path;
  for (int32_t i = 0; i < 6; ++i) {
    path.push_back(i);
    // depth 3 is strong; the others weak
    ASSERT_TRUE(tree.insert(path, Tokens{0}, 10 + i, referenced, i != 2).value());
  }
  tree.thin_weak(tree.find(path), 2, slots, released);
  EXPECT_EQ(slots, (std::vector<int32_t>{10, 11, 13}));  // shallowest weak first; strong 12 stays
  EXPECT_TRUE(released.empty());
  EXPECT_EQ(tree.stats().snapshots, 3);
  expect_valid(tree);
}

TEST(RadixTreeTest, PathCapDropsTheOldestSnapshotsAboveTheNode) {
  RadixTree tree(64);
  std::vector<int32_t> referenced, slots, released;
  Tokens path;
  for (int32_t i = 0; i < 5; ++i) {
    path.push_back(i);
    ASSERT_TRUE(tree.insert(path, Tokens{0}, 10 + i, referenced).value());
  }
  tree.cap_path(tree.find(path), 2, slots, released);
  // A path is used together, so its snapshots tie; the ties go deepest first (the shallow ones are
  // where other paths branch off). The node's own stays.
  EXPECT_EQ(slots, (std::vector<int32_t>{13, 12, 11}));
  EXPECT_TRUE(released.empty());
  EXPECT_EQ(tree.stats().snapshots, 2);
  expect_valid(tree);
}

// Random prefixes over a 3-token alphabet (so paths share and split a lot), random evictions;
// after each operation the match of random queries equals the longest live cached prefix.
TEST(RadixTreeTest, RandomOperationsMatchAListOfThePrefixes) {
  std::mt19937 rng(20261202);
  RadixTree tree(3);
  std::map<int32_t, Tokens> live;  // snapshot slot -> its prefix
  int32_t next_slot = 0;
  const auto random_tokens = [&](int max_len) {
    Tokens t(size_t(1 + int64_t(rng() % uint32_t(max_len))));
    for (int32_t& x : t) x = int32_t(rng() % 3);
    return t;
  };
  for (int op = 0; op < 3000; ++op) {
    SCOPED_TRACE("operation " + std::to_string(op));
    const auto kind = uint32_t(rng() % 10);
    if (kind < 6) {
      const Tokens t = random_tokens(12);
      std::vector<int32_t> pages((t.size() + 2) / 3, 1), referenced;
      const bool had =
          std::any_of(live.begin(), live.end(), [&](const auto& e) { return e.second == t; });
      Result<bool> inserted = tree.insert(t, pages, next_slot, referenced);
      ASSERT_TRUE(inserted.ok());
      EXPECT_EQ(inserted.value(), !had);
      if (inserted.value()) live[next_slot++] = t;
    } else {
      std::vector<int32_t> slots, released;
      const bool evicted = tree.evict(kind < 8, slots, released);
      EXPECT_EQ(evicted, !live.empty());  // no locks; every leaf has a snapshot
      for (const int32_t s : slots) {
        ASSERT_EQ(live.count(s), 1u);
        live.erase(s);
      }
    }
    ASSERT_TRUE(tree.check_invariants(true).ok()) << tree.check_invariants(true).message();
    ASSERT_EQ(tree.stats().snapshots, int64_t(live.size()));
    for (int q = 0; q < 4; ++q) {
      const Tokens query = random_tokens(14);
      const int64_t limit = int64_t(rng() % (query.size() + 1));
      int64_t want = 0;
      int32_t want_slot = -1;
      for (const auto& [slot, t] : live)
        if (int64_t(t.size()) <= limit && int64_t(t.size()) > want &&
            std::equal(t.begin(), t.end(), query.begin())) {
          want = int64_t(t.size());
          want_slot = slot;
        }
      const PrefixMatch m = tree.match(query, limit);
      EXPECT_EQ(m.tokens, want);
      EXPECT_EQ(m.snapshot, want_slot);
    }
  }
}

}  // namespace
}  // namespace hyla::runtime
