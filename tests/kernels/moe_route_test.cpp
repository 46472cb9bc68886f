// MoE top-k routing against a float64 reference: softmax (Qwen) and sigmoid (Kimi / DeepSeek-V3)
// scoring, with and without renormalisation and routed scaling, correction bias, group-limited
// selection, strided views; hand-built cases where the group limit and the bias change the
// choice (and the bias leaves the weights alone); ties; argument errors.
#include "kernels/moe_route.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "strided_views.h"
#include "testing.h"

namespace hyla::kernels {
namespace {

using testing::padded_numel;
using testing::padded_view;
using testing::Tolerance;

struct RouteConfig {
  MoeScoring scoring = MoeScoring::kSoftmax;
  int64_t top_k = 1;
  bool renormalize = false;
  float routed_scaling = 1.0f;
  int64_t num_groups = 1, topk_groups = 1;
};

struct Routing {
  std::vector<int32_t> ids;     // [T, top_k]
  std::vector<double> weights;  // [T, top_k]
};

/// Indices of `value` restricted to `eligible`, sorted by value descending, lower index first on
/// ties.
std::vector<int64_t> ranked(const std::vector<double>& value, const std::vector<bool>& eligible) {
  std::vector<int64_t> order;
  for (size_t i = 0; i < value.size(); ++i)
    if (eligible[i]) order.push_back(int64_t(i));
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return value[size_t(a)] > value[size_t(b)]; });
  return order;
}

/// The routing of [T, E] logits in float64 (bias may be empty).
Routing moe_route_reference(const std::vector<double>& logits, int64_t T, int64_t E,
                            const std::vector<double>& bias, const RouteConfig& c) {
  Routing r;
  const int64_t group_size = E / c.num_groups;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> score(logits.begin() + t * E, logits.begin() + (t + 1) * E);
    if (c.scoring == MoeScoring::kSoftmax) {
      const double max_logit = *std::max_element(score.begin(), score.end());
      double sum = 0;
      for (double& s : score) sum += (s = std::exp(s - max_logit));
      for (double& s : score) s /= sum;
    } else {
      for (double& s : score) s = 1.0 / (1.0 + std::exp(-s));
    }
    std::vector<double> choice = score;
    if (!bias.empty())
      for (int64_t e = 0; e < E; ++e) choice[size_t(e)] += bias[size_t(e)];
    // group score: the two largest choices of each group, summed; keep the best topk_groups
    std::vector<bool> eligible(size_t(E), true);
    if (c.topk_groups < c.num_groups) {
      std::vector<double> group_score(size_t(c.num_groups));
      for (int64_t g = 0; g < c.num_groups; ++g) {
        std::vector<double> members(choice.begin() + g * group_size,
                                    choice.begin() + (g + 1) * group_size);
        std::sort(members.rbegin(), members.rend());
        group_score[size_t(g)] = members[0] + members[1];
      }
      const std::vector<int64_t> groups =
          ranked(group_score, std::vector<bool>(size_t(c.num_groups), true));
      std::fill(eligible.begin(), eligible.end(), false);
      for (int64_t k = 0; k < c.topk_groups; ++k)
        for (int64_t i = 0; i < group_size; ++i)
          eligible[size_t(groups[size_t(k)] * group_size + i)] = true;
    }
    const std::vector<int64_t> experts = ranked(choice, eligible);
    double sum = 0;
    for (int64_t k = 0; k < c.top_k; ++k) sum += score[size_t(experts[size_t(k)])];
    const double denominator =
        !c.renormalize ? 1.0 : (c.scoring == MoeScoring::kSigmoid ? sum + 1e-20 : sum);
    for (int64_t k = 0; k < c.top_k; ++k) {
      r.ids.push_back(int32_t(experts[size_t(k)]));
      r.weights.push_back(score[size_t(experts[size_t(k)])] / denominator *
                          double(c.routed_scaling));
    }
  }
  return r;
}

std::vector<int32_t> ids_of(const TensorView& ids) {
  std::vector<int32_t> out;
  for (double v : testing::to_f64(ids)) out.push_back(int32_t(v));
  return out;
}

constexpr Tolerance kWeightTolerance = {
    .atol = 1e-7,
    .rtol = 2e-6,
    .why =
        "fp32 softmax over <= 64 experts (expf and a sum, ~1e-6 relative) or sigmoid, then "
        "one division and one product"};

