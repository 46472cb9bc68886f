// CUDA body of SwiGLU (silu_and_mul, kernels/swiglu.h) against the CPU body, which is the
// specification: f32 and bf16 y, T in {0, 1, 7, 300}, I in {1, 33, 129, 2048}, row-strided and
// misaligned x and y, in place over x's gate half. Fresh random inputs per run (seed in the trace;
// HYLA_TEST_SEED=<n> replays it). Skipped when no CUDA device is visible.
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/twin_views.h"
#include "kernels/swiglu.h"

namespace hyla::kernels {
namespace {

using testing::Tolerance;
using testing::TwinView;

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;

/// silu through CUDA's expf (<= 2 ulp) against the host's (<= 1 ulp), one division and one product:
/// a few ulp.
constexpr Tolerance kF32Output{
    .atol = 1e-30, .rtol = 2e-6, .why = "expf of two libms, a division, a product: a few ulp"};
/// Values a few fp32 ulp apart can round to neighbouring bf16 values: one bf16 ulp, <= 2^-7.
constexpr Tolerance kBf16Output{
    .atol = 1e-30, .rtol = 1.0 / 128 + 2e-6, .why = "one bf16 rounding each side: <= 1 bf16 ulp"};

struct Case {
  int64_t T, I;
  DType y_dtype;
  bool strided = false;   // x and y row-strided and misaligned
  bool in_place = false;  // y = x[:, :I] with x's row stride

  std::string name() const {
    return str_cat("T", T, "_I", I, "_y", dtype_name(y_dtype), strided ? "_strided" : "",
                   in_place ? "_inplace" : "");
  }
};

const Case kCases[] = {
    {0, 8, kF32},
    {1, 1, kF32},
    {1, 33, kBF16},
    {7, 129, kF32, true},
    {7, 129, kBF16, true},
    {300, 96, kF32},
    {3, 2048, kBF16},
    {5, 64, kF32, false, true},
    {1, 33, kF32, true, true},
};

TEST(SiluAndMulCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::gpu_test_seed();
  SCOPED_TRACE(str_cat("HYLA_TEST_SEED=", seed));
  std::mt19937 rng(seed);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name());
    const int64_t pad = c.strided ? 3 : 0, offset = c.strided ? 1 : 0;
    TwinView x = testing::twin_random({c.T, 2 * c.I}, kF32, rng, 0.0f, 3.0f, pad, offset);
    TwinView y = testing::twin_poisoned({c.T, c.I}, c.y_dtype, c.strided ? 7 : 0, offset);
    if (c.in_place) {
      // y = the gate half of x: the first I columns of every row, x's row stride
      y = x;
      y.shape = {c.T, c.I};
      const int64_t y_shape[] = {c.T, c.I}, y_strides[] = {x.host.stride(0), 1};
      y.host = TensorView(x.host.raw(), kF32, 2, y_shape, y_strides);
      y.device = TensorView(x.device.raw(), kF32, 2, y_shape, y_strides, x.device.device());
      y.pad = c.I + pad;  // padded_view of y's shape over x's storage gives the same view
    }
    ASSERT_OK(silu_and_mul({.x = x.host, .y = y.host}));
    ASSERT_OK(silu_and_mul({.x = x.device, .y = y.device}));
    testing::expect_twin_close(y, c.y_dtype == kBF16 ? kBf16Output : kF32Output);
  }
}

}  // namespace
}  // namespace hyla::kernels
