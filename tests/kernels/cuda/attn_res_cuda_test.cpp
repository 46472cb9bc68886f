// CUDA body of the Attention-Residual mixture (kernels/attn_res.h) against the CPU body, which is
// the specification: n in {0, 1, 3, 8} block snapshots (the first n rows of a wider bank), d in
// {1, 33, 129, 2048}, f32 / bf16 / strided cw, row-strided and misaligned partial and y, with and
// without probs; n = 0 must give y = partial exactly. Fresh random inputs per run (seed in the
// trace; HYLA_TEST_SEED=<n> replays it). Skipped when no CUDA device is visible.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cuda_testing.h"
#include "kernels/attn_res.h"

namespace hyla::kernels {
namespace {

using testing::Tolerance;
using testing::TwinView;

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;

// The scores' two sums (row . cw, row . row) run in different fp32 orders (sequential vs a
// 256-thread tree); the softmax and the mixture are evaluated in the same order with the same
// roundings, from those scores. A CPU simulation of both orders at these scales (rows N(0, <= 2.5),
// cw N(0, 2 / sqrt(d)), scores O(2)) measured, at d = 2048, <= 1.2e-5 between scores, <= 2.8e-6
// between probabilities and <= 1.8e-5 between outputs; the tolerances leave ~7x.
constexpr Tolerance kProbs{
    .atol = 2e-5, .rtol = 0, .why = "scores from fp32 sums over d <= 2048 in two orders"};
constexpr Tolerance kMixture{
    .atol = 1.2e-4, .rtol = 0, .why = "probabilities 2.8e-6 apart times rows <= ~10"};
constexpr Tolerance kExact{.atol = 0, .rtol = 0, .why = "n = 0: y = 1 * partial"};

struct Case {
  int64_t T, n, d;
  DType cw_dtype;
  bool strided = false;  // partial, y, probs row-strided and misaligned; cw every other element
  bool probs = true;

  std::string name() const {
    return str_cat("T", T, "_n", n, "_d", d, "_cw", dtype_name(cw_dtype), strided ? "_strided" : "",
                   probs ? "" : "_noprobs");
  }
};

const Case kCases[] = {
    {0, 2, 8, kF32},
    {1, 0, 1, kF32},
    {3, 0, 129, kBF16, true},
    {1, 1, 33, kF32},
    {5, 3, 129, kBF16, true},
    {4, 8, 2048, kF32},
    {7, 3, 2048, kBF16, true, false},
    {33, 1, 64, kF32, false, false},
};

TEST(AttnResCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name());
    const int64_t pad = c.strided ? 3 : 0, offset = c.strided ? 1 : 0;
    // the bank holds n + 2 snapshots (the mixture reads its first n), values scaled by 0.5-2.5
    const std::vector<int64_t> bank_shape = {c.T, c.n + 2, c.d};
    Tensor bank_values = testing::random_normal({testing::padded_numel(bank_shape, pad, offset)},
                                                kF32, rng, 0.0f, 1.0f);
    std::uniform_real_distribution<float> scale(0.5f, 2.5f);
    for (int64_t i = 0; i < bank_values.numel(); ++i) bank_values.data<float>()[i] *= scale(rng);
    const TwinView bank = testing::twin(bank_values, bank_shape, pad, offset);
    TwinView partial = testing::twin_random({c.T, c.d}, kF32, rng, 0.0f, 1.5f, pad, offset);
    // cw: every other element of a [2d] buffer when strided
    TwinView cw_storage = testing::twin_random({c.strided ? 2 * c.d : c.d}, c.cw_dtype, rng, 0.0f,
                                               2.0f / std::sqrt(float(c.d)));
    const int64_t cw_shape[] = {c.d}, cw_stride[] = {c.strided ? 2 : 1};
    const TensorView cw_host(cw_storage.host.raw(), c.cw_dtype, 1, cw_shape, cw_stride);
    const TensorView cw_device(cw_storage.device.raw(), c.cw_dtype, 1, cw_shape, cw_stride,
                               cw_storage.device.device());
    TwinView y = testing::twin_poisoned({c.T, c.d}, kF32, pad, offset);
    TwinView probs;
    if (c.probs) probs = testing::twin_poisoned({c.T, c.n + 1}, kF32, pad, offset);
    TensorView blocks_host, blocks_device;
    if (c.n > 0) {
      blocks_host = bank.host.narrow(1, 0, c.n);
      blocks_device = bank.device.narrow(1, 0, c.n);
    }
    ASSERT_OK(attn_res({.blocks = blocks_host,
                        .partial = partial.host,
                        .cw = cw_host,
                        .eps = 1e-5f,
                        .y = y.host,
                        .probs = probs.host}));
    ASSERT_OK(attn_res({.blocks = blocks_device,
                        .partial = partial.device,
                        .cw = cw_device,
                        .eps = 1e-5f,
                        .y = y.device,
                        .probs = probs.device}));
    testing::expect_twin_close(y, c.n == 0 ? kExact : kMixture);
    if (c.probs) testing::expect_twin_close(probs, c.n == 0 ? kExact : kProbs);
    if (c.n == 0 && c.T > 0) {
      const testing::HostResult got = testing::device_result(y);
      EXPECT_TRUE(testing::bitwise_equal(got.view, partial.host));
    }
  }
}

}  // namespace
}  // namespace hyla::kernels
