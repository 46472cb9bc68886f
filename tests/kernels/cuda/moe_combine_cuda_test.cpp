// moe_combine: CUDA body against the CPU body. Both sum a token's terms in ascending position
// order, so they differ only by fused multiply-adds and the device's expf in the sigmoid gate.
// Routed only, with a plain or gated shared expert, shared only, accumulate, strided views,
// skipped positions (-1, >= N), widths not multiples of the block, K up to 16.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "../strided_views.h"
#include "cuda_testing.h"
#include "kernels/moe_combine.h"

namespace hyla::kernels {
namespace {

using testing::padded_numel;
using testing::padded_view;

struct CombineCase {
  int64_t T, K, width;
  bool routed, shared, gate, accumulate, strided;
  std::string name() const {
    return str_cat("T", T, "_K", K, "_w", width, routed ? "_routed" : "", shared ? "_shared" : "",
                   gate ? "_gate" : "", accumulate ? "_accumulate" : "", strided ? "_strided" : "");
  }
};

const CombineCase kCases[] = {
    {1, 1, 1, true, false, false, false, false}, {7, 2, 33, true, false, false, false, true},
    {9, 4, 64, true, true, true, false, false},   // Qwen: gated shared expert
    {5, 8, 130, true, true, false, true, true},   // Kimi: plain shared expert
    {12, 3, 17, false, true, true, true, false},  // latent MoE's second call: shared only
    {6, 2, 40, true, false, false, true, false}, {129, 16, 300, true, true, true, false, true},
};

TEST(MoeCombineCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  int seed = 0;
  for (const CombineCase& c : kCases) {
    ++seed;
    SCOPED_TRACE(c.name() + str_cat("_seed", seed));
    std::mt19937 rng(seed);
    const int64_t N = c.T * c.K + 3;  // spare rows no slot points at
    const int64_t pad = c.strided ? 3 : 0, offset = c.strided ? 1 : 0;
    auto host = [&](std::vector<int64_t> shape) {
      return testing::random_uniform({padded_numel(shape, pad, offset)}, DType::kF32, rng);
    };
    const Tensor expert_h = host({N, c.width}), weights_h = host({c.T, c.K}),
                 shared_h = host({c.T, c.width}), gate_h = host({c.T, 1}),
                 out_h = host({c.T, c.width});
    std::vector<int32_t> perm(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) perm[size_t(i)] = int32_t(i);
    std::shuffle(perm.begin(), perm.end(), rng);
    perm.resize(size_t(c.T * c.K));
    if (perm.size() > 3) {
      perm[1] = -1;
      perm[3] = int32_t(N);
    }
    const Tensor positions_h = testing::int32_tensor(perm);
    const Tensor expert_d = testing::on_gpu(expert_h), weights_d = testing::on_gpu(weights_h),
                 shared_d = testing::on_gpu(shared_h), gate_d = testing::on_gpu(gate_h),
                 out_d = testing::on_gpu(out_h), positions_d = testing::on_gpu(positions_h);
    auto params = [&](const Tensor& expert, const Tensor& positions, const Tensor& weights,
                      const Tensor& shared, const Tensor& gate, const Tensor& out) {
      MoeCombineParams p{.accumulate = c.accumulate,
                         .out = padded_view(out, {c.T, c.width}, pad, offset)};
      if (c.routed) {
        p.expert_out = padded_view(expert, {N, c.width}, pad, offset);
        p.slot_positions = positions.view().reshape({c.T, c.K});
        p.topk_weights = padded_view(weights, {c.T, c.K}, pad, offset);
      }
      if (c.shared) p.shared = padded_view(shared, {c.T, c.width}, pad, offset);
      if (c.gate) p.shared_gate = padded_view(gate, {c.T, 1}, pad, offset);
      return p;
    };
    ASSERT_OK(moe_combine(params(expert_h, positions_h, weights_h, shared_h, gate_h, out_h)));
    ASSERT_OK(moe_combine(params(expert_d, positions_d, weights_d, shared_d, gate_d, out_d)));
    const Tensor got = testing::on_host(out_d);
    EXPECT_CLOSE(padded_view(got, {c.T, c.width}, pad, offset),
                 padded_view(out_h, {c.T, c.width}, pad, offset),
                 {.atol = 1e-6,
                  .rtol = 1e-6,
                  .why = "same order of <= 18 terms of O(1); fused multiply-adds on either side "
                         "(1 ulp each) and the device's expf in the gate (2 ulp)"});
    // the padding between rows: untouched on both, so equal to the inputs' random values
    std::vector<double> got_all = testing::to_f64(got), want_all = testing::to_f64(out_h);
    const std::vector<int64_t> inside =
        testing::element_offsets(got, padded_view(got, {c.T, c.width}, pad, offset));
    for (int64_t i : inside) got_all[size_t(i)] = want_all[size_t(i)] = 0;
    EXPECT_EQ(got_all, want_all) << "an element outside out was written";
  }
}

}  // namespace
}  // namespace hyla::kernels
