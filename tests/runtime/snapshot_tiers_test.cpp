// SnapshotTiers: a slot put into a tier and loaded back into another slot is the same slot (native:
// byte for byte; int8: conv windows byte for byte, every SSM element within half a step of its row,
// kernels/int8_rows.h); entries move between tiers unchanged; ids name their tier; full tiers
// refuse, freed entries are reused; bad budgets and ids are refused with the option named.
#include "runtime/cache/snapshot_tiers.h"

#include <cmath>
#include <random>

#include "memory_test_configs.h"
#include "testing.h"

namespace hyla::runtime {
namespace {

using testing::fill_random_bytes;
using testing::same_bytes;
using testing::test_config;

/// A pool of `slots` slots for `arch` with random states (finite: normal values, not raw bits).
StatePool random_pool(const char* arch, int64_t slots, DType ssm_dtype, std::mt19937& rng) {
  Result<StatePool> pool = StatePool::create(test_config(arch), slots,
                                             {.conv_dtype = DType::kBF16, .ssm_dtype = ssm_dtype});
  HYLA_CHECK(pool.ok(), pool.status().message());
  for (int64_t s = 0; s < slots; ++s) HYLA_CHECK(pool->allocate().ok(), "allocate");
  for (int i = 0; i < pool->num_layers(); ++i) {
    fill_random_bytes(pool->conv_state(i), rng);
    const TensorView ssm = pool->ssm_state(i);
    const Tensor values = testing::random_normal({ssm.numel()}, ssm_dtype, rng);
    std::memcpy(ssm.raw(), values.view().raw(), size_t(ssm.span_bytes()));
  }
  return std::move(*pool);
}

/// Slot `to` against slot `from`: conv equal; SSM equal (native) or within half a step of each
/// row's scale max |row| / 127 (int8), plus the slack of one bf16 rounding when the pool is bf16.
void expect_same_slot(const StatePool& pool, int32_t from, int32_t to, SnapshotFormat format) {
  for (int i = 0; i < pool.num_layers(); ++i) {
    SCOPED_TRACE(str_cat("linear layer ", i));
    EXPECT_TRUE(same_bytes(pool.conv_state(i).select(to), pool.conv_state(i).select(from)));
    const TensorView a = pool.ssm_state(i).select(from), b = pool.ssm_state(i).select(to);
    if (format == SnapshotFormat::kNative) {
      EXPECT_TRUE(same_bytes(a, b));
      continue;
    }
    const std::vector<double> want = testing::to_f64(a), got = testing::to_f64(b);
    const int64_t C = a.size(-1);
    const double rounding = a.dtype() == DType::kBF16 ? 0x1p-8 : 0x1p-23;  // of |y|
    for (size_t r = 0; r < want.size() / size_t(C); ++r) {
      double amax = 0;
      for (int64_t j = 0; j < C; ++j)
        amax = std::max(amax, std::fabs(want[r * size_t(C) + size_t(j)]));
      const double half_step = amax / 127 * (0.5 + 0x1p-16);
      for (int64_t j = 0; j < C; ++j) {
        const size_t e = r * size_t(C) + size_t(j);
        ASSERT_LE(std::fabs(got[e] - want[e]), half_step + rounding * std::fabs(got[e]))
            << "row " << r << " element " << j;
      }
    }
  }
}

TEST(SnapshotTiers, PutLoadAndMoveKeepTheSlot) {
  for (const char* arch : {"golden/qwen3_next", "golden/kimi_linear"}) {
    for (const DType ssm_dtype : {DType::kF32, DType::kBF16}) {
      for (const SnapshotFormat format : {SnapshotFormat::kNative, SnapshotFormat::kInt8}) {
        SCOPED_TRACE(str_cat(arch, " ", dtype_name(ssm_dtype),
                             format == SnapshotFormat::kInt8 ? " int8" : " native"));
        std::mt19937 rng(7);
        StatePool pool = random_pool(arch, 4, ssm_dtype, rng);
        const int64_t device = format == SnapshotFormat::kInt8 ? int64_t{1} << 24 : 0;
        Result<SnapshotTiers> tiers = SnapshotTiers::create(pool, format, device, int64_t{1} << 24);
        ASSERT_TRUE(tiers.ok()) << tiers.status().message();
        ASSERT_EQ(tiers->count(), format == SnapshotFormat::kInt8 ? 2 : 1);
        // int8 entries hold a quarter of an f32 SSM state (plus scales and the conv window)
        if (format == SnapshotFormat::kInt8 && ssm_dtype == DType::kF32) {
          EXPECT_LT(tiers->entry_bytes(), pool.slot_bytes() / 2);
        }
        const int first = 0, last = tiers->count() - 1;
        const int32_t id = tiers->put(first, pool, 1);
        EXPECT_TRUE(SnapshotTiers::is_tiered(id));
        EXPECT_EQ(tiers->tier_of(id), first);
        ASSERT_OK(tiers->load(id, pool, 2));
        expect_same_slot(pool, 1, 2, format);
        const int32_t moved = last == first ? id : tiers->move(id, last);
        EXPECT_EQ(tiers->tier_of(moved), last);
        if (moved != id) {
          EXPECT_EQ(tiers->tier_of(id), -1) << "the move frees the source";
        }
        ASSERT_OK(tiers->load(moved, pool, 3));
        expect_same_slot(pool, 2, 3, SnapshotFormat::kNative);  // the same bytes came back
        EXPECT_EQ(tiers->entries(last), 1);
        ASSERT_OK(tiers->erase(moved));
        EXPECT_EQ(tiers->entries(last), 0);
        EXPECT_FALSE(tiers->erase(moved).ok()) << "a second erase";
        EXPECT_FALSE(tiers->load(moved, pool, 3).ok()) << "a freed entry";
        EXPECT_FALSE(tiers->load(3, pool, 3).ok()) << "a pool slot is no entry";
      }
    }
  }
}

TEST(SnapshotTiers, FullTiersReuseFreedEntries) {
  std::mt19937 rng(8);
  StatePool pool = random_pool("golden/qwen3_next", 2, DType::kF32, rng);
  Result<SnapshotTiers> probe = SnapshotTiers::create(pool, SnapshotFormat::kInt8, 0, 1 << 30);
  ASSERT_TRUE(probe.ok());
  const int64_t entry = probe->entry_bytes();
  Result<SnapshotTiers> tiers = SnapshotTiers::create(pool, SnapshotFormat::kInt8, 3 * entry, 0);
  ASSERT_TRUE(tiers.ok()) << tiers.status().message();
  std::vector<int32_t> ids;
  while (tiers->has_room(0)) ids.push_back(tiers->put(0, pool, 0));
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(tiers->bytes(0), 3 * entry);
  ASSERT_OK(tiers->erase(ids[1]));
  EXPECT_TRUE(tiers->has_room(0));
  EXPECT_EQ(tiers->put(0, pool, 1), ids[1]);
}

TEST(SnapshotTiers, BadBudgetsAreRefused) {
  std::mt19937 rng(9);
  StatePool pool = random_pool("golden/qwen3_next", 1, DType::kF32, rng);
  const auto message = [&](SnapshotFormat format, int64_t device, int64_t host) {
    Result<SnapshotTiers> t = SnapshotTiers::create(pool, format, device, host);
    return t.ok() ? std::string("created") : t.status().message();
  };
  EXPECT_NE(message(SnapshotFormat::kNative, 1 << 20, 0).find("int8 snapshots only"),
            std::string::npos);
  EXPECT_NE(message(SnapshotFormat::kInt8, 100, 0)
                .find("device_tier_bytes is 100 bytes, less "
                      "than one snapshot"),
            std::string::npos);
  EXPECT_NE(message(SnapshotFormat::kNative, 0, 100).find("host_bytes is 100 bytes"),
            std::string::npos);
  Result<SnapshotTiers> none = SnapshotTiers::create(pool, SnapshotFormat::kNative, 0, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->count(), 0);
}

}  // namespace
}  // namespace hyla::runtime
