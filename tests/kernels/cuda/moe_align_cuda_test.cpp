// moe_align and moe_permute: CUDA bodies against the CPU bodies. The alignment must agree
// exactly (it fixes the combine's summation order); so must the gathered rows (a copy). Sizes
// not multiples of 32, empty experts, repeated ids, strided views, more slots than one warp's
// pass, and out-of-range ids on the device (placed nowhere, position -1, no out-of-bounds write).
// Fresh random inputs every run: case k draws from base + k (the trace names both;
// HYLA_TEST_SEED=<base> replays a run).
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "cuda_testing.h"
#include "kernels/moe_align.h"

namespace hyla::kernels {
namespace {

using testing::padded_numel;
using testing::padded_view;
using testing::TwinView;

struct AlignCase {
  int64_t T, K, E, used;
  bool repeats, strided;
  std::string name() const {
    return str_cat("T", T, "_K", K, "_E", E, "_used", used, repeats ? "_repeats" : "",
                   strided ? "_strided" : "");
  }
};

const AlignCase kCases[] = {
    {0, 2, 4, 4, false, false},
    {1, 1, 1, 1, false, false},
    {5, 2, 4, 4, false, false},
    {7, 3, 16, 5, false, true},
    {33, 8, 64, 64, false, true},
    {100, 4, 37, 20, true, false},
    {1000, 10, 512, 512, false, false},
    {257, 8, 256, 256, false, true},
    {300, 1, 3, 3, true, false},
    // the H200 benchmark prefill (T 4096 x top-10 over 512 experts); N not a multiple of 128
    {4096, 10, 512, 512, false, false},
    {333, 7, 100, 90, true, true},
};

/// [T, K] ids in a (possibly strided) host storage: distinct experts per token unless `repeats`,
/// from the first `used` experts.
Tensor random_id_storage(const AlignCase& c, int64_t pad, int64_t offset, std::mt19937& rng) {
  Tensor storage = testing::poisoned({padded_numel({c.T, c.K}, pad, offset)}, DType::kI32);
  const TensorView view = padded_view(storage, {c.T, c.K}, pad, offset);
  std::vector<int32_t> experts(static_cast<size_t>(c.used));
  for (int64_t t = 0; t < c.T; ++t) {
    for (int64_t e = 0; e < c.used; ++e) experts[size_t(e)] = int32_t(e);
    std::shuffle(experts.begin(), experts.end(), rng);
    for (int64_t k = 0; k < c.K; ++k)
      view.host<int32_t>()[t * view.stride(0) + k] =
          c.repeats ? int32_t(rng() % uint32_t(c.used)) : experts[size_t(k)];
  }
  return storage;
}

struct AlignOut {
  Tensor offsets, sorted_slots, slot_positions;
};

AlignOut run_align(const TensorView& ids, int64_t E, Device device) {
  const int64_t T = ids.size(0), K = ids.size(1);
  AlignOut o;
  if (device.is_cpu()) {
    o = {testing::poisoned({E + 1}, DType::kI32), testing::poisoned({T * K}, DType::kI32),
         testing::poisoned({T, K}, DType::kI32)};
  } else {
    o = {testing::poisoned_gpu({E + 1}, DType::kI32), testing::poisoned_gpu({T * K}, DType::kI32),
         testing::poisoned_gpu({T, K}, DType::kI32)};
  }
  const Status s = moe_align({.topk_ids = ids,
                              .num_experts = E,
                              .expert_offsets = o.offsets,
                              .sorted_slots = o.sorted_slots,
                              .slot_positions = o.slot_positions});
  EXPECT_TRUE(s.ok()) << s.message();
  return o;
}

TEST(MoeAlignCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t base = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(base));
  uint32_t seed = base;
  for (const AlignCase& c : kCases) {
    ++seed;
    SCOPED_TRACE(c.name() + str_cat("_seed", seed));
    std::mt19937 rng(seed);
    const int64_t pad = c.strided ? 3 : 0, offset = c.strided ? 1 : 0;
    const TwinView ids =
        testing::twin(random_id_storage(c, pad, offset, rng), {c.T, c.K}, pad, offset);
    const AlignOut want = run_align(ids.host, c.E, Device::cpu());
    const AlignOut got = run_align(ids.device, c.E, Device::cuda());
    EXPECT_TRUE(testing::bitwise_equal(testing::on_host(got.offsets), want.offsets));
    EXPECT_TRUE(testing::bitwise_equal(testing::on_host(got.sorted_slots), want.sorted_slots));
    EXPECT_TRUE(testing::bitwise_equal(testing::on_host(got.slot_positions), want.slot_positions));
  }
}

TEST(MoeAlignCudaTest, OutOfRangeIdsArePlacedNowhere) {
  HYLA_SKIP_WITHOUT_CUDA();
  // T = 3, K = 2, E = 4: ids 7 and -2 are outside [0, 4); the others sort as usual
  const Tensor ids = testing::on_gpu(testing::int32_tensor({2, 7, 0, 1, -2, 2}));
  const AlignOut got = run_align(ids.view().reshape({3, 2}), 4, Device::cuda());
  const Tensor offsets = testing::on_host(got.offsets);
  const Tensor sorted = testing::on_host(got.sorted_slots);
  const Tensor positions = testing::on_host(got.slot_positions);
  EXPECT_EQ(std::vector<int32_t>(offsets.host<int32_t>(), offsets.host<int32_t>() + 5),
            (std::vector<int32_t>{0, 1, 2, 4, 4}));
  // expert 0: slot 2; expert 1: slot 3; expert 2: slots 0, 5; the tail (2 rows) unwritten
  EXPECT_EQ(std::vector<int32_t>(sorted.host<int32_t>(), sorted.host<int32_t>() + 4),
            (std::vector<int32_t>{2, 3, 0, 5}));
  EXPECT_EQ(std::vector<int32_t>(positions.host<int32_t>(), positions.host<int32_t>() + 6),
            (std::vector<int32_t>{2, -1, 0, 1, -1, 3}));
}

struct PermuteCase {
  int64_t T, K, width;
  DType dtype;
  bool strided;
};

TEST(MoePermuteCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const PermuteCase cases[] = {{1, 1, 1, DType::kF32, false},
                               {9, 3, 33, DType::kF32, true},
                               {20, 4, 130, DType::kBF16, false},
                               {5, 2, 7, DType::kBF16, true},
                               {70, 8, 257, DType::kF32, false}};
  const uint32_t base = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(base));
  uint32_t seed = base + 50;
  for (const PermuteCase& c : cases) {
    ++seed;
    SCOPED_TRACE(str_cat("T", c.T, "_K", c.K, "_w", c.width, "_", dtype_name(c.dtype),
                         c.strided ? "_strided" : "", "_seed", seed));
    std::mt19937 rng(seed);
    const int64_t N = c.T * c.K, pad = c.strided ? 5 : 0, offset = c.strided ? 3 : 0;
    const TwinView x =
        testing::twin_uniform({c.T, c.width}, c.dtype, rng, -1.0f, 1.0f, pad, offset);
    std::vector<int32_t> slots(static_cast<size_t>(N));
    for (int64_t s = 0; s < N; ++s) slots[size_t(s)] = int32_t(s);
    std::shuffle(slots.begin(), slots.end(), rng);
    if (N >= 3) {  // zero rows
      slots[0] = -1;
      slots[2] = int32_t(N + 5);
    }
    const TwinView sorted_slots = testing::twin(testing::int32_tensor(slots), {N});
    const TwinView y = testing::twin_poisoned({N, c.width}, c.dtype, pad, 0);
    ASSERT_OK(
        moe_permute({.x = x.host, .sorted_slots = sorted_slots.host, .top_k = c.K, .y = y.host}));
    ASSERT_OK(moe_permute(
        {.x = x.device, .sorted_slots = sorted_slots.device, .top_k = c.K, .y = y.device}));
    // whole storages: rows bitwise, and the padding still poisoned on both
    EXPECT_TRUE(testing::bitwise_equal(testing::on_host(y.device_storage), y.host_storage));
  }
}

}  // namespace
}  // namespace hyla::kernels
