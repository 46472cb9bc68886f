// moe_grouped_linear: CUDA body against the CPU body. bf16 weights take the tensor-core path
// (x rounded to bf16) where K % 8 == 0 and rows are 16-byte aligned, the CUDA-core path
// otherwise; f32 weights always the CUDA-core path. Tile heights 16 / 32 / 64 (picked by the mean
// rows per expert), a skewed expert spanning many tiles, empty experts, rows outside every
// expert's block (left untouched), more experts than the table kernel's threads, K not a multiple
// of the 64-wide step, Nout not a multiple of the 64-column block, strided and misaligned x / y.
// Fresh random inputs every run: case k draws from base + k (the trace names both;
// HYLA_TEST_SEED=<base> replays a run).
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cuda_testing.h"
#include "kernels/moe_grouped_linear.h"
#include "kernels/moe_grouped_linear_cases.h"

namespace hyla::kernels {
namespace {

using testing::GroupedCase;
using testing::TwinView;

const GroupedCase kCases[] = {
    // decode-like: ~1 row per expert (16-row tiles)
    {.E = 64, .K = 256, .Nout = 192, .rows = 1},
    // ~23 rows per expert (32-row tiles), K = 520 (a partial last step), rows outside the blocks
    {.E = 8, .K = 520, .Nout = 100, .rows = 30, .lead = 3, .tail = 5},
    // ~45 rows per expert (64-row tiles), one expert of 1201 rows (19 tiles)
    {.E = 6, .K = 192, .Nout = 130, .rows = 60, .skewed = true},
    // strided x / y with 16-byte aligned rows: still tensor cores
    {.E = 12, .K = 128, .Nout = 65, .rows = 2, .tail = 2, .pad = 4},
    {.E = 1, .K = 8, .Nout = 1, .rows = 1},
    // more experts than the table kernel has threads: its scan runs two rounds
    {.E = 1100, .K = 16, .Nout = 8, .rows = 1},
    // CUDA-core path: f32 weights; bf16 weights with K % 8 != 0; bf16 with misaligned x rows
    {.E = 6,
     .K = 77,
     .Nout = 33,
     .rows = 5,
     .weight_dtype = DType::kF32,
     .lead = 1,
     .tail = 2,
     .pad = 3,
     .offset = 1},
    {.E = 5, .K = 60, .Nout = 70, .rows = 20, .weight_dtype = DType::kF32, .skewed = true},
    {.E = 5, .K = 60, .Nout = 70, .rows = 4},
    {.E = 4, .K = 64, .Nout = 64, .rows = 3, .pad = 1, .offset = 1},
};

TEST(MoeGroupedLinearCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t base = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(base));
  uint32_t seed = base;
  for (const GroupedCase& c : kCases) {
    ++seed;
    SCOPED_TRACE(c.name() + str_cat("_seed", seed));
    std::mt19937 rng(seed);
    const std::vector<int32_t> offsets = testing::random_offsets(c, rng);
    const int64_t N = offsets.back() + c.tail;
    const TwinView x =
        testing::twin_uniform({N, c.K}, DType::kF32, rng, -1.0f, 1.0f, c.pad, c.offset);
    const TwinView w = testing::twin_uniform({c.E, c.Nout, c.K}, c.weight_dtype, rng);
    const TwinView expert_offsets =
        testing::twin(testing::int32_tensor(offsets), {int64_t(offsets.size())});
    const TwinView y = testing::twin_poisoned({N, c.Nout}, DType::kF32, c.pad, c.offset);
    ASSERT_OK(moe_grouped_linear(
        {.x = x.host, .weight = w.host, .expert_offsets = expert_offsets.host, .y = y.host}));
    // the workspace's contents must not matter: poisoned too
    const Tensor workspace =
        testing::poisoned_gpu({moe_grouped_linear_workspace_bytes(c.E, N) / 4}, DType::kI32);
    ASSERT_OK(moe_grouped_linear({.x = x.device,
                                  .weight = w.device,
                                  .expert_offsets = expert_offsets.device,
                                  .workspace = workspace,
                                  .y = y.device}));
    const testing::HostResult got_y = testing::device_result(y);
    const TensorView got = got_y.view, want = y.host;

    // Both sides sum K products in fp32 (<= K 2^-24 sum |x w| each). bf16 weights: the GPU may
    // round x to bf16 (tensor cores), moving y by 2^-8 sum_k delta_k x w with |delta_k| <= 1: for
    // independent roundings a standard deviation of 2^-8 / sqrt(3) sqrt(sum (x w)^2), so
    // 4 x 2^-8 sqrt(sum (x w)^2) is about 7 standard deviations.
    const testing::ProductScales scale = testing::product_scales(x.host, w.host, offsets);
    const double order = 2.01 * double(c.K) * std::ldexp(1.0, -24);
    const double rounding = c.weight_dtype == DType::kBF16 ? 4 * std::ldexp(1.0, -8) : 0.0;
    const std::vector<double> got_v = testing::to_f64(got), want_v = testing::to_f64(want);
    int failures = 0;
    for (int64_t p = offsets.front(); p < offsets.back(); ++p)
      for (int64_t n = 0; n < c.Nout; ++n) {
        const size_t i = size_t(p * c.Nout + n);
        const double tol = order * scale.abs_sum[i] + rounding * scale.root_sum_sq[i] + 1e-30;
        if (!(std::abs(got_v[i] - want_v[i]) <= tol) && ++failures <= 5)
          ADD_FAILURE() << "y[p=" << p << ", n=" << n << "] = " << got_v[i] << ", CPU " << want_v[i]
                        << ", tolerance " << tol;
      }
    EXPECT_EQ(failures, 0);
    // rows outside [offsets[0], offsets[E]) and the row padding keep their poison
    EXPECT_TRUE(
        testing::untouched_outside(got_y.storage, got.slice(offsets.front(), offsets.back())));
  }
}

TEST(MoeGroupedLinearCudaTest, EmptyBatchLaunchesNothing) {
  HYLA_SKIP_WITHOUT_CUDA();
  const Tensor x = Tensor::empty({0, 16}, DType::kF32, Device::cuda());
  const Tensor w = Tensor::empty({4, 8, 16}, DType::kBF16, Device::cuda());
  const Tensor offsets = testing::on_gpu(testing::int32_tensor({0, 0, 0, 0, 0}));
  const Tensor y = Tensor::empty({0, 8}, DType::kF32, Device::cuda());
  const Tensor workspace =
      Tensor::empty({moe_grouped_linear_workspace_bytes(4, 0) / 4}, DType::kI32, Device::cuda());
  EXPECT_OK(moe_grouped_linear(
      {.x = x, .weight = w, .expert_offsets = offsets, .workspace = workspace, .y = y}));
  device_synchronize(Device::cuda());
}

/// Offsets are not checked on CUDA calls (no sync); bad ones are clamped into [0, N], so the
/// call finishes without a device fault (compute-sanitizer would report any stray access).
TEST(MoeGroupedLinearCudaTest, BadOffsetsStayInBounds) {
  HYLA_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(3);
  const int64_t E = 4, N = 40, K = 64, Nout = 64;
  for (const std::vector<int32_t>& bad :
       {std::vector<int32_t>{-50, 10, 5, 1000, 1 << 30}, std::vector<int32_t>{0, 40, 40, 40, 41},
        std::vector<int32_t>{30, 20, 10, 0, -1}}) {
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      const Tensor x = testing::on_gpu(testing::random_uniform({N, K}, DType::kF32, rng));
      const Tensor w = testing::on_gpu(testing::random_uniform({E, Nout, K}, dtype, rng));
      const Tensor offsets = testing::on_gpu(testing::int32_tensor(bad));
      const Tensor y = testing::poisoned_gpu({N, Nout}, DType::kF32);
      const Tensor workspace =
          testing::poisoned_gpu({moe_grouped_linear_workspace_bytes(E, N) / 4}, DType::kI32);
      EXPECT_OK(moe_grouped_linear(
          {.x = x, .weight = w, .expert_offsets = offsets, .workspace = workspace, .y = y}));
      device_synchronize(Device::cuda());  // aborts on a device fault
    }
  }
}

TEST(MoeGroupedLinearCudaTest, RejectsMissingWorkspace) {
  HYLA_SKIP_WITHOUT_CUDA();
  const Tensor x = Tensor::empty({5, 16}, DType::kF32, Device::cuda());
  const Tensor w = Tensor::empty({4, 8, 16}, DType::kBF16, Device::cuda());
  const Tensor offsets = testing::on_gpu(testing::int32_tensor({0, 1, 2, 3, 5}));
  const Tensor y = Tensor::empty({5, 8}, DType::kF32, Device::cuda());
  EXPECT_ERROR_CONTAINS(
      moe_grouped_linear({.x = x, .weight = w, .expert_offsets = offsets, .y = y}),
      "workspace is missing");
  const Tensor small = Tensor::empty({moe_grouped_linear_workspace_bytes(4, 5) / 4 - 1},
                                     DType::kI32, Device::cuda());
  EXPECT_ERROR_CONTAINS(
      moe_grouped_linear(
          {.x = x, .weight = w, .expert_offsets = offsets, .workspace = small, .y = y}),
      "workspace holds");
}

}  // namespace
}  // namespace hyla::kernels