struct RouteCase {
  int64_t T, E;
  RouteConfig config;
  bool bias = false;
  bool strided = false;  // logits rows padded and misaligned, outputs padded

  std::string name() const {
    const RouteConfig& c = config;
    return str_cat("T", T, "_E", E, c.scoring == MoeScoring::kSoftmax ? "_softmax" : "_sigmoid",
                   "_top", c.top_k, c.renormalize ? "_renorm" : "",
                   c.routed_scaling != 1.0f ? str_cat("_scale", c.routed_scaling) : "",
                   c.num_groups > 1 ? str_cat("_groups", c.topk_groups, "of", c.num_groups) : "",
                   bias ? "_bias" : "", strided ? "_strided" : "");
  }
};

constexpr MoeScoring kSoftmax = MoeScoring::kSoftmax, kSigmoid = MoeScoring::kSigmoid;
const RouteCase kCases[] = {
    {0, 8, {kSoftmax, 2, true}},
    {1, 1, {kSoftmax, 1, false}},
    {5, 4, {kSoftmax, 2, true}},  // tiny Qwen3-Next: 4 experts, top-2, norm_topk_prob
    {7, 8, {kSoftmax, 2, false}, false, true},
    {33, 64, {kSoftmax, 8, true}, false, true},
    {9, 17, {kSigmoid, 3, false}},
    {6, 4, {kSigmoid, 2, true, 2.446f}, true},              // tiny Kimi-Linear
    {33, 64, {kSigmoid, 6, true, 2.5f, 8, 3}, true, true},  // DeepSeek-V3 style, scaled down
    {20, 32, {kSigmoid, 4, false, 1.5f, 4, 1}, true},
    {11, 24, {kSoftmax, 5, true, 1.0f, 6, 3}, true},
    {4, 16, {kSigmoid, 8, true, 1.0f, 4, 2}},  // top_k = every expert of the kept groups
};

TEST(MoeRouteTest, MatchesFloat64Reference) {
  int seed = 0;
  for (const RouteCase& c : kCases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    const int64_t top_k = c.config.top_k;
    const int64_t logits_pad = c.strided ? 3 : 0, logits_offset = c.strided ? 1 : 0;
    const int64_t out_pad = c.strided ? 2 : 0, out_offset = c.strided ? 1 : 0;
    Tensor logits_storage = testing::random_normal(
        {padded_numel({c.T, c.E}, logits_pad, logits_offset)}, DType::kF32, rng, 0.0f, 2.0f);
    const TensorView logits = padded_view(logits_storage, {c.T, c.E}, logits_pad, logits_offset);
    Tensor bias;
    if (c.bias) bias = testing::random_normal({c.E}, DType::kF32, rng, 0.0f, 0.3f);
    Tensor ids_storage =
        testing::poisoned({padded_numel({c.T, top_k}, out_pad, out_offset)}, DType::kI32);
    Tensor weights_storage =
        testing::poisoned({padded_numel({c.T, top_k}, out_pad, out_offset)}, DType::kF32);
    const TensorView ids = padded_view(ids_storage, {c.T, top_k}, out_pad, out_offset);
    const TensorView weights = padded_view(weights_storage, {c.T, top_k}, out_pad, out_offset);

    const Routing want =
        moe_route_reference(testing::to_f64(logits), c.T, c.E,
                            c.bias ? testing::to_f64(bias) : std::vector<double>{}, c.config);
    ASSERT_OK(moe_route({.logits = logits,
                         .correction_bias = bias,
                         .scoring = c.config.scoring,
                         .top_k = top_k,
                         .renormalize = c.config.renormalize,
                         .routed_scaling = c.config.routed_scaling,
                         .num_groups = c.config.num_groups,
                         .topk_groups = c.config.topk_groups,
                         .topk_ids = ids,
                         .topk_weights = weights}));
    EXPECT_EQ(ids_of(ids), want.ids);
    EXPECT_CLOSE(weights, want.weights, kWeightTolerance);
    EXPECT_TRUE(testing::untouched_outside(ids_storage, ids));
    EXPECT_TRUE(testing::untouched_outside(weights_storage, weights));
  }
}

/// Logit whose sigmoid is `s`.
double logit_of(double s) { return std::log(s / (1.0 - s)); }

