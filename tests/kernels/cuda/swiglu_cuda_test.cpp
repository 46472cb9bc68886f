// CUDA body of SwiGLU (swiglu, kernels/swiglu.h) against the CPU body, which is the
// specification, with x ~ N(0, 3), on the GLU cases (glu_cuda_cases.h: f32 and bf16 y, T in
// {0, 1, 7, 300}, I in {1, 33, 129, 2048}, row-strided and misaligned x and y, in place over x's
// gate half). Fresh random inputs per run (seed in the trace; HYLA_TEST_SEED=<n> replays it).
// Skipped when no CUDA device is visible.
#include "glu_cuda_cases.h"
#include "kernels/swiglu.h"

namespace hyla::kernels {
namespace {

/// silu through CUDA's expf (<= 2 ulp) against the host's (<= 1 ulp), one division and one product:
/// a few ulp. A bf16 y: testing::rounded_to, one bf16 ulp more.
constexpr testing::Tolerance kF32Output{
    .atol = 1e-30, .rtol = 2e-6, .why = "expf of two libms, a division, a product: a few ulp"};

TEST(SwigluCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  testing::expect_glu_cuda_matches_cpu(
      3.0f, kF32Output,
      [](const TensorView& x, const TensorView& y) { return swiglu({.x = x, .y = y}); });
}

}  // namespace
}  // namespace hyla::kernels
