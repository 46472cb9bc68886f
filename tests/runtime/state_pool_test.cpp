// StatePool: pool shapes per architecture (qwen3_next GDN, kimi_linear KDA), slot bookkeeping
// (exhaustion, reuse, double free, no leaks), zero / copy semantics bit for bit, bytes per slot
// (K3's per-request state figure).
#include "runtime/memory/state_pool.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "memory_test_configs.h"
#include "testing.h"

namespace hyla::runtime {
namespace {

using hyla::testing::all_zero_bytes;
using hyla::testing::fill_random_bytes;
using hyla::testing::same_bytes;
using hyla::testing::test_config;
using hyla::testing::with_all_mixers;
using model::MixerKind;

StatePool make_pool(const model::ModelConfig& config, int64_t slots,
                    StatePoolOptions options = {}) {
  Result<StatePool> pool = StatePool::create(config, slots, options);
  HYLA_CHECK(pool.ok(), pool.status().message());
  return std::move(pool).value();
}

std::vector<int64_t> shape_of(const TensorView& t) {
  return std::vector<int64_t>(t.shape(), t.shape() + t.ndim());
}

TEST(StatePool, Qwen3NextShapes) {
  // 3 GDN layers + 1 attention; H = 2, HV = 4, d_k = d_v = 32, K = 4: D = 2*2*32 + 4*32 = 256.
  const model::ModelConfig config = test_config("golden/qwen3_next");
  const StatePool pool = make_pool(config, 5);
  ASSERT_EQ(pool.num_layers(), 3);
  EXPECT_EQ(pool.capacity(), 5);
  EXPECT_EQ(pool.free_slots(), 5);
  for (int layer = 0; layer < 4; ++layer)
    EXPECT_EQ(pool.linear_index(layer), layer < 3 ? layer : -1);
  for (int i = 0; i < pool.num_layers(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(shape_of(pool.conv_state(i)), (std::vector<int64_t>{5, 256, 3}));
    EXPECT_EQ(pool.conv_state(i).dtype(), DType::kBF16);
    EXPECT_EQ(shape_of(pool.ssm_state(i)), (std::vector<int64_t>{5, 4, 32, 32}));
    EXPECT_EQ(pool.ssm_state(i).dtype(), DType::kF32);
    EXPECT_TRUE(pool.conv_state(i).is_contiguous());
    EXPECT_TRUE(pool.ssm_state(i).is_contiguous());
    EXPECT_TRUE(all_zero_bytes(pool.conv_state(i)));
    EXPECT_TRUE(all_zero_bytes(pool.ssm_state(i)));
  }
}

TEST(StatePool, KimiLinearShapesAndDtypeOptions) {
  // 3 KDA layers + 1 MLA; H = HV = 4, d = 32: D = 3*4*32 = 384, state [4, 32, 32].
  const model::ModelConfig config = test_config("golden/kimi_linear");
  const StatePool pool =
      make_pool(config, 2, {.conv_dtype = DType::kF32, .ssm_dtype = DType::kBF16});
  ASSERT_EQ(pool.num_layers(), 3);
  EXPECT_EQ(pool.linear_index(3), -1);
  for (int i = 0; i < pool.num_layers(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(shape_of(pool.conv_state(i)), (std::vector<int64_t>{2, 384, 3}));
    EXPECT_EQ(pool.conv_state(i).dtype(), DType::kF32);
    EXPECT_EQ(shape_of(pool.ssm_state(i)), (std::vector<int64_t>{2, 4, 32, 32}));
    EXPECT_EQ(pool.ssm_state(i).dtype(), DType::kBF16);
  }
}

TEST(StatePool, BytesPerSlotIsTheSumOfTheTensors) {
  for (const char* arch : {"golden/qwen3_next", "golden/kimi_linear", "golden/qwen3_5"}) {
    for (const StatePoolOptions options :
         {StatePoolOptions{},
          StatePoolOptions{.conv_dtype = DType::kF32, .ssm_dtype = DType::kBF16}}) {
      SCOPED_TRACE(arch);
      const model::ModelConfig config = test_config(arch);
      const StatePool pool = make_pool(config, 3, options);
      int64_t bytes = 0;
      for (int i = 0; i < pool.num_layers(); ++i)
        bytes += pool.conv_state(i).span_bytes() + pool.ssm_state(i).span_bytes();
      EXPECT_EQ(StatePool::bytes_per_slot(config, options) * 3, bytes);
      EXPECT_EQ(pool.slot_bytes(), StatePool::bytes_per_slot(config, options));
    }
  }
  // By hand, qwen3_next with the defaults: 3 layers x (256*3 bf16 + 4*32*32 f32) = 3 x 17920.
  EXPECT_EQ(StatePool::bytes_per_slot(test_config("golden/qwen3_next")), 53760);
}

TEST(StatePool, KimiK3PerRequestState) {
  // 69 KDA layers, 96 heads of d = 128, K = 4: SSM [96, 128, 128] f32 + conv [3*12288, 3] bf16.
  const model::ModelConfig config = test_config("kimi_k3_config");
  ASSERT_EQ(config.num_layers_of(MixerKind::kKimiDelta), 69);
  const int64_t want = 69 * (int64_t{96} * 128 * 128 * 4 + int64_t{3} * 12288 * 3 * 2);
  const int64_t bytes = StatePool::bytes_per_slot(config);
  EXPECT_EQ(bytes, want);
  std::printf(
      "Kimi K3 per-request state (69 KDA layers, f32 SSM, bf16 conv): %lld bytes = %.1f MiB\n",
      static_cast<long long>(bytes), double(bytes) / (1024.0 * 1024.0));
}

TEST(StatePool, AllocateUntilExhaustedThenFreeAndReuse) {
  StatePool pool = make_pool(test_config("golden/qwen3_next"), 4);
  std::vector<int32_t> slots;
  for (int i = 0; i < 4; ++i) {
    Result<int32_t> slot = pool.allocate();
    ASSERT_TRUE(slot.ok()) << slot.status().message();
    EXPECT_TRUE(pool.is_allocated(*slot));
    slots.push_back(*slot);
  }
  EXPECT_EQ(slots, (std::vector<int32_t>{0, 1, 2, 3}));  // lowest id first on a fresh pool
  EXPECT_EQ(pool.free_slots(), 0);
  EXPECT_EQ(pool.used_slots(), 4);

  Result<int32_t> none = pool.allocate();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(none.status().message().find("4 of 4 slots are in use"), std::string::npos)
      << none.status().message();

  ASSERT_OK(pool.free(2));
  EXPECT_FALSE(pool.is_allocated(2));
  EXPECT_EQ(pool.free_slots(), 1);
  Result<int32_t> again = pool.allocate();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 2);
}

TEST(StatePool, FreeErrors) {
  StatePool pool = make_pool(test_config("golden/qwen3_next"), 3);
  Result<int32_t> slot = pool.allocate();
  ASSERT_TRUE(slot.ok());
  ASSERT_OK(pool.free(*slot));
  EXPECT_ERROR_CONTAINS(pool.free(*slot), "is not allocated");  // double free
  EXPECT_ERROR_CONTAINS(pool.free(1), "is not allocated");      // never allocated
  EXPECT_ERROR_CONTAINS(pool.free(-1), "outside [0, 3)");
  EXPECT_ERROR_CONTAINS(pool.free(3), "outside [0, 3)");
  EXPECT_EQ(pool.free_slots(), 3);  // failed frees change nothing
}

TEST(StatePool, AllocateFreeCyclesLeakNothing) {
  StatePool pool = make_pool(test_config("golden/kimi_linear"), 8);
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    const int64_t n = 1 + int64_t(rng() % 8);
    std::vector<int32_t> held;
    for (int64_t i = 0; i < n; ++i) {
      Result<int32_t> slot = pool.allocate();
      ASSERT_TRUE(slot.ok()) << slot.status().message();
      held.push_back(*slot);
    }
    EXPECT_EQ(std::set<int32_t>(held.begin(), held.end()).size(), held.size()) << "a slot twice";
    std::shuffle(held.begin(), held.end(), rng);
    for (int32_t slot : held) ASSERT_OK(pool.free(slot));
    ASSERT_EQ(pool.free_slots(), 8) << "round " << round;
  }
}

TEST(StatePool, ZeroAndCopyTouchOnlyTheirSlot) {
  for (const char* arch : {"golden/qwen3_next", "golden/kimi_linear"}) {
    SCOPED_TRACE(arch);
    StatePool pool = make_pool(test_config(arch), 5);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(pool.allocate().ok());
    std::mt19937 rng(11);
    for (int i = 0; i < pool.num_layers(); ++i) {
      fill_random_bytes(pool.conv_state(i), rng);
      fill_random_bytes(pool.ssm_state(i), rng);
    }
    // Host copies of every pool before the operations.
    std::vector<Tensor> before;
    for (int i = 0; i < pool.num_layers(); ++i) {
      for (const TensorView& v : {pool.conv_state(i), pool.ssm_state(i)}) {
        Tensor t = Tensor::empty(v.ndim(), v.shape(), v.dtype());
        std::memcpy(t.view().raw(), v.raw(), size_t(v.span_bytes()));
        before.push_back(t);
      }
    }

    ASSERT_OK(pool.copy(1, 3));
    ASSERT_OK(pool.zero(4));
    ASSERT_OK(pool.copy(2, 2));  // onto itself: a no-op
    for (int i = 0; i < pool.num_layers(); ++i) {
      const TensorView now[2] = {pool.conv_state(i), pool.ssm_state(i)};
      for (int kind = 0; kind < 2; ++kind) {
        SCOPED_TRACE(::testing::Message() << "linear layer " << i << (kind ? " ssm" : " conv"));
        const TensorView old = before[size_t(2 * i + kind)].view();
        EXPECT_TRUE(same_bytes(now[kind].select(3), old.select(1))) << "copy(1, 3)";
        EXPECT_TRUE(all_zero_bytes(now[kind].select(4))) << "zero(4)";
        for (int64_t s : {0, 1, 2})
          EXPECT_TRUE(same_bytes(now[kind].select(s), old.select(s))) << "slot " << s << " changed";
      }
    }
  }
}

TEST(StatePool, ZeroAndCopyNeedAllocatedSlots) {
  StatePool pool = make_pool(test_config("golden/qwen3_next"), 3);
  Result<int32_t> slot = pool.allocate();
  ASSERT_TRUE(slot.ok());
  EXPECT_ERROR_CONTAINS(pool.zero(1), "state_pool.zero: slot 1 is not allocated");
  EXPECT_ERROR_CONTAINS(pool.copy(*slot, 1), "state_pool.copy: slot 1 is not allocated");
  EXPECT_ERROR_CONTAINS(pool.copy(2, *slot), "state_pool.copy: slot 2 is not allocated");
  EXPECT_ERROR_CONTAINS(pool.copy(*slot, 7), "outside [0, 3)");
}

TEST(StatePool, CreateErrors) {
  const model::ModelConfig config = test_config("golden/qwen3_next");
  auto create_status = [](const model::ModelConfig& c, int64_t slots, StatePoolOptions o = {}) {
    return StatePool::create(c, slots, o).status();
  };
  EXPECT_ERROR_CONTAINS(create_status(config, 0), "num_slots is 0");
  EXPECT_ERROR_CONTAINS(create_status(config, int64_t{1} << 31), "expected [1, 2^31)");
  EXPECT_ERROR_CONTAINS(create_status(config, 1, {.conv_dtype = DType::kF16}),
                        "conv_dtype is f16, expected f32 or bf16");
  EXPECT_ERROR_CONTAINS(create_status(config, 1, {.ssm_dtype = DType::kI8}),
                        "ssm_dtype is i8, expected f32 or bf16");
  EXPECT_ERROR_CONTAINS(create_status(with_all_mixers(config, MixerKind::kFullAttention), 1),
                        "has no linear-attention layer");
}

}  // namespace
}  // namespace hyla::runtime