/// Runs moe_route on one token; returns its ids and weights.
Routing route_one(const std::vector<double>& logits, const std::vector<double>& bias,
                  const RouteConfig& c) {
  const int64_t E = int64_t(logits.size());
  Tensor logits_tensor = testing::tensor_from(logits, {1, E}, DType::kF32);
  Tensor bias_tensor;
  if (!bias.empty()) bias_tensor = testing::tensor_from(bias, {E}, DType::kF32);
  Tensor ids = testing::poisoned({1, c.top_k}, DType::kI32);
  Tensor weights = testing::poisoned({1, c.top_k}, DType::kF32);
  const Status status = moe_route({.logits = logits_tensor,
                                   .correction_bias = bias_tensor,
                                   .scoring = c.scoring,
                                   .top_k = c.top_k,
                                   .renormalize = c.renormalize,
                                   .routed_scaling = c.routed_scaling,
                                   .num_groups = c.num_groups,
                                   .topk_groups = c.topk_groups,
                                   .topk_ids = ids,
                                   .topk_weights = weights});
  EXPECT_TRUE(status.ok()) << status.message();
  return {ids_of(ids), testing::to_f64(weights)};
}

TEST(MoeRouteTest, GroupLimitChangesTheChoice) {
  // 8 experts in 4 groups of 2, sigmoid scores:
  //   group 0: 0.95, 0.01 (sum 0.96)   group 1: 0.60, 0.55 (1.15)
  //   group 2: 0.50, 0.50 (1.00)       group 3: 0.10, 0.10 (0.20)
  // keeping 2 groups keeps groups 1 and 2, so the best expert (0) is out: top-2 = {2, 3}.
  // Without the group limit the top-2 is {0, 2}.
  const std::vector<double> scores = {0.95, 0.01, 0.60, 0.55, 0.50, 0.50, 0.10, 0.10};
  std::vector<double> logits;
  for (double s : scores) logits.push_back(logit_of(s));
  const Tolerance tol = {.atol = 0, .rtol = 1e-6, .why = "sigmoid of an fp32 logit: a few ulp"};

  const Routing grouped = route_one(logits, {}, {kSigmoid, 2, false, 1.0f, 4, 2});
  EXPECT_EQ(grouped.ids, (std::vector<int32_t>{2, 3}));
  EXPECT_TRUE(testing::all_close(testing::tensor_from(grouped.weights, {2}, DType::kF64),
                                 std::vector<double>{0.60, 0.55}, tol));

  const Routing flat = route_one(logits, {}, {kSigmoid, 2, false, 1.0f, 1, 1});
  EXPECT_EQ(flat.ids, (std::vector<int32_t>{0, 2}));
  // all groups kept: the same as no grouping
  EXPECT_EQ(route_one(logits, {}, {kSigmoid, 2, false, 1.0f, 4, 4}).ids, flat.ids);
  // 3 groups kept: group 0 (0.96) is back, and expert 0 with it
  EXPECT_EQ(route_one(logits, {}, {kSigmoid, 2, false, 1.0f, 4, 3}).ids, flat.ids);
}

