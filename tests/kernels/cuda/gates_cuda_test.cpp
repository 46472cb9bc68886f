// CUDA bodies of the GDN and KDA gates (kernels/gates.h) against the CPU bodies, which are the
// specification: f32 / bf16 inputs, odd sizes, row-strided and misaligned views (GDN a and b as
// the halves of one fused projection), KDA with and without beta, plain and safe gate. Fresh
// random inputs per run (seed in the trace; HYLA_TEST_SEED=<n> replays it). Skipped when no CUDA
// device is visible.
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cuda_testing.h"
#include "kernels/gates.h"

namespace hyla::kernels {
namespace {

using testing::Tolerance;
using testing::TwinView;

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;

/// Both bodies evaluate scalar_math.h's gate_log_decay from the same fp32 inputs; exp(A_log),
/// softplus and sigmoid go through CUDA's expf / log1pf (<= 2 ulp) and the host's (<= 1 ulp). A
/// few-ulp difference in A = exp(A_log) enters sigmoid(A x) multiplied by |A x| <= ~30 here
/// (A <= 4.5, |x| <= ~7): <= 30 * 3 * 6e-8 = 5.4e-6 relative.
constexpr Tolerance kDecay{
    .atol = 1e-30, .rtol = 1e-5, .why = "a few ulp of expf / log1pf, times |A x| <= 30 in sigmoid"};
constexpr Tolerance kBeta{.atol = 1e-30, .rtol = 1e-6, .why = "sigmoid: expf of two libms"};

struct GdnCase {
  int64_t T, HV;
  DType dtype;    // a and b
  bool fused_ba;  // a and b are the halves of one [T, 2 HV] row-strided buffer

  std::string name() const {
    return str_cat("T", T, "_HV", HV, "_", dtype_name(dtype), fused_ba ? "_fused_ba" : "");
  }
};

TEST(GatesCudaTest, GdnGateMatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const GdnCase cases[] = {
      {0, 4, kF32, false}, {1, 1, kF32, false},   {7, 33, kBF16, false},
      {33, 6, kF32, true}, {64, 32, kBF16, true}, {300, 129, kF32, true},
  };
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  for (const GdnCase& c : cases) {
    SCOPED_TRACE(c.name());
    TwinView a, b;
    if (c.fused_ba) {
      // one [T, 2 HV] buffer: a = columns [0, HV), b = columns [HV, 2 HV)
      TwinView ba = testing::twin_random({c.T, 2 * c.HV}, c.dtype, rng, 0.0f, 3.0f);
      a = b = ba;
      a.host = ba.host.narrow(1, 0, c.HV);
      a.device = ba.device.narrow(1, 0, c.HV);
      b.host = ba.host.narrow(1, c.HV, c.HV);
      b.device = ba.device.narrow(1, c.HV, c.HV);
    } else {
      a = testing::twin_random({c.T, c.HV}, c.dtype, rng, 0.0f, 3.0f, 2, 1);
      b = testing::twin_random({c.T, c.HV}, c.dtype, rng, 0.0f, 3.0f);
    }
    TwinView A_log = testing::twin_random({c.HV}, kF32, rng, -1.5f, 1.0f);
    TwinView dt_bias = testing::twin_random({c.HV}, kF32, rng, 0.0f, 0.5f);
    TwinView g = testing::twin_poisoned({c.T, c.HV}, kF32, 3, 1);
    TwinView beta = testing::twin_poisoned({c.T, c.HV}, kF32, 1, 0);
    ASSERT_OK(gdn_gate({.a = a.host,
                        .b = b.host,
                        .A_log = A_log.host,
                        .dt_bias = dt_bias.host,
                        .g = g.host,
                        .beta = beta.host}));
    ASSERT_OK(gdn_gate({.a = a.device,
                        .b = b.device,
                        .A_log = A_log.device,
                        .dt_bias = dt_bias.device,
                        .g = g.device,
                        .beta = beta.device}));
    testing::expect_twin_close(g, kDecay);
    testing::expect_twin_close(beta, kBeta);
  }
}

struct KdaCase {
  int64_t T, H, d_k;
  DType f_dtype, b_dtype;
  bool with_beta;
  std::optional<float> lower_bound;
  int64_t pad = 0, offset = 0;  // f, g and b rows

  std::string name() const {
    return str_cat("T", T, "_H", H, "_dk", d_k, "_f", dtype_name(f_dtype),
                   with_beta ? str_cat("_b", dtype_name(b_dtype)) : std::string("_nobeta"),
                   lower_bound ? str_cat("_safe", *lower_bound) : std::string("_softplus"),
                   pad ? str_cat("_pad", pad) : "", offset ? str_cat("_at", offset) : "");
  }
};

TEST(GatesCudaTest, KdaGateMatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const KdaCase cases[] = {
      {0, 2, 8, kF32, kF32, true, std::nullopt},     {1, 1, 1, kF32, kF32, false, std::nullopt},
      {5, 3, 33, kBF16, kF32, true, std::nullopt},   {7, 4, 128, kF32, kBF16, true, -5.0f, 3, 1},
      {3, 2, 129, kBF16, kBF16, false, -5.0f, 2, 0}, {9, 5, 64, kF32, kF32, true, 0.0f, 1, 1},
      {2, 1, 2048, kF32, kF32, true, -1.0f},
  };
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  for (const KdaCase& c : cases) {
    SCOPED_TRACE(c.name());
    const std::vector<int64_t> shape = {c.T, c.H, c.d_k};
    TwinView f = testing::twin_random(shape, c.f_dtype, rng, 0.0f, 1.5f, c.pad, c.offset);
    TwinView A_log = testing::twin_random({c.H}, kF32, rng, -0.5f, 0.5f);
    TwinView dt_bias = testing::twin_random({c.H, c.d_k}, kF32, rng, 0.0f, 0.5f, c.pad, 0);
    TwinView g = testing::twin_poisoned(shape, kF32, c.pad, c.offset);
    TwinView b, beta;
    if (c.with_beta) {
      b = testing::twin_random({c.T, c.H}, c.b_dtype, rng, 0.0f, 3.0f, c.pad, c.offset);
      beta = testing::twin_poisoned({c.T, c.H}, kF32, c.pad, 0);
    }
    KdaGateParams host{.f = f.host,
                       .A_log = A_log.host,
                       .dt_bias = dt_bias.host,
                       .lower_bound = c.lower_bound,
                       .g = g.host,
                       .b = b.host,
                       .beta = beta.host};
    KdaGateParams device = host;
    device.f = f.device;
    device.A_log = A_log.device;
    device.dt_bias = dt_bias.device;
    device.g = g.device;
    device.b = b.device;
    device.beta = beta.device;
    ASSERT_OK(kda_gate(host));
    ASSERT_OK(kda_gate(device));
    testing::expect_twin_close(g, kDecay);
    if (c.with_beta) testing::expect_twin_close(beta, kBeta);
  }
}

}  // namespace
}  // namespace hyla::kernels
