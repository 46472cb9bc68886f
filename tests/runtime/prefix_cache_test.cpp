// The engine's prefix cache (EngineOptions::prefix_cache) on every golden architecture: a hit
// gives the tokens of the CPU's greedy_generate and the log-probabilities of an engine without
// the cache (within the batched-vs-alone bound), wherever it resumes: a chunk boundary, inside a
// chunk and a page, the token before the prompt's last, the end of an earlier turn, after
// evictions; and thousands of random requests under a small pool keep the books straight.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "prefix_cache_testing.h"

namespace hyla::runtime {
namespace {

using namespace engine_testing;

class PrefixCacheTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefixCacheTest, HitsGiveTheTokensAndLogprobsOfNoCache) {
  expect_prefix_cache_hits(GetParam(), Device::cpu());
}

TEST_P(PrefixCacheTest, StatesInsideAChunkAreSnapshots) {
  expect_prefix_cache_boundary_snapshots(GetParam(), Device::cpu());
}

TEST_P(PrefixCacheTest, TierRoundTripsGiveTheTokensOfNoCache) {
  for (const TierSetup& setup : kTierSetups)
    expect_prefix_cache_tier_round_trip(GetParam(), Device::cpu(), setup);
}

TEST_P(PrefixCacheTest, EvictionUnderASmallPoolKeepsTokensRight) {
  expect_prefix_cache_eviction(GetParam(), Device::cpu());
}

INSTANTIATE_TEST_SUITE_P(Golden, PrefixCacheTest, ::testing::ValuesIn(golden_archs()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           return param.param;
                         });

// Out-of-range cache options are refused at creation, naming the option.
TEST(PrefixCache, BadOptionsAreRefused) {
  const Golden& g = golden("qwen3_next");
  const auto refused = [&](const std::function<void(PrefixCacheOptions&)>& set) {
    EngineOptions options = cache_options(64);
    set(options.prefix_cache);
    Result<std::unique_ptr<Engine>> engine = Engine::create(*g.model, options);
    return engine.ok() ? std::string("created") : engine.status().message();
  };
  EXPECT_NE(refused([](PrefixCacheOptions& c) {
              c.snapshot_interval = 65;
            }).find("snapshot_interval is 65, expected a positive multiple of 64"),
            std::string::npos);
  EXPECT_NE(refused([](PrefixCacheOptions& c) {
              c.snapshot_interval = 0;
            }).find("snapshot_interval is 0"),
            std::string::npos);
  for (const auto& set : std::vector<std::function<void(PrefixCacheOptions&)>>{
           [](PrefixCacheOptions& c) { c.decode_interval = -1; },
           [](PrefixCacheOptions& c) { c.max_path_snapshots = -1; },
           [](PrefixCacheOptions& c) { c.max_path_weak_snapshots = -1; },
           [](PrefixCacheOptions& c) { c.host_bytes = -1; },
           [](PrefixCacheOptions& c) { c.device_tier_bytes = -1; }})
    EXPECT_NE(refused(set).find("must be >= 0"), std::string::npos);
  EXPECT_NE(refused([](PrefixCacheOptions& c) {
              c.device_tier_bytes = 1 << 20;
            }).find("holds int8 snapshots only"),
            std::string::npos);
  EXPECT_NE(refused([](PrefixCacheOptions& c) {
              c.int8_snapshots = true;
              c.device_tier_bytes = 1000;
            }).find("device_tier_bytes is 1000 bytes, less than one snapshot"),
            std::string::npos);
}

// Thousands of requests with shared prefixes, random lengths and cancels, a small pool, many at
// once: the engine's and the tree's books hold after every step (no slot or page held twice, refs
// counted right, every leaf with a snapshot), every request ends, and afterwards every slot and
// page is either free or the cache's.
TEST(PrefixCache, RandomStressKeepsTheBooks) {
  const Golden& g = golden("qwen3_next");
  EngineOptions options = cache_options(128);
  // Four run at once; the pool holds ten, so the cache has slots and pages to work with, and too
  // few to keep everything.
  Result<MemorySizing> sizing =
      size_engine_memory(g.model->config(), options, std::vector<int64_t>(10, 160));
  options.max_running = 4;
  ASSERT_TRUE(sizing.ok()) << sizing.status().message();
  options.memory_budget_bytes = sizing->budget_bytes;
  options.state_ratio = sizing->state_ratio;
  options.prefix_cache.decode_interval = 8;  // snapshots while decoding too
  // int8 tiers of a few slots' worth: snapshots move to the device tier, its oldest on to the
  // host tier, and the host tier's own oldest go.
  options.prefix_cache.int8_snapshots = true;
  const int64_t slot_bytes =
      StatePool::bytes_per_slot(g.model->config(), memory_plan_options(options).state);
  options.prefix_cache.device_tier_bytes = slot_bytes;  // about 3 int8 entries
  options.prefix_cache.host_bytes = 2 * slot_bytes;     // about 6
  std::unique_ptr<Engine> engine = make_engine(*g.model, options);
  std::mt19937 rng(424242);
  const int32_t V = int32_t(g.model->config().vocab_size);
  std::vector<Tokens> stems;
  for (int i = 0; i < 6; ++i) {
    Tokens t(size_t(20 + rng() % 100));
    for (int32_t& x : t) x = int32_t(rng() % unsigned(V));
    stems.push_back(t);
  }
  int64_t added = 0, ended = 0;
  std::vector<RequestId> live;
  for (int step = 0; added < 1500 || !engine->idle(); ++step) {
    ASSERT_LT(step, 200000) << "no progress";
    while (added < 1500 && live.size() < 12) {
      Tokens p = stems[rng() % stems.size()];
      p.resize(size_t(1 + rng() % p.size()));
      for (auto extra = uint32_t(rng() % 8); extra > 0; --extra)
        p.push_back(int32_t(rng() % unsigned(V)));
      Result<RequestId> id = engine->add_request(p, greedy(1 + int64_t(rng() % 12)));
      ASSERT_TRUE(id.ok()) << id.status().message();
      live.push_back(id.value());
      ++added;
    }
    if (!live.empty() && rng() % 10 == 0) {
      const size_t i = rng() % live.size();
      ASSERT_TRUE(engine->cancel(live[i]).ok());
      live.erase(live.begin() + std::ptrdiff_t(i));
      ++ended;
    }
    for (const TokenEvent& e : engine->step()) {
      ASSERT_NE(e.reason, FinishReason::kError) << e.error;
      if (!e.finished || e.reason == FinishReason::kCancelled) continue;
      ++ended;
      live.erase(std::find(live.begin(), live.end(), e.request));
    }
    const Status ok = engine->check_invariants();
    ASSERT_TRUE(ok.ok()) << "step " << step << ": " << ok.message();
  }
  EXPECT_EQ(ended, 1500);
  const EngineStats s = engine->stats();
  EXPECT_GT(s.cache.hits, 100);
  EXPECT_GT(s.cache.evictions, 0);
  EXPECT_GT(s.cache.device_tier_moves, 0);
  EXPECT_GT(s.cache.device_tier_hits, 0);
  EXPECT_GT(s.cache.host_moves, 0);
  EXPECT_GT(s.cache.host_hits, 0);
  EXPECT_GT(s.cache.host_snapshots, 0);
  EXPECT_EQ(s.free_slots + s.cache.snapshots, engine->plan().state_slots);
  EXPECT_EQ(s.free_pages + s.cache.pages, engine->plan().kv_pages);
}

}  // namespace
}  // namespace hyla::runtime
