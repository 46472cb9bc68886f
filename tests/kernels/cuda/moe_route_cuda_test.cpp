// moe_route's CUDA body against its CPU body: softmax and sigmoid scoring, correction bias,
// group limits, renormalisation and scaling, strided views. Logits are multiples of 1/4 drawn
// from a narrow range, so many experts (and groups) tie exactly: the ids must agree exactly,
// tie-breaking included; distinct values are far apart next to the ulp-level differences of
// expf and of the softmax sum order, which only the weights' tolerance covers.
// Fresh random inputs every run: case k draws from base + k (the trace names both;
// HYLA_TEST_SEED=<base> replays a run).
#include <cmath>
#include <random>
#include <string>

#include "cuda_testing.h"
#include "kernels/moe_route.h"

namespace hyla::kernels {
namespace {

using testing::padded_numel;
using testing::TwinView;

struct RouteCase {
  int64_t T, E;
  MoeScoring scoring;
  int64_t top_k;
  bool renormalize;
  float routed_scaling;
  int64_t num_groups, topk_groups;
  bool bias, strided;
  std::string name() const {
    return str_cat("T", T, "_E", E, scoring == MoeScoring::kSoftmax ? "_softmax" : "_sigmoid",
                   "_top", top_k, renormalize ? "_renorm" : "", "_groups", topk_groups, "of",
                   num_groups, bias ? "_bias" : "", strided ? "_strided" : "");
  }
};

constexpr MoeScoring kSoftmax = MoeScoring::kSoftmax, kSigmoid = MoeScoring::kSigmoid;
const RouteCase kCases[] = {
    {1, 1, kSoftmax, 1, false, 1.0f, 1, 1, false, false},
    {5, 4, kSoftmax, 2, true, 1.0f, 1, 1, false, false},
    {37, 8, kSoftmax, 2, false, 1.0f, 1, 1, false, true},
    {33, 64, kSoftmax, 8, true, 1.0f, 1, 1, false, true},
    {129, 512, kSoftmax, 10, true, 1.0f, 1, 1, false, false},  // Qwen3-Next width
    {9, 17, kSigmoid, 3, false, 1.0f, 1, 1, false, false},
    {6, 4, kSigmoid, 2, true, 2.446f, 1, 1, true, false},  // tiny Kimi-Linear
    {70, 64, kSigmoid, 6, true, 2.5f, 8, 3, true, true},   // DeepSeek-V3 style
    {20, 32, kSigmoid, 4, false, 1.5f, 4, 1, true, false},
    {11, 24, kSoftmax, 5, true, 1.0f, 6, 3, true, false},
    {4, 16, kSigmoid, 8, true, 1.0f, 4, 2, false, false},
    {65, 256, kSigmoid, 8, true, 2.827f, 8, 4, true, false},  // Kimi-Linear width, grouped
    {3, 96, kSigmoid, 7, true, 1.0f, 2, 1, true, true},       // a group of 48 > 32 lanes
};

/// Multiples of 1/4 in [-2, 2] (softmax) or [0, 2] (sigmoid, so no two logits x, -x whose
/// sigmoids sum to 1 make distinct groups tie up to rounding): many exact ties, and distinct
/// scores, choices and group scores far apart next to a few ulp.
Tensor tied_logits(int64_t n, bool sigmoid, std::mt19937& rng) {
  std::vector<double> values(static_cast<size_t>(n));
  std::uniform_int_distribution<int> level(sigmoid ? 0 : -8, 8);
  for (double& v : values) v = level(rng) / 4.0;
  return testing::tensor_from(values, {n}, DType::kF32);
}

TEST(MoeRouteCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t base = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(base));
  uint32_t seed = base;
  for (const RouteCase& c : kCases) {
    ++seed;
    SCOPED_TRACE(c.name() + str_cat("_seed", seed));
    std::mt19937 rng(seed);
    const int64_t in_pad = c.strided ? 3 : 0, in_offset = c.strided ? 1 : 0;
    const int64_t out_pad = c.strided ? 2 : 0, out_offset = c.strided ? 1 : 0;
    const TwinView logits = testing::twin(
        tied_logits(padded_numel({c.T, c.E}, in_pad, in_offset), c.scoring == kSigmoid, rng),
        {c.T, c.E}, in_pad, in_offset);
    TwinView bias;
    if (c.bias) {
      std::vector<double> b(static_cast<size_t>(c.E));
      for (double& v : b) v = int(rng() % 5) / 4.0;
      bias = testing::twin(testing::tensor_from(b, {c.E}, DType::kF32), {c.E});
    }
    const TwinView ids = testing::twin_poisoned({c.T, c.top_k}, DType::kI32, out_pad, out_offset);
    const TwinView weights =
        testing::twin_poisoned({c.T, c.top_k}, DType::kF32, out_pad, out_offset);
    auto params = [&](bool gpu) {
      auto pick = [gpu](const TwinView& t) { return gpu ? t.device : t.host; };
      return MoeRouteParams{.logits = pick(logits),
                            .correction_bias = pick(bias),
                            .scoring = c.scoring,
                            .top_k = c.top_k,
                            .renormalize = c.renormalize,
                            .routed_scaling = c.routed_scaling,
                            .num_groups = c.num_groups,
                            .topk_groups = c.topk_groups,
                            .topk_ids = pick(ids),
                            .topk_weights = pick(weights)};
    };
    ASSERT_OK(moe_route(params(false)));
    ASSERT_OK(moe_route(params(true)));
    // whole storages: ids and the poisoned padding around them
    EXPECT_TRUE(testing::bitwise_equal(testing::on_host(ids.device_storage), ids.host_storage));
    const testing::HostResult weights_back = testing::device_result(weights);
    EXPECT_CLOSE(weights_back.view, weights.host,
                 {.atol = 1e-7,
                  .rtol = 4e-6,
                  .why = "expf on the device vs the host (<= 2 ulp) and the softmax sum in "
                         "another order, then a renormalising sum and division"});
    EXPECT_TRUE(testing::untouched_outside(weights_back.storage, weights_back.view));
  }
}

}  // namespace
}  // namespace hyla::kernels
