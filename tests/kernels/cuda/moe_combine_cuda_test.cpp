// moe_combine: CUDA body against the CPU body. Both sum a token's terms in ascending position
// order, so they differ only by fused multiply-adds and the device's expf in the sigmoid gate.
// Routed only, with a plain or gated shared expert, shared only, accumulate, strided views,
// skipped positions (-1, >= N), widths not multiples of the block, K up to 16.
// Fresh random inputs every run: case k draws from base + k (the trace names both;
// HYLA_TEST_SEED=<base> replays a run).
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "cuda_testing.h"
#include "kernels/moe_combine.h"

namespace hyla::kernels {
namespace {

using testing::TwinView;

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
  const uint32_t base = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(base));
  uint32_t seed = base;
  for (const CombineCase& c : kCases) {
    ++seed;
    SCOPED_TRACE(c.name() + str_cat("_seed", seed));
    std::mt19937 rng(seed);
    const int64_t N = c.T * c.K + 3;  // spare rows no slot points at
    const int64_t pad = c.strided ? 3 : 0, offset = c.strided ? 1 : 0;
    auto random_twin = [&](const std::vector<int64_t>& shape) {
      return testing::twin_uniform(shape, DType::kF32, rng, -1.0f, 1.0f, pad, offset);
    };
    const TwinView expert = random_twin({N, c.width}), weights = random_twin({c.T, c.K}),
                   shared = random_twin({c.T, c.width}), gate = random_twin({c.T, 1}),
                   out = random_twin({c.T, c.width});
    std::vector<int32_t> perm(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) perm[size_t(i)] = int32_t(i);
    std::shuffle(perm.begin(), perm.end(), rng);
    perm.resize(size_t(c.T * c.K));
    if (perm.size() > 3) {
      perm[1] = -1;
      perm[3] = int32_t(N);
    }
    const TwinView positions = testing::twin(testing::int32_tensor(perm), {c.T, c.K});
    auto params = [&](bool gpu) {
      auto pick = [gpu](const TwinView& t) { return gpu ? t.device : t.host; };
      MoeCombineParams p{.accumulate = c.accumulate, .out = pick(out)};
      if (c.routed) {
        p.expert_out = pick(expert);
        p.slot_positions = pick(positions);
        p.topk_weights = pick(weights);
      }
      if (c.shared) p.shared = pick(shared);
      if (c.gate) p.shared_gate = pick(gate);
      return p;
    };
    ASSERT_OK(moe_combine(params(false)));
    ASSERT_OK(moe_combine(params(true)));
    const testing::HostResult got = testing::device_result(out);
    EXPECT_CLOSE(got.view, out.host,
                 {.atol = 1e-6,
                  .rtol = 1e-6,
                  .why = "same order of <= 18 terms of O(1); fused multiply-adds on either side "
                         "(1 ulp each) and the device's expf in the gate (2 ulp)"});
    // the padding between rows: untouched on both, so equal to the inputs' random values
    EXPECT_TRUE(testing::same_outside_view(got, out)) << "an element outside out was written";
  }
}

}  // namespace
}  // namespace hyla::kernels
