// CUDA body of SiTU-GLU (situ_glu, kernels/situ_glu.h) against the CPU body, which is the
// specification, with x ~ N(0, 20), beta 4, linear_beta 25, on the GLU cases (glu_cuda_cases.h:
// f32 and bf16 y, T in {0, 1, 7, 300}, I in {1, 33, 129, 2048}, row-strided and misaligned x and
// y, in place over x's gate half). Fresh random inputs per run (seed in the trace;
// HYLA_TEST_SEED=<n> replays it). Skipped when no CUDA device is visible.
#include "glu_cuda_cases.h"
#include "kernels/situ_glu.h"

namespace hyla::kernels {
namespace {

/// two tanhf and one expf through CUDA's libm (<= 2 ulp each) against the host's (<= 2 ulp), four
/// products and three divisions after them: <= ~15 ulp, 1e-6 relative. A bf16 y:
/// testing::rounded_to, one bf16 ulp more.
constexpr testing::Tolerance kF32Output{
    .atol = 1e-30, .rtol = 2e-6, .why = "tanhf / expf of two libms, four products: <= ~15 ulp"};

TEST(SituGluCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  testing::expect_glu_cuda_matches_cpu(
      20.0f, kF32Output, [](const TensorView& x, const TensorView& y) {
        return situ_glu({.x = x, .beta = 4.0f, .linear_beta = 25.0f, .y = y});
      });
}

}  // namespace
}  // namespace hyla::kernels
