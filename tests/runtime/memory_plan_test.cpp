// plan_memory: a hand-computed split for qwen3_next, pure-attention and pure-linear models, the
// errors, pools created from a plan fit its budget, the Attention-Residual scratch of the tiny K3
// by hand, Kimi K3 on an 80 GiB budget (printed), and one tensor-parallel rank's share.
#include "runtime/memory/memory_plan.h"

#include <cstdio>

#include "memory_test_configs.h"
#include "testing.h"

namespace hyla::runtime {
namespace {

using hyla::testing::test_config;
using hyla::testing::with_all_mixers;
using model::MixerKind;

constexpr int64_t kMiB = int64_t{1} << 20;

MemoryPlan plan_of(const model::ModelConfig& config, int64_t budget, double ratio = 0.9,
                   const MemoryPlanOptions& options = {}) {
  Result<MemoryPlan> plan = plan_memory(config, budget, ratio, options);
  HYLA_CHECK(plan.ok(), plan.status().message());
  return *plan;
}

TEST(MemoryPlan, Qwen3NextByHand) {
  // bytes per slot: 3 GDN layers x (conv 256*3 bf16 + SSM 4*32*32 f32) = 3 x 17920 = 53760.
  // bytes per KV token: 1 attention layer x K,V x 2 heads x 32 x bf16 = 256; a page is 16384.
  // budget 1 MiB at 0.9: state share floor(1048576 * 0.9 / 1.9) = 496693 -> 9 slots (483840);
  // KV gets 1048576 - 483840 = 564736 -> 34 pages (557056), 2176 tokens.
  const MemoryPlan plan = plan_of(test_config("golden/qwen3_next"), kMiB);
  EXPECT_EQ(plan.bytes_per_slot, 53760);
  EXPECT_EQ(plan.bytes_per_kv_token, 256);
  EXPECT_EQ(plan.page_size, 64);
  EXPECT_EQ(plan.state_slots, 9);
  EXPECT_EQ(plan.kv_pages, 34);
  EXPECT_EQ(plan.max_running_requests, 9);
  EXPECT_EQ(plan.max_context_tokens, 2176);
  EXPECT_EQ(plan.state_bytes(), 483840);
  EXPECT_EQ(plan.kv_bytes(), 557056);
  EXPECT_LE(plan.state_bytes() + plan.kv_bytes(), kMiB);
  const std::string summary = plan.summary();
  for (const char* part : {"qwen3_next", "1.0 MiB", "9 state slots x 52.5 KiB", "34 KV pages x 64",
                           "at most 9 running requests", "2176 context tokens"})
    EXPECT_NE(summary.find(part), std::string::npos) << part << " not in: " << summary;
}

TEST(MemoryPlan, RatioMovesTheSplit) {
  const model::ModelConfig config = test_config("golden/qwen3_next");
  // 3.0: state gets 3/4 of 1 MiB = 786432 -> 14 slots (752640); KV 295936 -> 18 pages.
  const MemoryPlan plan = plan_of(config, kMiB, 3.0);
  EXPECT_EQ(plan.state_slots, 14);
  EXPECT_EQ(plan.kv_pages, 18);
  EXPECT_EQ(plan.max_running_requests, 14);
  // Small pages and f32 KV: 512 bytes per token, 8 tokens per page = 4096 bytes per page.
  const MemoryPlan f32 =
      plan_of(config, kMiB, 0.9, {.state = {}, .kv = {.page_size = 8, .dtype = DType::kF32}});
  EXPECT_EQ(f32.bytes_per_kv_token, 512);
  EXPECT_EQ(f32.state_slots, 9);
  EXPECT_EQ(f32.kv_pages, 564736 / 4096);
  EXPECT_EQ(f32.max_context_tokens, 564736 / 4096 * 8);
}

TEST(MemoryPlan, WithoutLinearLayersAllGoesToKv) {
  // 4 attention layers x 256 bytes per token x 64 = 65536 bytes per page: 16 pages in 1 MiB.
  const MemoryPlan plan =
      plan_of(with_all_mixers(test_config("golden/qwen3_next"), MixerKind::kFullAttention), kMiB);
  EXPECT_EQ(plan.state_slots, 0);
  EXPECT_EQ(plan.bytes_per_slot, 0);
  EXPECT_EQ(plan.kv_pages, 16);
  EXPECT_EQ(plan.max_running_requests, 16);
  EXPECT_EQ(plan.max_context_tokens, 1024);
  EXPECT_NE(plan.summary().find("no state pool"), std::string::npos) << plan.summary();
}

TEST(MemoryPlan, WithoutAttentionLayersAllGoesToState) {
  // 4 GDN layers x 17920 = 71680 bytes per slot: 14 slots in 1 MiB.
  const MemoryPlan plan =
      plan_of(with_all_mixers(test_config("golden/qwen3_next"), MixerKind::kGatedDeltaNet), kMiB);
  EXPECT_EQ(plan.state_slots, 14);
  EXPECT_EQ(plan.kv_pages, 0);
  EXPECT_EQ(plan.max_running_requests, 14);
  EXPECT_EQ(plan.max_context_tokens, kNoLimit);
  EXPECT_NE(plan.summary().find("unlimited context tokens"), std::string::npos) << plan.summary();
}

TEST(MemoryPlan, Errors) {
  const model::ModelConfig config = test_config("golden/qwen3_next");
  EXPECT_ERROR_CONTAINS(plan_memory(config, 0).status(), "budget is 0 bytes");
  EXPECT_ERROR_CONTAINS(plan_memory(config, kMiB, -1.0).status(), "state_ratio is -1");
  EXPECT_ERROR_CONTAINS(
      plan_memory(config, kMiB, 0.9, {.state = {}, .kv = {.page_size = 0}}).status(),
      "page_size is 0");
  EXPECT_ERROR_CONTAINS(plan_memory(config, 64 * 1024).status(),
                        "budget 64.0 KiB holds no state slot: one slot needs 52.5 KiB");
  EXPECT_ERROR_CONTAINS(plan_memory(config, kMiB, 0.0).status(), "holds no state slot");
  // 60000 bytes at a ratio of 100: one slot (53760) fits, the 6240 left hold no 16384-byte page.
  EXPECT_ERROR_CONTAINS(plan_memory(config, 60000, 100.0).status(),
                        "budget 58.6 KiB holds no KV page: one page of 64 tokens needs 16.0 KiB");
}

TEST(MemoryPlan, PoolsFromAPlanFitTheBudget) {
  const model::ModelConfig config = test_config("golden/kimi_linear");
  const MemoryPlan plan = plan_of(config, 2 * kMiB);
  Result<StatePool> states = StatePool::create(config, plan.state_slots);
  Result<KvPagePool> pages = KvPagePool::create(config, plan.kv_pages);
  ASSERT_TRUE(states.ok()) << states.status().message();
  ASSERT_TRUE(pages.ok()) << pages.status().message();
  int64_t bytes = 0;
  for (int i = 0; i < states->num_layers(); ++i)
    bytes += states->conv_state(i).span_bytes() + states->ssm_state(i).span_bytes();
  EXPECT_EQ(bytes, plan.state_bytes());
  for (int i = 0; i < pages->num_layers(); ++i) bytes += pages->k_cache(i).span_bytes();
  EXPECT_EQ(bytes, plan.state_bytes() + plan.kv_bytes());
  EXPECT_LE(bytes, 2 * kMiB);
}

TEST(MemoryPlan, AttentionResidualScratchComesFirst) {
  // The tiny K3: 7 layers in blocks of 3 -> 3 snapshots; scratch per token (3 + 1) x 128 x 4 =
  // 2048 bytes (bank + mixture), x 512 tokens per step = 1 MiB, reserved before the split.
  const model::ModelConfig config = test_config("golden/kimi_k3");
  const MemoryPlan plan = plan_of(config, 8 * kMiB);
  EXPECT_EQ(plan.scratch_bytes_per_token, 2048);
  EXPECT_EQ(plan.scratch_bytes, kMiB);
  // The pools split the other 7 MiB exactly as they would for the same model without scratch.
  model::ModelConfig plain = config;
  plain.attn_res_block_size = 0;
  const MemoryPlan split = plan_of(plain, 7 * kMiB);
  EXPECT_EQ(split.scratch_bytes, 0);
  EXPECT_EQ(plan.state_slots, split.state_slots);
  EXPECT_EQ(plan.kv_pages, split.kv_pages);
  EXPECT_LE(plan.scratch_bytes + plan.state_bytes() + plan.kv_bytes(), 8 * kMiB);
  const std::string summary = plan.summary();
  EXPECT_NE(
      summary.find("Attention-Residual scratch 2.0 KiB/token x 512 tokens per step = 1.0 MiB"),
      std::string::npos)
      << summary;
  // Models without Attention Residuals reserve nothing.
  EXPECT_EQ(plan_of(test_config("golden/kimi_linear"), kMiB).scratch_bytes, 0);
  EXPECT_ERROR_CONTAINS(plan_memory(config, kMiB).status(),
                        "budget 1.0 MiB holds no pools after the Attention-Residual scratch of "
                        "1.0 MiB (512 tokens per step x 2.0 KiB)");
  EXPECT_ERROR_CONTAINS(
      plan_memory(config, kMiB, 0.9, {.state = {}, .kv = {}, .max_batch_tokens = 0}).status(),
      "max_batch_tokens is 0");
}

TEST(MemoryPlan, KimiK3On80GiB) {
  // 449,372,160 bytes per slot; 27,648 bytes per KV token; Attention-Residual scratch
  // (cdiv(93, 12) = 8 snapshots + the mixture) x 7168 x 4 = 258,048 bytes per token.
  const MemoryPlan plan = plan_of(test_config("kimi_k3_config"), int64_t{80} << 30);
  EXPECT_EQ(plan.bytes_per_slot, 449372160);
  EXPECT_EQ(plan.bytes_per_kv_token, 27648);
  EXPECT_EQ(plan.scratch_bytes_per_token, 258048);
  EXPECT_GT(plan.state_slots, 0);
  std::printf("%s\n", plan.summary().c_str());
}

// Tensor parallelism by head: a rank's state slot is exactly 1/N of the whole model's (the linear
// layers' conv channels and SSM heads split evenly); its KV bytes per token are its KV heads'
// (Qwen: nkv 2 over 2 ranks) or the whole latent (MLA keeps it on every rank); in the same budget
// a rank therefore holds about N times the requests. Counts N does not divide are named.
TEST(MemoryPlan, TensorParallelRankShares) {
  const model::ModelConfig qwen = test_config("golden/qwen3_next");
  Result<TensorParallelPlan> two = plan_tensor_parallel(qwen, 2, 64 * kMiB);
  ASSERT_OK(two.status());
  EXPECT_EQ(two->rank.bytes_per_slot * 2, two->whole.bytes_per_slot);
  EXPECT_EQ(two->rank.bytes_per_kv_token * 2, two->whole.bytes_per_kv_token);
  EXPECT_GE(two->rank.max_running_requests, 2 * two->whole.max_running_requests - 1);
  const std::string summary = two->summary();
  for (const char* part : {"over 2 ranks", "state per sequence: 26.2 KiB (whole model 52.5 KiB)",
                           "KV per token: 128 B (whole model 256 B)", "requests at once"})
    EXPECT_NE(summary.find(part), std::string::npos) << part << " not in: " << summary;

  const model::ModelConfig k3 = test_config("golden/kimi_k3");
  Result<TensorParallelPlan> four = plan_tensor_parallel(k3, 4, 64 * kMiB);
  ASSERT_OK(four.status());
  EXPECT_EQ(four->rank.bytes_per_slot * 4, four->whole.bytes_per_slot);
  EXPECT_EQ(four->rank.bytes_per_kv_token, four->whole.bytes_per_kv_token) << "the MLA latent";

  EXPECT_ERROR_CONTAINS(plan_tensor_parallel(qwen, 4, 64 * kMiB).status(),
                        "linear_num_key_heads H = 2, which N = 4 ranks do not divide");
  EXPECT_ERROR_CONTAINS(plan_tensor_parallel(qwen, 0, 64 * kMiB).status(), "0 ranks");
  EXPECT_ERROR_CONTAINS(plan_tensor_parallel(qwen, 2, 0).status(), "budget is 0 bytes");
}

TEST(MemoryPlan, FormatBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(kMiB), "1.0 MiB");
  EXPECT_EQ(format_bytes(int64_t{80} << 30), "80.0 GiB");
}

}  // namespace
}  // namespace hyla::runtime
