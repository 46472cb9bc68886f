// size_engine and snapshot_slots: the slots one request keeps, counted by hand from the engine's
// snapshot points; the plan holds the running requests' KV pages plus their snapshot slots (one
// rank's with tensor parallelism), and nothing more than size_engine_memory without a cache; on
// every golden architecture the engine then keeps every snapshot it takes, so a prompt sharing
// the first 100 tokens of an earlier one resumes at 64.
#include "runtime/engine_sizing.h"

#include "memory_test_configs.h"
#include "model/tensor_parallel.h"
#include "prefix_cache_testing.h"
#include "testing.h"

namespace hyla::runtime {
namespace {

using engine_testing::golden;
using engine_testing::golden_archs;
using engine_testing::Tokens;
using hyla::testing::test_config;
using hyla::testing::with_all_mixers;

EngineOptions cached() {
  EngineOptions o;
  o.prefix_cache.enabled = true;
  return o;
}

// Defaults: interval 64, decode interval 256, chunks of 512, at most 4 weak and 32 on a path.
TEST(SnapshotSlots, ByHand) {
  EngineOptions o = cached();
  // 130 + 16: 64 and 128 inside the one chunk (weak), + before the last prompt token, branch, end.
  EXPECT_EQ(snapshot_slots(o, 146), 5);
  EXPECT_EQ(snapshot_slots(o, 1), 3);
  // 512: 256 on the decode interval; 64 .. 448 but 256 weak (6, at most 4); + 3.
  EXPECT_EQ(snapshot_slots(o, 512), 8);
  // 4096: 256 .. 3840 (15, the chunk ends among them); 48 other positions on the interval (4); + 3.
  EXPECT_EQ(snapshot_slots(o, 4096), 22);
  o.prefix_cache.max_path_snapshots = 10;
  EXPECT_EQ(snapshot_slots(o, 4096), 10);
  o.prefix_cache.max_path_snapshots = 32;
  o.prefix_cache.max_path_weak_snapshots = 0;  // no cap: 15 + 48 + 3, then the path's 32
  EXPECT_EQ(snapshot_slots(o, 4096), 32);
  o.prefix_cache.max_path_weak_snapshots = 4;
  // No decode snapshots, chunks of 2048: the chunk end 2048 strong, 4 of the other 62 weak, + 3.
  o.prefix_cache.decode_interval = 0;
  o.max_batch_tokens = 2048;
  EXPECT_EQ(snapshot_slots(o, 4096), 8);
  // Interval 128 with chunks of 192 (ends at multiples of 384): 384 strong; 128, 256, 512 weak.
  o.prefix_cache.snapshot_interval = 128;
  o.max_batch_tokens = 192;
  EXPECT_EQ(snapshot_slots(o, 600), 1 + 3 + 3);
  o.prefix_cache.enabled = false;
  EXPECT_EQ(snapshot_slots(o, 4096), 1);
}

TEST(SizeEngine, HoldsTheRunningRequestsAndTheirSnapshots) {
  const model::ModelConfig config = test_config("golden/qwen3_next");
  const EngineOptions o = cached();
  Result<EngineSizing> sizing = size_engine(config, o, {146, 136, 146});
  ASSERT_OK(sizing.status());
  EXPECT_EQ(sizing->max_running, 3);
  Result<MemoryPlan> plan =
      plan_memory(config, sizing->budget_bytes, sizing->state_ratio, memory_plan_options(o));
  ASSERT_OK(plan.status());
  EXPECT_GE(plan->state_slots, 5 + 5 + 5);
  EXPECT_GE(plan->kv_pages, 3 + 3 + 3);
  EXPECT_EQ(plan->state_slots, sizing->state_slots);
  EXPECT_EQ(plan->kv_pages, sizing->kv_pages);
  // Room for what it was sized for, not much more: the slack is under a slot and a page.
  Result<MemorySizing> running = size_engine_memory(config, o, {146, 136, 146});
  ASSERT_OK(running.status());
  EXPECT_EQ(sizing->budget_bytes - running->budget_bytes, (15 - 3) * plan->bytes_per_slot)
      << "the snapshots' slots on top of the running requests' budget";
  EXPECT_LE(plan->state_slots, 15);
  EXPECT_LE(plan->kv_pages, 9 + 1);

  // max_running: the longest that many are sized for.
  EngineOptions two = o;
  two.max_running = 2;
  sizing = size_engine(config, two, {136, 146, 146});
  ASSERT_OK(sizing.status());
  EXPECT_EQ(sizing->max_running, 2);
  EXPECT_GE(sizing->state_slots, 10);
  EXPECT_GE(sizing->kv_pages, 6);
  EXPECT_LT(sizing->state_slots, 15);
}

// Without the cache, or without one kind of layer (the engine then keeps no cache), the budget is
// size_engine_memory's: a slot per request.
TEST(SizeEngine, WithoutACacheAsSizeEngineMemory) {
  const model::ModelConfig hybrid = test_config("golden/qwen3_next");
  const std::vector<int64_t> tokens = {300, 20};
  EngineOptions off;
  for (const auto& [config, options] :
       {std::pair{hybrid, off},
        std::pair{with_all_mixers(hybrid, model::MixerKind::kFullAttention), cached()},
        std::pair{with_all_mixers(hybrid, model::MixerKind::kGatedDeltaNet), cached()}}) {
    Result<EngineSizing> sizing = size_engine(config, options, tokens);
    Result<MemorySizing> plain = size_engine_memory(config, options, tokens);
    ASSERT_OK(sizing.status());
    ASSERT_OK(plain.status());
    EXPECT_EQ(sizing->budget_bytes, plain->budget_bytes);
    EXPECT_EQ(sizing->state_ratio, plain->state_ratio);
    EXPECT_EQ(sizing->max_running, 2);
  }
  EXPECT_ERROR_CONTAINS(size_engine(hybrid, cached(), {}).status(), "no request");
  EXPECT_ERROR_CONTAINS(size_engine(hybrid, cached(), {5, 0}).status(), "request 1 has 0 tokens");
}

// With tensor parallelism the budget is one rank's: its plan holds the slots.
TEST(SizeEngine, OneRanksBudget) {
  const model::ModelConfig config = test_config("golden/qwen3_next");
  EngineOptions o = cached();
  o.tensor_parallel.ranks = 2;
  Result<EngineSizing> sizing = size_engine(config, o, {146, 146, 136});
  ASSERT_OK(sizing.status());
  Result<model::ModelConfig> rank = model::shard_config(config, 0, 2);
  ASSERT_OK(rank.status());
  Result<MemoryPlan> plan =
      plan_memory(*rank, sizing->budget_bytes, sizing->state_ratio, memory_plan_options(o));
  ASSERT_OK(plan.status());
  EXPECT_GE(plan->state_slots, 15);
  EXPECT_GE(plan->kv_pages, 9);
}

// A (130 ids), A again, then A's first 100 and 20 others, one after another, in the budget
// size_engine gives for them: no snapshot is evicted, the repeat resumes before its last token
// and the third prompt at 64 (the snapshot on the interval below 100).
class SizeEngineGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(SizeEngineGolden, KeepsEverySnapshot) {
  const engine_testing::Golden& g = golden(GetParam());
  Tokens a, b;
  for (int32_t t = 100; t < 230; ++t) a.push_back(t);
  b.assign(a.begin(), a.begin() + 100);
  for (int32_t t = 300; t < 320; ++t) b.push_back(t);
  constexpr int64_t kNew = 16;
  EngineOptions options = cached();
  Result<EngineSizing> sizing =
      size_engine(g.model->config(), options,
                  {int64_t(a.size()) + kNew, int64_t(a.size()) + kNew, int64_t(b.size()) + kNew});
  ASSERT_OK(sizing.status());
  options.memory_budget_bytes = sizing->budget_bytes;
  options.state_ratio = sizing->state_ratio;
  options.max_running = sizing->max_running;
  std::unique_ptr<Engine> engine = engine_testing::make_engine(*g.model, options);
  std::vector<int64_t> cached_tokens;
  for (const Tokens& prompt : {a, a, b})
    cached_tokens.push_back(engine_testing::run_one(*engine, prompt, kNew, false).cached);
  EXPECT_EQ(cached_tokens, (std::vector<int64_t>{0, int64_t(a.size()) - 1, 64}));
  EXPECT_EQ(engine->stats().cache.evictions, 0);
}

INSTANTIATE_TEST_SUITE_P(Golden, SizeEngineGolden, ::testing::ValuesIn(golden_archs()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           return param.param;
                         });

}  // namespace
}  // namespace hyla::runtime
