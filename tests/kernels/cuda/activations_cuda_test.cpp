// CUDA bodies of l2norm and the elementwise activations (kernels/activations.h) against the CPU
// bodies, which are the specification: sigmoid, softplus (both sides of its threshold) and silu,
// f32 / bf16 / f16 x and y, 1-4 dims, n in {1, 33, 129, 2048}, row-strided and misaligned views,
// in place (y = x). Fresh random inputs per run (seed in the trace; HYLA_TEST_SEED=<n> replays
// it). Skipped when no CUDA device is visible.
#include <random>
#include <string>
#include <vector>

#include "cuda_testing.h"
#include "kernels/activations.h"

namespace hyla::kernels {
namespace {

using testing::Tolerance;
using testing::TwinView;

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16, kF16 = DType::kF16;

// Tolerances of the fp32 results; a bf16 / f16 y adds one ulp of its type (testing::rounded_to).

/// l2norm: the sum of n squares in two fp32 orders (<= 2.4e-6 relative apart at 2048 in a CPU
/// simulation of both), halved by the rsqrt.
constexpr Tolerance kL2NormF32{
    .atol = 1e-7, .rtol = 2e-5, .why = "fp32 sums of n <= 2048 squares in two orders"};
/// sigmoid / softplus / silu: CUDA's expf and log1pf (<= 2 ulp each) against the host libm's
/// (<= 1 ulp), one division or product after them: <= ~8 ulp, 5e-7 relative.
constexpr Tolerance kActivationF32{
    .atol = 1e-30, .rtol = 1e-6, .why = "expf / log1pf of two libms: a few ulp"};

struct Case {
  std::vector<int64_t> shape;
  DType x_dtype, y_dtype;
  int64_t pad = 0, offset = 0;
  bool in_place = false;

  std::string name() const {
    std::string s = "shape";
    for (size_t i = 0; i < shape.size(); ++i) s += str_cat(i ? "x" : "", shape[i]);
    return s + str_cat("_x", dtype_name(x_dtype), "_y", dtype_name(y_dtype),
                       pad ? str_cat("_pad", pad) : "", offset ? str_cat("_at", offset) : "",
                       in_place ? "_inplace" : "");
  }
};

const Case kCases[] = {
    {{1}, kF32, kF32},
    {{33}, kF32, kBF16},
    {{0, 8}, kF32, kF32},
    {{7, 129}, kBF16, kF32},
    {{3, 2048}, kF32, kF32},
    {{4, 3, 64}, kF16, kF16, 3, 1},
    {{2, 3, 2, 17}, kF32, kF16, 5, 3},
    {{5, 2, 40}, kBF16, kBF16, 2, 0},
    {{6, 31}, kF32, kF32, 1, 0, true},
    {{4, 2, 19}, kBF16, kBF16, 0, 1, true},
    {{3, 65}, kF16, kF16, 2, 0, true},
};

/// Runs body(x, y) -> Status on the host twins and on the device twins of every case, x normal
/// with standard deviation `stddev`, and compares y.
template <typename Body>
void expect_matches_cpu(float stddev, Tolerance f32_tolerance, Body body) {
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name());
    TwinView x = testing::twin_random(c.shape, c.x_dtype, rng, 0.0f, stddev, c.pad, c.offset);
    TwinView y = c.in_place ? x : testing::twin_poisoned(c.shape, c.y_dtype, c.pad, c.offset);
    ASSERT_OK(body(x.host, y.host));
    ASSERT_OK(body(x.device, y.device));
    testing::expect_twin_close(y, testing::rounded_to(y.host.dtype(), f32_tolerance));
  }
}

TEST(ActivationsCudaTest, L2NormMatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  expect_matches_cpu(2.0f, kL2NormF32, [](const TensorView& x, const TensorView& y) {
    return l2norm(x, y, kL2NormEps);
  });
}

TEST(ActivationsCudaTest, ActivationsMatchCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  for (Activation act : {Activation::kSigmoid, Activation::kSoftplus, Activation::kSilu}) {
    SCOPED_TRACE(int(act));
    // standard deviation 12: softplus inputs on both sides of its threshold 20, sigmoid / silu
    // well into saturation as well as near 0
    expect_matches_cpu(12.0f, kActivationF32, [act](const TensorView& x, const TensorView& y) {
      return activation(act, x, y);
    });
  }
}

}  // namespace
}  // namespace hyla::kernels
