// CUDA body of the gated RMSNorm (kernels/gated_rmsnorm.h) against the CPU body, which is the
// specification: silu and sigmoid gates, every f32 / bf16 combination that matters (x, gate,
// weight, y), d_v in {1, 33, 64, 129, 2048}, T and HV strided and misaligned, in place (y = x).
// Fresh random inputs per run (seed in the trace; HYLA_TEST_SEED=<n> replays it). Skipped when no
// CUDA device is visible.
#include <random>
#include <string>
#include <vector>

#include "cuda_testing.h"
#include "kernels/gated_rmsnorm.h"

namespace hyla::kernels {
namespace {

using testing::Tolerance;
using testing::TwinView;

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;

/// The sum of d_v squares in two fp32 orders (<= 2.4e-6 relative apart at 2048 in a CPU
/// simulation of both), halved by the rsqrt, plus silu / sigmoid through CUDA's expf (<= 2 ulp)
/// against the host's (<= 1 ulp). A bf16 y: testing::rounded_to, one bf16 ulp more.
constexpr Tolerance kF32Output{
    .atol = 1e-6, .rtol = 2e-5, .why = "fp32 sums of d_v <= 2048 squares in two orders, expf ulps"};

struct Case {
  int64_t T, HV, d_v;
  DType x_dtype, gate_dtype, weight_dtype, y_dtype;
  GateActivation act;
  int64_t pad = 0, offset = 0;
  bool in_place = false;

  std::string name() const {
    return str_cat("T", T, "_HV", HV, "_dv", d_v, "_x", dtype_name(x_dtype), "_g",
                   dtype_name(gate_dtype), "_w", dtype_name(weight_dtype), "_y",
                   dtype_name(y_dtype), act == GateActivation::kSilu ? "_silu" : "_sigmoid",
                   pad ? str_cat("_pad", pad) : "", offset ? str_cat("_at", offset) : "",
                   in_place ? "_inplace" : "");
  }
};

constexpr GateActivation kSilu = GateActivation::kSilu, kSigmoid = GateActivation::kSigmoid;
const Case kCases[] = {
    {1, 1, 1, kF32, kF32, kF32, kF32, kSilu},
    {0, 4, 64, kF32, kF32, kF32, kF32, kSilu},
    {3, 4, 64, kF32, kF32, kF32, kF32, kSilu},
    {5, 2, 33, kBF16, kBF16, kBF16, kBF16, kSigmoid},
    {2, 3, 2048, kF32, kBF16, kF32, kF32, kSilu},
    {7, 5, 129, kBF16, kF32, kBF16, kF32, kSigmoid, 3, 1},
    {4, 8, 128, kF32, kF32, kF32, kBF16, kSilu, 2, 0},
    {6, 3, 31, kF32, kF32, kF32, kF32, kSigmoid, 1, 0, true},
    {3, 2, 65, kBF16, kBF16, kF32, kBF16, kSilu, 0, 1, true},
};

TEST(GatedRmsNormCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name());
    const std::vector<int64_t> shape = {c.T, c.HV, c.d_v};
    TwinView x = testing::twin_random(shape, c.x_dtype, rng, 0.0f, 1.5f, c.pad, c.offset);
    TwinView gate = testing::twin_random(shape, c.gate_dtype, rng, 0.0f, 3.0f, c.pad + 1, 0);
    TwinView weight = testing::twin_random({c.d_v}, c.weight_dtype, rng, 1.0f, 0.2f);
    TwinView y = c.in_place ? x : testing::twin_poisoned(shape, c.y_dtype, c.pad, c.offset);
    ASSERT_OK(gated_rmsnorm({.x = x.host,
                             .gate = gate.host,
                             .weight = weight.host,
                             .eps = 1e-6f,
                             .act = c.act,
                             .y = y.host}));
    ASSERT_OK(gated_rmsnorm({.x = x.device,
                             .gate = gate.device,
                             .weight = weight.device,
                             .eps = 1e-6f,
                             .act = c.act,
                             .y = y.device}));
    testing::expect_twin_close(y, testing::rounded_to(y.host.dtype(), kF32Output));
  }
}

}  // namespace
}  // namespace hyla::kernels
