// moe_route's CUDA body against its CPU body: softmax and sigmoid scoring, correction bias,
// group limits, renormalisation and scaling, strided views. Logits are multiples of 1/4 drawn
// from a narrow range, so many experts (and groups) tie exactly: the ids must agree exactly,
// tie-breaking included; distinct values are far apart next to the ulp-level differences of
// expf and of the softmax sum order, which only the weights' tolerance covers.
#include <cmath>
#include <random>
#include <string>

#include "../strided_views.h"
#include "cuda_testing.h"
#include "kernels/moe_route.h"

namespace hyla::kernels {
namespace {

using testing::padded_numel;
using testing::padded_view;

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
  int seed = 0;
  for (const RouteCase& c : kCases) {
    ++seed;
    SCOPED_TRACE(c.name() + str_cat("_seed", seed));
    std::mt19937 rng(seed);
    const int64_t in_pad = c.strided ? 3 : 0, in_offset = c.strided ? 1 : 0;
    const int64_t out_pad = c.strided ? 2 : 0, out_offset = c.strided ? 1 : 0;
    const Tensor logits_host =
        tied_logits(padded_numel({c.T, c.E}, in_pad, in_offset), c.scoring == kSigmoid, rng);
    Tensor bias_host;
    if (c.bias) {
      std::vector<double> b(static_cast<size_t>(c.E));
      for (double& v : b) v = int(rng() % 5) / 4.0;
      bias_host = testing::tensor_from(b, {c.E}, DType::kF32);
    }
    const Tensor logits_gpu = testing::on_gpu(logits_host);
    const Tensor bias_gpu = c.bias ? testing::on_gpu(bias_host) : Tensor{};
    const int64_t out_numel = padded_numel({c.T, c.top_k}, out_pad, out_offset);
    Tensor ids_host = testing::poisoned({out_numel}, DType::kI32);
    Tensor weights_host = testing::poisoned({out_numel}, DType::kF32);
    Tensor ids_gpu = testing::poisoned_gpu({out_numel}, DType::kI32);
    Tensor weights_gpu = testing::poisoned_gpu({out_numel}, DType::kF32);
    auto params = [&](const Tensor& logits, const Tensor& bias, const Tensor& ids,
                      const Tensor& weights) {
      return MoeRouteParams{
          .logits = padded_view(logits, {c.T, c.E}, in_pad, in_offset),
          .correction_bias = bias,
          .scoring = c.scoring,
          .top_k = c.top_k,
          .renormalize = c.renormalize,
          .routed_scaling = c.routed_scaling,
          .num_groups = c.num_groups,
          .topk_groups = c.topk_groups,
          .topk_ids = padded_view(ids, {c.T, c.top_k}, out_pad, out_offset),
          .topk_weights = padded_view(weights, {c.T, c.top_k}, out_pad, out_offset)};
    };
    ASSERT_OK(moe_route(params(logits_host, bias_host, ids_host, weights_host)));
    ASSERT_OK(moe_route(params(logits_gpu, bias_gpu, ids_gpu, weights_gpu)));
    const Tensor ids_back = testing::on_host(ids_gpu), weights_back = testing::on_host(weights_gpu);
    // whole storages: ids and the poisoned padding around them
    EXPECT_TRUE(testing::bitwise_equal(ids_back, ids_host));
    const TensorView weights_view = padded_view(weights_back, {c.T, c.top_k}, out_pad, out_offset);
    EXPECT_CLOSE(weights_view, padded_view(weights_host, {c.T, c.top_k}, out_pad, out_offset),
                 {.atol = 1e-7,
                  .rtol = 4e-6,
                  .why = "expf on the device vs the host (<= 2 ulp) and the softmax sum in "
                         "another order, then a renormalising sum and division"});
    EXPECT_TRUE(testing::untouched_outside(weights_back, weights_view));
  }
}

}  // namespace
}  // namespace hyla::kernels
