// KvPagePool: page tensors per architecture (qwen3_next full attention, kimi_linear MLA latent),
// all-or-nothing allocate and free, pages_for_tokens, no leaks, bytes per token.
#include "runtime/memory/kv_page_pool.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>
#include <vector>

#include "memory_test_configs.h"
#include "testing.h"

namespace hyla::runtime {
namespace {

using hyla::testing::all_zero_bytes;
using hyla::testing::test_config;
using hyla::testing::with_all_mixers;
using model::MixerKind;

KvPagePool make_pool(const model::ModelConfig& config, int64_t pages,
                     KvPagePoolOptions options = {}) {
  Result<KvPagePool> pool = KvPagePool::create(config, pages, options);
  HYLA_CHECK(pool.ok(), pool.status().message());
  return std::move(pool).value();
}

std::vector<int64_t> shape_of(const TensorView& t) {
  return std::vector<int64_t>(t.shape(), t.shape() + t.ndim());
}

TEST(KvPagePool, Qwen3NextShapes) {
  // Layer 3 is the one full-attention layer: HKV = 2, head_dim = 32.
  const model::ModelConfig config = test_config("golden/qwen3_next");
  const KvPagePool pool = make_pool(config, 6);
  ASSERT_EQ(pool.num_layers(), 1);
  for (int layer = 0; layer < 4; ++layer)
    EXPECT_EQ(pool.attention_index(layer), layer == 3 ? 0 : -1);
  EXPECT_EQ(pool.layer_kind(0), MixerKind::kFullAttention);
  EXPECT_EQ(pool.page_size(), 64);
  for (const TensorView& t : {pool.k_cache(0), pool.v_cache(0)}) {
    EXPECT_EQ(shape_of(t), (std::vector<int64_t>{6, 64, 2, 32}));
    EXPECT_EQ(t.dtype(), DType::kBF16);
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_TRUE(all_zero_bytes(t));
  }
  // K and V: 2 x 2 heads x 32 x 2 bytes.
  EXPECT_EQ(KvPagePool::bytes_per_token(config), 256);
  EXPECT_EQ(pool.page_bytes(), 256 * 64);
}

TEST(KvPagePool, KimiLinearLatentShapes) {
  // Layer 3 is MLA: one latent row of kv_lora_rank + qk_rope_head_dim = 64 + 16 per token.
  const model::ModelConfig config = test_config("golden/kimi_linear");
  const KvPagePool pool = make_pool(config, 3, {.page_size = 16, .dtype = DType::kF32});
  ASSERT_EQ(pool.num_layers(), 1);
  EXPECT_EQ(pool.attention_index(3), 0);
  EXPECT_EQ(pool.attention_index(0), -1);
  EXPECT_EQ(pool.layer_kind(0), MixerKind::kLatentAttention);
  EXPECT_EQ(shape_of(pool.k_cache(0)), (std::vector<int64_t>{3, 16, 1, 80}));
  EXPECT_EQ(pool.k_cache(0).dtype(), DType::kF32);
  EXPECT_FALSE(pool.v_cache(0).defined());
  EXPECT_EQ(KvPagePool::bytes_per_token(config, {.dtype = DType::kF32}), 80 * 4);
}

// A config with an MTP draft head: its full-attention layer follows the model's as global layer
// 4, with the model's KV shapes, and counts in every per-token and per-page figure.
TEST(KvPagePool, MtpLayersFollowTheModels) {
  for (const char* arch : {"golden/qwen3_next_mtp", "golden/qwen3_5_mtp"}) {
    SCOPED_TRACE(arch);
    const model::ModelConfig config = test_config(arch);
    ASSERT_EQ(config.num_mtp_layers, 1);
    const model::ModelConfig without = [&] {
      model::ModelConfig c = config;
      c.num_mtp_layers = 0;
      c.mtp_mlps.clear();
      return c;
    }();
    KvPagePool pool = make_pool(config, 4, {.page_size = 8, .dtype = DType::kF32});
    ASSERT_EQ(pool.num_layers(), 2);
    for (int layer = 0; layer < 5; ++layer)
      EXPECT_EQ(pool.attention_index(layer), layer == 3 ? 0 : layer == 4 ? 1 : -1);
    EXPECT_EQ(pool.layer_kind(1), MixerKind::kFullAttention);
    for (const TensorView& t : {pool.k_cache(1), pool.v_cache(1)}) {
      EXPECT_EQ(shape_of(t), shape_of(pool.k_cache(0)));
      EXPECT_TRUE(all_zero_bytes(t));
    }
    const KvPagePoolOptions f32{.dtype = DType::kF32};
    EXPECT_EQ(KvPagePool::bytes_per_token(config, f32),
              2 * KvPagePool::bytes_per_token(without, f32));
    EXPECT_EQ(make_pool(without, 1).num_layers(), 1);
    // copy_page carries the MTP layer's rows too
    Result<std::vector<int32_t>> pages = pool.allocate(2);
    ASSERT_OK(pages.status());
    std::mt19937 rng(7);
    hyla::testing::fill_random_bytes(pool.k_cache(1).select((*pages)[0]), rng);
    ASSERT_OK(pool.copy_page((*pages)[0], (*pages)[1]));
    EXPECT_TRUE(hyla::testing::same_bytes(pool.k_cache(1).select((*pages)[0]),
                                          pool.k_cache(1).select((*pages)[1])));
  }
}

TEST(KvPagePool, BytesPerTokenIsTheSumOfTheTensors) {
  for (const char* arch :
       {"golden/qwen3_next", "golden/kimi_linear", "golden/qwen3_5_moe", "golden/qwen3_next_mtp"}) {
    SCOPED_TRACE(arch);
    const model::ModelConfig config = test_config(arch);
    const KvPagePoolOptions options{.page_size = 8, .dtype = DType::kF32};
    const KvPagePool pool = make_pool(config, 2, options);
    int64_t bytes = 0;
    for (int i = 0; i < pool.num_layers(); ++i)
      bytes += pool.k_cache(i).span_bytes() +
               (pool.v_cache(i).defined() ? pool.v_cache(i).span_bytes() : 0);
    EXPECT_EQ(KvPagePool::bytes_per_token(config, options) * 8 * 2, bytes);
  }
}

TEST(KvPagePool, KimiK3BytesPerToken) {
  // 24 MLA layers x (kv_lora_rank 512 + rope 64) x bf16.
  const model::ModelConfig config = test_config("kimi_k3_config");
  const int64_t bytes = KvPagePool::bytes_per_token(config);
  EXPECT_EQ(bytes, 24 * (512 + 64) * 2);
  std::printf("Kimi K3 KV per token (24 MLA layers, bf16 latent): %lld bytes\n",
              static_cast<long long>(bytes));
}

TEST(KvPagePool, PagesForTokens) {
  const KvPagePool pool = make_pool(test_config("golden/qwen3_next"), 1);
  EXPECT_EQ(pool.pages_for_tokens(0), 0);
  EXPECT_EQ(pool.pages_for_tokens(1), 1);
  EXPECT_EQ(pool.pages_for_tokens(63), 1);
  EXPECT_EQ(pool.pages_for_tokens(64), 1);
  EXPECT_EQ(pool.pages_for_tokens(65), 2);
  EXPECT_EQ(pool.pages_for_tokens(1000), 16);
}

TEST(KvPagePool, AllocateIsAllOrNothing) {
  KvPagePool pool = make_pool(test_config("golden/qwen3_next"), 10);
  Result<std::vector<int32_t>> first = pool.allocate(4);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(*first, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(pool.free_pages(), 6);

  Result<std::vector<int32_t>> too_many = pool.allocate(7);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(too_many.status().message().find("7 pages (448 tokens) requested, 6 of 10 free"),
            std::string::npos)
      << too_many.status().message();
  EXPECT_EQ(pool.free_pages(), 6);  // nothing taken

  Result<std::vector<int32_t>> rest = pool.allocate(6);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(pool.free_pages(), 0);
  EXPECT_FALSE(pool.allocate(1).ok());
  Result<std::vector<int32_t>> none = pool.allocate(0);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_ERROR_CONTAINS(pool.allocate(-1).status(), "-1 pages requested");
}

TEST(KvPagePool, FreeIsAllOrNothing) {
  KvPagePool pool = make_pool(test_config("golden/qwen3_next"), 8);
  Result<std::vector<int32_t>> pages = pool.allocate(3);  // 0, 1, 2
  ASSERT_TRUE(pages.ok());
  const std::vector<int32_t> repeated = {0, 1, 0};
  const std::vector<int32_t> unallocated = {0, 5};
  const std::vector<int32_t> out_of_range = {1, 8};
  EXPECT_ERROR_CONTAINS(pool.free(repeated), "page 0 is listed twice");
  EXPECT_ERROR_CONTAINS(pool.free(unallocated), "page 5 is not allocated");
  EXPECT_ERROR_CONTAINS(pool.free(out_of_range), "page 8 is outside [0, 8)");
  EXPECT_EQ(pool.free_pages(), 5);  // the failed calls freed nothing
  for (int32_t page : *pages) EXPECT_TRUE(pool.is_allocated(page));

  ASSERT_OK(pool.free(*pages));
  EXPECT_EQ(pool.free_pages(), 8);
  EXPECT_ERROR_CONTAINS(pool.free(*pages), "page 0 is not allocated");  // double free
}

TEST(KvPagePool, AllocateFreeCyclesLeakNothing) {
  KvPagePool pool = make_pool(test_config("golden/kimi_linear"), 32, {.page_size = 16});
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> tables;  // one page table per live "request"
  for (int step = 0; step < 400; ++step) {
    if (!tables.empty() && (rng() % 2 == 0 || pool.free_pages() == 0)) {
      const size_t victim = rng() % tables.size();
      ASSERT_OK(pool.free(tables[victim]));
      tables.erase(tables.begin() + int64_t(victim));
    } else {
      const int64_t tokens = 1 + int64_t(rng() % 100);
      Result<std::vector<int32_t>> pages = pool.allocate(pool.pages_for_tokens(tokens));
      if (pages.ok()) tables.push_back(*pages);
    }
    std::set<int32_t> live;
    size_t count = 0;
    for (const auto& table : tables) {
      live.insert(table.begin(), table.end());
      count += table.size();
    }
    ASSERT_EQ(live.size(), count) << "a page is in two tables at step " << step;
    ASSERT_EQ(pool.used_pages(), int64_t(count)) << "step " << step;
  }
  for (const auto& table : tables) ASSERT_OK(pool.free(table));
  EXPECT_EQ(pool.free_pages(), 32);
}

TEST(KvPagePool, CreateErrors) {
  const model::ModelConfig config = test_config("golden/qwen3_next");
  auto create_status = [](const model::ModelConfig& c, int64_t pages, KvPagePoolOptions o = {}) {
    return KvPagePool::create(c, pages, o).status();
  };
  EXPECT_ERROR_CONTAINS(create_status(config, 0), "num_pages is 0");
  EXPECT_ERROR_CONTAINS(create_status(config, 1, {.page_size = 0}), "page_size is 0");
  EXPECT_ERROR_CONTAINS(create_status(config, 1, {.dtype = DType::kF16}),
                        "dtype is f16, expected f32 or bf16");
  EXPECT_ERROR_CONTAINS(create_status(with_all_mixers(config, MixerKind::kGatedDeltaNet), 1),
                        "has no attention layer");
}

}  // namespace
}  // namespace hyla::runtime
