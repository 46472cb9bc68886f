// PrefixCache on its own (runtime/cache/prefix_cache.h), over real pools of the golden Qwen3-Next
// config: the slots and pages it hands out and their references, a snapshot matched and resumed
// (whole pages shared, the partial one copied, the state copied byte for byte), eviction when the
// pool runs dry, and an invariant check that catches books that do not add up.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "memory_test_configs.h"
#include "runtime/cache/prefix_cache.h"

namespace hyla::runtime {
namespace {

using testing::test_config;

constexpr int64_t kPageSize = 16;

struct Pools {
  StatePool states;
  KvPagePool pages;
};

Pools make_pools(int64_t slots, int64_t pages) {
  const model::ModelConfig c = test_config("golden/qwen3_next");
  Result<StatePool> s = StatePool::create(c, slots, {.conv_dtype = DType::kF32});
  Result<KvPagePool> p =
      KvPagePool::create(c, pages, {.page_size = kPageSize, .dtype = DType::kF32});
  HYLA_CHECK(s.ok() && p.ok(), "test pools");
  return Pools{std::move(s).value(), std::move(p).value()};
}

std::unique_ptr<PrefixCache> make_cache(Pools& pools, bool enabled) {
  Result<std::unique_ptr<PrefixCache>> cache =
      PrefixCache::create(&pools.states, &pools.pages, PrefixCacheOptions{.enabled = enabled});
  HYLA_CHECK(cache.ok(), cache.status().message());
  return std::move(cache).value();
}

std::vector<int32_t> iota_tokens(int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 1);
  return t;
}

TEST(PrefixCacheBooks, OffHandsOutSlotsAndPagesWithOneReferenceEach) {
  Pools pools = make_pools(2, 4);
  std::unique_ptr<PrefixCache> cache = make_cache(pools, /*enabled=*/false);
  EXPECT_FALSE(cache->enabled());
  const int32_t slot = cache->take_slot();
  ASSERT_GE(slot, 0);
  std::optional<std::vector<int32_t>> pages = cache->take_pages(3);
  ASSERT_TRUE(pages.has_value());
  EXPECT_FALSE(cache->take_pages(2).has_value()) << "one page left: nothing taken";
  EXPECT_EQ(pools.pages.free_pages(), 1);
  const int32_t slots[] = {slot};
  EXPECT_TRUE(cache->check_invariants(slots, *pages).ok());
  // Books that do not add up are caught: a page held by nobody, a slot held by nobody.
  EXPECT_FALSE(cache->check_invariants(slots, std::span(*pages).first(2)).ok());
  EXPECT_FALSE(cache->check_invariants({}, *pages).ok());
  EXPECT_FALSE(cache->match(iota_tokens(40), 39).node >= 0) << "no tree: no hit";
  cache->drop_pages(*pages);
  cache->free_slot(slot);
  EXPECT_EQ(pools.pages.free_pages(), 4);
  EXPECT_EQ(pools.states.free_slots(), 2);
  EXPECT_TRUE(cache->check_invariants({}, {}).ok());
}

TEST(PrefixCacheBooks, ASnapshotResumesWithSharedPagesAndTheSameState) {
  Pools pools = make_pools(4, 16);
  std::unique_ptr<PrefixCache> cache = make_cache(pools, /*enabled=*/true);
  ASSERT_TRUE(cache->enabled());
  std::mt19937 rng(7);
  // A finished request of 40 tokens (3 pages) leaves its working slot as the snapshot.
  const std::vector<int32_t> tokens = iota_tokens(40);
  const int32_t slot = cache->take_slot();
  std::vector<int32_t> pages = *cache->take_pages(3);
  testing::fill_random_bytes(pools.states.ssm_state(0).select(slot), rng);
  EXPECT_TRUE(cache->snapshot(tokens, pages, slot, /*adopt=*/true));
  cache->drop_pages(pages);  // the request ends; the tree keeps its references
  EXPECT_TRUE(cache->check_invariants({}, {}).ok());
  EXPECT_EQ(cache->stats().snapshots, 1);
  EXPECT_EQ(cache->stats().pages, 3);
  EXPECT_EQ(cache->stats().tokens, 40);

  // The same prompt and more: resumes at 40, shares pages 0 and 1, copies page 2 (partial).
  std::vector<int32_t> longer = iota_tokens(50);
  const PrefixHit hit = cache->match(longer, 49);
  ASSERT_EQ(hit.tokens, 40);
  EXPECT_EQ(hit.snapshot, slot);
  const int32_t mine = cache->take_slot();
  std::optional<std::vector<int32_t>> mine_pages = cache->take_pages(4, hit);
  ASSERT_TRUE(mine_pages.has_value());
  EXPECT_EQ((*mine_pages)[0], pages[0]);
  EXPECT_EQ((*mine_pages)[1], pages[1]);
  EXPECT_NE((*mine_pages)[2], pages[2]) << "the page the request writes on is its own copy";
  cache->resume(hit, mine, *mine_pages);
  EXPECT_TRUE(testing::same_bytes(pools.states.ssm_state(0).select(mine),
                                  pools.states.ssm_state(0).select(slot)));
  const int32_t running[] = {mine};
  EXPECT_TRUE(cache->check_invariants(running, *mine_pages).ok());
  EXPECT_EQ(cache->stats().hits, 1);
  EXPECT_EQ(cache->stats().cached_tokens, 40);
  EXPECT_EQ(cache->stats().pages, 1) << "page 2 alone: pages 0 and 1 are the request's too";
  cache->drop_pages(*mine_pages);
  cache->free_slot(mine);
  EXPECT_TRUE(cache->check_invariants({}, {}).ok());
}

TEST(PrefixCacheBooks, ADryPoolTakesTheLeastRecentSnapshot) {
  Pools pools = make_pools(2, 16);
  std::unique_ptr<PrefixCache> cache = make_cache(pools, /*enabled=*/true);
  // Two finished requests fill both slots with snapshots.
  for (int32_t first : {1, 1000}) {
    std::vector<int32_t> tokens(20);
    std::iota(tokens.begin(), tokens.end(), first);
    const int32_t slot = cache->take_slot();
    std::vector<int32_t> pages = *cache->take_pages(2);
    ASSERT_TRUE(cache->snapshot(tokens, pages, slot, /*adopt=*/true));
    cache->drop_pages(pages);
  }
  EXPECT_EQ(pools.states.free_slots(), 0);
  // A new request's slot comes from the older snapshot, which goes with its KV.
  const int32_t slot = cache->take_slot();
  EXPECT_GE(slot, 0);
  EXPECT_EQ(cache->stats().evictions, 1);
  EXPECT_EQ(cache->stats().snapshots, 1);
  // Queries one token longer than each prefix: the older one is gone, the newer one hits.
  const PrefixHit older = cache->match(iota_tokens(21), 20);
  EXPECT_EQ(older.tokens, 0);
  std::vector<int32_t> newer_tokens(21);
  std::iota(newer_tokens.begin(), newer_tokens.end(), 1000);
  const PrefixHit newer = cache->match(newer_tokens, 20);
  EXPECT_EQ(newer.tokens, 20);
  cache->release(older);
  cache->release(newer);
  const int32_t running[] = {slot};
  EXPECT_TRUE(cache->check_invariants(running, {}).ok());
}

}  // namespace
}  // namespace hyla::runtime
