// CUDA body of RMSNorm (kernels/rmsnorm.h) against the CPU body, which is the specification:
// both forms, f32 / bf16 x, weight and y, 1-4 dims, d in {1, 33, 129, 2048}, row-strided and
// misaligned views, in place (y = x), and the fused residual (residual += x, y = norm(residual)),
// whose sum must match bit for bit. Fresh random inputs per run (seed in the trace;
// HYLA_TEST_SEED=<n> replays it). Skipped when no CUDA device is visible.
#include <random>
#include <string>
#include <vector>

#include "cuda_testing.h"
#include "kernels/rmsnorm.h"

namespace hyla::kernels {
namespace {

using testing::Tolerance;
using testing::TwinView;

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;

/// Both bodies sum d squares in fp32 in different orders (sequential vs a 256-thread tree):
/// measured <= 2.4e-6 relative apart at d = 2048 in a CPU simulation of both orders, halved by
/// the rsqrt; the products after it round alike. A bf16 y: testing::rounded_to, one bf16 ulp more.
constexpr Tolerance kF32Output{
    .atol = 1e-6, .rtol = 2e-5, .why = "fp32 sums of d <= 2048 squares in two orders"};
constexpr Tolerance kExact{.atol = 0, .rtol = 0, .why = "one fp32 add of the same operands"};

struct Case {
  std::vector<int64_t> shape;
  DType x_dtype, weight_dtype, y_dtype;
  RmsNormForm form;
  int64_t pad = 0, offset = 0;  // storage layout of x, y and residual: strided / misaligned
  bool in_place = false;        // y = x
  bool residual = false;        // fused residual add

  std::string name() const {
    std::string s = "shape";
    for (size_t i = 0; i < shape.size(); ++i) s += str_cat(i ? "x" : "", shape[i]);
    s += str_cat("_x", dtype_name(x_dtype), "_w", dtype_name(weight_dtype), "_y",
                 dtype_name(y_dtype), form == RmsNormForm::kOffset ? "_offset" : "_weight");
    if (pad) s += str_cat("_pad", pad);
    if (offset) s += str_cat("_at", offset);
    if (in_place) s += "_inplace";
    if (residual) s += "_residual";
    return s;
  }
};

constexpr RmsNormForm kWeight = RmsNormForm::kWeight, kOffset = RmsNormForm::kOffset;
const Case kCases[] = {
    {{1}, kF32, kF32, kF32, kWeight},
    {{37}, kF32, kF32, kF32, kOffset},
    {{0, 16}, kF32, kF32, kF32, kOffset},
    {{5, 33}, kBF16, kBF16, kBF16, kWeight},
    {{7, 2048}, kF32, kBF16, kF32, kOffset},
    {{3, 129}, kBF16, kF32, kF32, kWeight, 2, 0},
    {{9, 4, 32}, kF32, kF32, kF32, kOffset, 3, 1},
    {{2, 3, 2, 17}, kF32, kBF16, kBF16, kOffset, 5, 3},
    {{6, 31}, kF32, kF32, kF32, kOffset, 1, 0, true},
    {{4, 2, 19}, kBF16, kBF16, kBF16, kWeight, 0, 1, true},
    {{1, 1}, kF32, kF32, kF32, kWeight, 0, 0, false, true},
    {{3, 33}, kF32, kF32, kF32, kOffset, 0, 0, false, true},
    {{5, 2048}, kF32, kBF16, kBF16, kOffset, 0, 0, false, true},
    {{2, 3, 129}, kBF16, kF32, kF32, kWeight, 4, 1, false, true},
    {{4, 2048}, kF32, kF32, kF32, kOffset, 0, 0, true, true},
    {{2, 2, 2, 65}, kBF16, kBF16, kBF16, kWeight, 3, 0, true, true},
};

TEST(RmsNormCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name());
    const int64_t d = c.shape.back();
    TwinView x = testing::twin_random(c.shape, c.x_dtype, rng, 0.5f, 2.0f, c.pad, c.offset);
    TwinView weight =
        testing::twin_random({d}, c.weight_dtype, rng, c.form == kOffset ? 0.0f : 1.0f, 0.1f);
    TwinView y = c.in_place ? x : testing::twin_poisoned(c.shape, c.y_dtype, c.pad, c.offset);
    TwinView residual;
    if (c.residual)
      residual = testing::twin_random(c.shape, kF32, rng, 0.0f, 1.0f, c.pad, c.offset);
    ASSERT_OK(rmsnorm({.x = x.host,
                       .weight = weight.host,
                       .eps = 1e-6f,
                       .form = c.form,
                       .y = y.host,
                       .residual = residual.host}));
    ASSERT_OK(rmsnorm({.x = x.device,
                       .weight = weight.device,
                       .eps = 1e-6f,
                       .form = c.form,
                       .y = y.device,
                       .residual = residual.device}));
    testing::expect_twin_close(y, testing::rounded_to(y.host.dtype(), kF32Output));
    if (c.residual) testing::expect_twin_close(residual, kExact);
  }
}

TEST(RmsNormCudaTest, RefusesMixedDevices) {
  HYLA_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(1);
  TwinView x = testing::twin_random({2, 8}, kF32, rng);
  TwinView weight = testing::twin_random({8}, kF32, rng);
  TwinView y = testing::twin_poisoned({2, 8}, kF32);
  TwinView residual = testing::twin_random({2, 8}, kF32, rng);
  EXPECT_ERROR_CONTAINS(rmsnorm({.x = x.device, .weight = weight.host, .y = y.device}),
                        "rmsnorm: weight is on cpu, expected cuda:0");
  EXPECT_ERROR_CONTAINS(
      rmsnorm({.x = x.device, .weight = weight.device, .y = y.device, .residual = residual.host}),
      "rmsnorm: residual is on cpu, expected cuda:0");
}

}  // namespace
}  // namespace hyla::kernels