TEST(MoeRouteTest, CorrectionBiasSteersTheChoiceNotTheWeights) {
  // scores 0.9, 0.8, 0.3, 0.2, 0.1, 0.05; a bias of +1 on expert 4 makes its choice 1.1, the best
  const std::vector<double> scores = {0.9, 0.8, 0.3, 0.2, 0.1, 0.05};
  std::vector<double> logits;
  for (double s : scores) logits.push_back(logit_of(s));
  const std::vector<double> bias = {0, 0, 0, 0, 1.0, 0};
  const Tolerance tol = {
      .atol = 0, .rtol = 2e-6, .why = "sigmoid of an fp32 logit, a sum and a division"};

  const Routing plain = route_one(logits, {}, {kSigmoid, 2, true, 2.5f});
  EXPECT_EQ(plain.ids, (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(testing::all_close(testing::tensor_from(plain.weights, {2}, DType::kF64),
                                 std::vector<double>{2.5 * 0.9 / 1.7, 2.5 * 0.8 / 1.7}, tol));

  // the bias picks expert 4 first (choice 1.1); its weight is its raw score 0.1, renormalised
  const Routing biased = route_one(logits, bias, {kSigmoid, 2, true, 2.5f});
  EXPECT_EQ(biased.ids, (std::vector<int32_t>{4, 0}));
  EXPECT_TRUE(testing::all_close(testing::tensor_from(biased.weights, {2}, DType::kF64),
                                 std::vector<double>{2.5 * 0.1 / 1.0, 2.5 * 0.9 / 1.0}, tol));

  // without renormalisation the weights are the raw scores times the scaling
  const Routing raw = route_one(logits, bias, {kSigmoid, 2, false, 2.5f});
  EXPECT_EQ(raw.ids, (std::vector<int32_t>{4, 0}));
  EXPECT_TRUE(testing::all_close(testing::tensor_from(raw.weights, {2}, DType::kF64),
                                 std::vector<double>{2.5 * 0.1, 2.5 * 0.9}, tol));

  // softmax scoring: the bias steers the choice the same way; weights are the probabilities
  const Routing softmax = route_one(logits, bias, {kSoftmax, 2, false});
  EXPECT_EQ(softmax.ids, (std::vector<int32_t>{4, 0}));
  double sum = 0;
  for (double l : logits) sum += std::exp(l);
  EXPECT_TRUE(testing::all_close(
      testing::tensor_from(softmax.weights, {2}, DType::kF64),
      std::vector<double>{std::exp(logits[4]) / sum, std::exp(logits[0]) / sum}, tol));
}

TEST(MoeRouteTest, TiesPickTheLowerIndexFirst) {
  // experts 1, 3 and 5 tie for best, 0 and 2 for next; groups {0, 1, 2}, {3, 4, 5} tie too
  const std::vector<double> logits = {0.5, 2.0, 0.5, 2.0, -1.0, 2.0};
  EXPECT_EQ(route_one(logits, {}, {kSoftmax, 4, false}).ids, (std::vector<int32_t>{1, 3, 5, 0}));
  EXPECT_EQ(route_one(logits, {}, {kSigmoid, 3, true}).ids, (std::vector<int32_t>{1, 3, 5}));
  // group scores: {2.0 + 0.5} vs {2.0 + 2.0} in logit order -> the second group wins on its own
  EXPECT_EQ(route_one(logits, {}, {kSigmoid, 2, false, 1.0f, 2, 1}).ids,
            (std::vector<int32_t>{3, 5}));
  // all equal: 0, 1, 2 in order, and equal groups keep the lower group
  const std::vector<double> flat(6, 0.25);
  EXPECT_EQ(route_one(flat, {}, {kSoftmax, 3, true}).ids, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(route_one(flat, {}, {kSigmoid, 2, true, 1.0f, 3, 1}).ids, (std::vector<int32_t>{0, 1}));
}

TEST(MoeRouteTest, RenormalisedWeightsSumToTheScaling) {
  std::mt19937 rng(3);
  const int64_t T = 16, E = 32, top_k = 4;
  Tensor logits = testing::random_normal({T, E}, DType::kF32, rng, 0.0f, 2.0f);
  for (const MoeScoring scoring : {kSoftmax, kSigmoid}) {
    SCOPED_TRACE(scoring == kSoftmax ? "softmax" : "sigmoid");
    Tensor ids = testing::poisoned({T, top_k}, DType::kI32);
    Tensor weights = testing::poisoned({T, top_k}, DType::kF32);
    ASSERT_OK(moe_route({.logits = logits,
                         .scoring = scoring,
                         .top_k = top_k,
                         .renormalize = true,
                         .routed_scaling = 2.0f,
                         .topk_ids = ids,
                         .topk_weights = weights}));
    for (int64_t t = 0; t < T; ++t) {
      const float* w = weights.data<float>() + t * top_k;
      EXPECT_NEAR(double(w[0]) + w[1] + w[2] + w[3], 2.0, 2e-6) << "t = " << t;
      for (int64_t k = 1; k < top_k; ++k) EXPECT_GE(w[k - 1], w[k]) << "t = " << t;
    }
  }
}

TEST(MoeRouteTest, RejectsBadArguments) {
  std::mt19937 rng(5);
  const int64_t T = 3, E = 8, top_k = 2;
  Tensor logits = testing::random_normal({T, E}, DType::kF32, rng);
  Tensor logits_bf16 = testing::random_normal({T, E}, DType::kBF16, rng);
  Tensor bias = testing::random_normal({E}, DType::kF32, rng);
  Tensor bias_short = testing::random_normal({E - 1}, DType::kF32, rng);
  Tensor ids = testing::poisoned({T, top_k}, DType::kI32);
  Tensor ids_f32 = testing::poisoned({T, top_k}, DType::kF32);
  Tensor ids_wide = testing::poisoned({T, top_k + 1}, DType::kI32);
  Tensor weights = testing::poisoned({T, top_k}, DType::kF32);
  Tensor ids_9 = testing::poisoned({T, 9}, DType::kI32);
  Tensor weights_9 = testing::poisoned({T, 9}, DType::kF32);
  Tensor ids_5 = testing::poisoned({T, 5}, DType::kI32);
  Tensor weights_5 = testing::poisoned({T, 5}, DType::kF32);
  const TensorView weights_on_cuda(weights.view().raw(), DType::kF32, {T, top_k}, Device::cuda(0));
  const MoeRouteParams good = {.logits = logits,
                               .correction_bias = bias,
                               .scoring = kSigmoid,
                               .top_k = top_k,
                               .renormalize = true,
                               .routed_scaling = 2.5f,
                               .num_groups = 4,
                               .topk_groups = 2,
                               .topk_ids = ids,
                               .topk_weights = weights};

  struct ErrorCase {
    const char* name;
    std::function<void(MoeRouteParams&)> change;
    const char* error;
  };
  const ErrorCase cases[] = {
      {"bias_shape", [&](MoeRouteParams& p) { p.correction_bias = bias_short; },
       "moe_route: correction_bias has shape [7], expected [8] (E)"},
      {"top_k_zero", [&](MoeRouteParams& p) { p.top_k = 0; },
       "moe_route: top_k is 0, expected a value in [1, E = 8]"},
      {"top_k_above_E",
       [&](MoeRouteParams& p) {
         p.top_k = 9;
         p.topk_ids = ids_9;
         p.topk_weights = weights_9;
       },
       "moe_route: top_k is 9, expected a value in [1, E = 8]"},
      {"ids_shape", [&](MoeRouteParams& p) { p.topk_ids = ids_wide; },
       "moe_route: topk_ids has shape [3, 3], expected [3, 2] (T, top_k)"},
      {"ids_dtype", [&](MoeRouteParams& p) { p.topk_ids = ids_f32; },
       "moe_route: topk_ids has dtype f32, expected i32"},
      {"logits_dtype", [&](MoeRouteParams& p) { p.logits = logits_bf16; },
       "moe_route: logits has dtype bf16, expected f32"},
      {"weights_device", [&](MoeRouteParams& p) { p.topk_weights = weights_on_cuda; },
       "moe_route: topk_weights is on cuda:0, expected cpu"},
      {"scoring", [&](MoeRouteParams& p) { p.scoring = static_cast<MoeScoring>(5); },
       "moe_route: scoring is 5, expected kSoftmax or kSigmoid"},
      {"scaling_zero", [&](MoeRouteParams& p) { p.routed_scaling = 0.0f; },
       "moe_route: routed_scaling is 0, expected a finite value > 0"},
      {"groups_not_divisor", [&](MoeRouteParams& p) { p.num_groups = 3; },
       "moe_route: num_groups is 3, expected a divisor of E = 8"},
      {"groups_of_one",
       [&](MoeRouteParams& p) {
         p.num_groups = 8;
         p.topk_groups = 4;
       },
       "moe_route: num_groups = 8 leaves 1 expert per group, expected >= 2"},
      {"topk_groups_zero", [&](MoeRouteParams& p) { p.topk_groups = 0; },
       "moe_route: topk_groups is 0, expected a value in [1, num_groups = 4]"},
      {"topk_groups_above", [&](MoeRouteParams& p) { p.topk_groups = 5; },
       "moe_route: topk_groups is 5, expected a value in [1, num_groups = 4]"},
      {"top_k_above_kept",
       [&](MoeRouteParams& p) {
         p.top_k = 5;
         p.topk_ids = ids_5;
         p.topk_weights = weights_5;
       },
       "moe_route: top_k = 5 exceeds the 4 experts in the kept groups (topk_groups = 2 groups "
       "of 2 experts)"},
      {"missing_ids", [&](MoeRouteParams& p) { p.topk_ids = {}; },
       "moe_route: topk_ids is missing"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    MoeRouteParams p = good;
    c.change(p);
    EXPECT_ERROR_CONTAINS(moe_route(p), c.error);
  }
  EXPECT_OK(moe_route(good));
}

}  // namespace
}  // namespace hyla::kernels
