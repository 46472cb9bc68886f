// MoE combine against a float64 reference: routed term only, with a shared expert (plain and
// sigmoid-gated), shared only, accumulate; strided views; positions outside [0, N) skipped; the
// summation order (ascending position, not k) on a case where fp32 rounding tells them apart;
// argument errors.
#include "kernels/moe_combine.h"

#include <algorithm>
#include <cmath>
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

struct CombineCase {
  int64_t T, K, width;
  bool routed = true, shared = false, gate = false, accumulate = false, strided = false;
  std::string name() const {
    return str_cat("T", T, "_K", K, "_w", width, routed ? "_routed" : "", shared ? "_shared" : "",
                   gate ? "_gate" : "", accumulate ? "_accumulate" : "", strided ? "_strided" : "");
  }
};

const CombineCase kCases[] = {
    {0, 2, 8},
    {1, 1, 1},
    {7, 2, 33, true, false, false, false, true},
    {9, 4, 64, true, true, true},
    {5, 8, 130, true, true, false, true, true},
    {12, 3, 17, false, true, true, true},
    {6, 2, 40, true, false, false, true},
};

constexpr Tolerance kTolerance = {
    .atol = 1e-6,
    .rtol = 1e-6,
    .why = "fp32 sum of <= 9 products of O(1) values (a few ulp), and a sigmoid (expf)"};

TEST(MoeCombineTest, MatchesFloat64Reference) {
  int seed = 200;
  for (const CombineCase& c : kCases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    const int64_t N = c.T * c.K + 2;  // two spare rows no slot points at
    const int64_t pad = c.strided ? 3 : 0, offset = c.strided ? 1 : 0;
    auto strided = [&](Tensor& storage, std::vector<int64_t> shape, DType dtype) {
      storage = testing::random_uniform({padded_numel(shape, pad, offset)}, dtype, rng);
      return padded_view(storage, shape, pad, offset);
    };
    Tensor expert_storage, weight_storage, shared_storage, gate_storage, out_storage;
    const TensorView expert_out = strided(expert_storage, {N, c.width}, DType::kF32);
    const TensorView weights = strided(weight_storage, {c.T, c.K}, DType::kF32);
    const TensorView shared = strided(shared_storage, {c.T, c.width}, DType::kF32);
    const TensorView gate = strided(gate_storage, {c.T, 1}, DType::kF32);
    const TensorView out = strided(out_storage, {c.T, c.width}, DType::kF32);
    // positions: a random permutation of [0, N), one of them replaced by -1 (skipped)
    std::vector<int32_t> perm(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) perm[size_t(i)] = int32_t(i);
    std::shuffle(perm.begin(), perm.end(), rng);
    perm.resize(size_t(c.T * c.K));
    if (c.T * c.K > 2) perm[2] = -1;
    Tensor positions = testing::int32_tensor(perm);
    if (perm.empty()) positions = Tensor::empty({0}, DType::kI32);
    const TensorView slot_positions = positions.view().reshape({c.T, c.K});

    const std::vector<double> e = testing::to_f64(expert_out), w = testing::to_f64(weights),
                              sh = testing::to_f64(shared), g = testing::to_f64(gate),
                              before = testing::to_f64(out);
    std::vector<double> want(static_cast<size_t>(c.T * c.width));
    for (int64_t t = 0; t < c.T; ++t) {
      const double s = c.gate ? 1.0 / (1.0 + std::exp(-g[size_t(t)])) : 1.0;
      for (int64_t i = 0; i < c.width; ++i) {
        double acc = c.accumulate ? before[size_t(t * c.width + i)] : 0.0;
        for (int64_t k = 0; c.routed && k < c.K; ++k) {
          const int32_t p = perm[size_t(t * c.K + k)];
          if (p >= 0) acc += w[size_t(t * c.K + k)] * e[size_t(p * c.width + i)];
        }
        if (c.shared) acc += s * sh[size_t(t * c.width + i)];
        want[size_t(t * c.width + i)] = acc;
      }
    }
    MoeCombineParams p{.accumulate = c.accumulate, .out = out};
    if (c.routed) {
      p.expert_out = expert_out;
      p.slot_positions = slot_positions;
      p.topk_weights = weights;
    }
    if (c.shared) p.shared = shared;
    if (c.gate) p.shared_gate = gate;
    ASSERT_OK(moe_combine(p));
    EXPECT_CLOSE(out, want, kTolerance);
  }
}

TEST(MoeCombineTest, SumsInAscendingPositionOrder) {
  // One token, K = 3, weights 1: k order would add 1 + 1e8 - 1e8 = 0 in fp32 (1 is lost next to
  // 1e8); position order adds 1e8 - 1e8 + 1 = 1.
  Tensor expert_out = testing::tensor_from({1e8, -1e8, 1.0}, {3, 1}, DType::kF32);
  Tensor positions = testing::int32_tensor({2, 0, 1});
  Tensor weights = testing::tensor_from({1, 1, 1}, {1, 3}, DType::kF32);
  Tensor out = testing::poisoned({1, 1}, DType::kF32);
  ASSERT_OK(moe_combine({.expert_out = expert_out,
                         .slot_positions = positions.view().reshape({1, 3}),
                         .topk_weights = weights,
                         .out = out}));
  EXPECT_EQ(out.host<float>()[0], 1.0f);
}

TEST(MoeCombineTest, RejectsBadArguments) {
  std::mt19937 rng(11);
  Tensor expert_out = testing::random_uniform({6, 4}, DType::kF32, rng);
  Tensor positions = testing::int32_tensor({0, 1, 2, 3, 4, 5});
  Tensor weights = testing::random_uniform({3, 2}, DType::kF32, rng);
  Tensor shared = testing::random_uniform({3, 4}, DType::kF32, rng);
  Tensor gate = testing::random_uniform({3, 1}, DType::kF32, rng);
  Tensor out = testing::poisoned({3, 4}, DType::kF32);
  Tensor weights_wide = testing::random_uniform({3, 3}, DType::kF32, rng);
  Tensor expert_narrow = testing::random_uniform({6, 3}, DType::kF32, rng);
  const MoeCombineParams good = {.expert_out = expert_out,
                                 .slot_positions = positions.view().reshape({3, 2}),
                                 .topk_weights = weights,
                                 .shared = shared,
                                 .shared_gate = gate,
                                 .out = out};
  EXPECT_OK(moe_combine(good));
  MoeCombineParams p = good;
  p.topk_weights = weights_wide;
  EXPECT_ERROR_CONTAINS(moe_combine(p),
                        "moe_combine: topk_weights has shape [3, 3], expected [3, 2] (T, top_k)");
  p = good;
  p.expert_out = expert_narrow;
  EXPECT_ERROR_CONTAINS(moe_combine(p),
                        "moe_combine: expert_out has shape [6, 3], expected [*, 4]");
  p = good;
  p.shared = {};
  EXPECT_ERROR_CONTAINS(moe_combine(p), "moe_combine: shared_gate is given without shared");
  p = good;
  p.slot_positions = {};
  EXPECT_ERROR_CONTAINS(moe_combine(p), "moe_combine: slot_positions is missing");
  p = good;
  p.out = shared;
  EXPECT_ERROR_CONTAINS(moe_combine(p), "moe_combine: out overlaps shared");
}

}  // namespace
}  // namespace hyla::kernels
