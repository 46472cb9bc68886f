// CUDA body of gated_delta_rule_recurrent (kernels/gated_delta_rule.h) against the CPU body, which
// is the specification. Fresh random inputs every run (the seed is in each failure's trace;
// HYLA_TEST_SEED=<n> replays one). Cases: varlen batches of lengths {1, 2, 5, 64, 130} (plus an
// empty sequence) in one call; d_k = d_v in {32, 64, 128}, d_k != d_v and odd sizes (48 x 100,
// 256 x 40); GDN (scalar decay) and KDA (per-channel decay in the safe gate's range [-5, 0], and a
// strong one down to -30); GVA 1:1, 2:1, 4:1; f32 / bf16 activations and state pools; strided
// q / k / v / o rows; initial slots with -1, final slots in place / elsewhere / -1; step_states;
// q/k l2norm on and off. Compared: every o element (poisoned beforehand, storage outside the view
// must stay poisoned), the whole pool (written and untouched slots) and the step states.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_testing.h"
#include "kernels/gated_delta_rule.h"

namespace hyla::kernels {
namespace {

using testing::on_gpu;
using testing::on_host;
using testing::Tolerance;
using testing::TwinView;

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;

// ---- Tolerances ----
// Both bodies run in fp32 from the same rounded inputs; they differ in the summation order of the
// d_k-term dot products (sequential on the CPU, a warp tree on the GPU: ~1e-7 relative typically,
// <= d_k 2^-24 ~ 2e-6 for d_k = 256 at worst) and in exp (the CPU's exp_approx and the GPU's expf,
// each within ~2 ulp). With unit keys, beta in [0, 1] and decays <= 1 the state map is
// non-expansive, so each token's difference adds to, and does not multiply, those before it:
// 130 tokens x ~5e-7 of |values| <~ 1 stays below 1e-4.
constexpr Tolerance kF32Values{
    .atol = 1e-4,
    .rtol = 1e-4,
    .why =
        "fp32 both sides, different dot-product order and exp (~5e-7 per token), added over "
        "<= 130 tokens by a non-expansive state map"};
/// A bf16 output or pool: values within kF32Values can round to neighbouring bf16 values, one bf16
/// ulp (2^-7 relative) apart; a bf16 pool is written once per call.
constexpr Tolerance kBf16Values{
    .atol = 1e-4,
    .rtol = 1.0 / 128,
    .why =
        "one bf16 rounding per stored element on each side: <= 1 bf16 ulp (2^-7), plus "
        "kF32Values near zero"};
Tolerance tolerance(DType stored) { return stored == kBF16 ? kBf16Values : kF32Values; }

enum class Gate { kGdn, kKdaSafe, kKdaStrong };

struct RecurrentCase {
  std::vector<int32_t> seqlens;
  int64_t H, HV, d_k, d_v;
  Gate gate;
  DType act, pool;
  bool l2norm;
  bool step_states;
  int64_t pad;  // extra elements per q / k / v / o row (0: contiguous)

  std::string name() const {
    return str_cat("B", seqlens.size(), "_H", H, "_HV", HV, "_dk", d_k, "_dv", d_v,
                   gate == Gate::kGdn       ? "_gdn"
                   : gate == Gate::kKdaSafe ? "_kda"
                                            : "_kdastrong",
                   "_act", dtype_name(act), "_pool", dtype_name(pool), l2norm ? "" : "_nonorm",
                   step_states ? "_steps" : "", pad ? "_strided" : "");
  }
};

const std::vector<int32_t> kLengths = {1, 2, 5, 64, 130, 0};

const RecurrentCase kCases[] = {
    {kLengths, 2, 2, 32, 32, Gate::kGdn, kF32, kF32, true, true, 0},
    {kLengths, 2, 4, 32, 32, Gate::kKdaSafe, kBF16, kBF16, true, true, 3},
    {kLengths, 1, 2, 64, 64, Gate::kGdn, kBF16, kF32, true, false, 0},
    {kLengths, 2, 2, 64, 64, Gate::kKdaStrong, kF32, kBF16, true, false, 5},
    {kLengths, 1, 4, 128, 128, Gate::kKdaSafe, kF32, kF32, true, false, 0},
    {kLengths, 2, 2, 128, 128, Gate::kGdn, kBF16, kBF16, true, false, 8},
    {kLengths, 1, 2, 100, 48, Gate::kKdaSafe, kF32, kF32, true, true, 1},
    {kLengths, 1, 1, 256, 40, Gate::kGdn, kF32, kBF16, true, false, 0},
    {{3, 130, 1}, 2, 2, 32, 64, Gate::kGdn, kF32, kF32, false, true, 2},
};

TEST(GatedDeltaRuleRecurrentCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed0 = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed0));
  uint32_t n = 0;
  for (const RecurrentCase& c : kCases) {
    const uint32_t seed = seed0 + n++;
    SCOPED_TRACE(str_cat(c.name(), " seed ", seed));
    std::mt19937 rng(seed);
    const int64_t B = int64_t(c.seqlens.size()), H = c.H, HV = c.HV, d_k = c.d_k, d_v = c.d_v;
    std::vector<int32_t> cu = {0};
    for (int32_t len : c.seqlens) cu.push_back(cu.back() + len);
    const int64_t T = cu.back();

    // Pool of 2B + 1 slots in random order: sequence b reads ids[b] (-1 for b = 1) and writes it
    // in place (even b), writes a fresh slot ids[B + b] (odd b) or nothing (b = 3); slot ids[2B]
    // is never touched.
    std::vector<int32_t> ids(static_cast<size_t>(2 * B + 1));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int32_t> initial(static_cast<size_t>(B)), final(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      initial[size_t(b)] = b == 1 ? -1 : ids[size_t(b)];
      final[size_t(b)] = b == 3 ? -1 : b % 2 == 0 ? ids[size_t(b)] : ids[size_t(B + b)];
    }
    const int64_t slots = 2 * B + 1;

    // Without l2norm, keys of norm < 1 keep the state map non-expansive: |k|^2 ~ d_k a^2 / 3.
    const float qk_range = c.l2norm ? 1.0f : 0.25f;
    const std::vector<int64_t> qk_shape = {T, H, d_k}, v_shape = {T, HV, d_v};
    const TwinView q = testing::twin_uniform(qk_shape, c.act, rng, -qk_range, qk_range, c.pad);
    const TwinView k = testing::twin_uniform(qk_shape, c.act, rng, -qk_range, qk_range, c.pad);
    const TwinView v = testing::twin_uniform(v_shape, c.act, rng, -1.0f, 1.0f, c.pad);
    const TwinView o = testing::twin_poisoned(v_shape, c.act, c.pad);
    const bool kda = c.gate != Gate::kGdn;
    const float g_low = c.gate == Gate::kGdn ? -2.0f : c.gate == Gate::kKdaSafe ? -5.0f : -30.0f;
    const TwinView g = kda ? testing::twin_uniform({T, HV, d_k}, kF32, rng, g_low, 0.0f)
                           : testing::twin_uniform({T, HV}, kF32, rng, g_low, 0.0f);
    const TwinView beta = testing::twin_uniform({T, HV}, kF32, rng, 0.0f, 1.0f);
    const TwinView pool = testing::twin_uniform({slots, HV, d_v, d_k}, c.pool, rng, -0.5f, 0.5f);
    TwinView steps;
    if (c.step_states) steps = testing::twin_poisoned({T, HV, d_v, d_k}, kF32);
    const Tensor cu_host = testing::int32_tensor(cu), initial_host = testing::int32_tensor(initial),
                 final_host = testing::int32_tensor(final);
    const Tensor cu_gpu = on_gpu(cu_host), initial_gpu = on_gpu(initial_host),
                 final_gpu = on_gpu(final_host);

    auto params = [&](bool gpu) {
      auto pick = [gpu](const TwinView& t) { return gpu ? t.device : t.host; };
      GatedDeltaRuleParams p;
      p.q = pick(q);
      p.k = pick(k);
      p.v = pick(v);
      p.g = pick(g);
      p.beta = pick(beta);
      p.cu_seqlens = gpu ? cu_gpu : cu_host;
      p.state_pool = pick(pool);
      p.initial_slots = gpu ? initial_gpu : initial_host;
      p.final_slots = gpu ? final_gpu : final_host;
      p.use_qk_l2norm = c.l2norm;
      p.o = pick(o);
      if (c.step_states) p.step_states = pick(steps);
      return p;
    };
    ASSERT_OK(gated_delta_rule_recurrent(params(false)));
    ASSERT_OK(gated_delta_rule_recurrent(params(true)));

    const testing::HostResult o_back = testing::device_result(o);
    const Tensor pool_back = on_host(pool.device_storage);
    {
      SCOPED_TRACE("o");
      EXPECT_CLOSE(o_back.view, o.host, tolerance(c.act));
      EXPECT_TRUE(testing::untouched_outside(o_back.storage, o_back.view));
    }
    {
      SCOPED_TRACE("state pool (written and untouched slots)");
      EXPECT_CLOSE(pool_back, pool.host_storage, tolerance(c.pool));
      // slots nobody writes: bit for bit what they held
      for (int64_t s = 0; s < slots; ++s) {
        if (std::find(final.begin(), final.end(), int32_t(s)) != final.end()) continue;
        EXPECT_TRUE(testing::bitwise_equal(
            pool_back.view().reshape({slots, HV, d_v, d_k}).select(s),
            pool.host_storage.view().reshape({slots, HV, d_v, d_k}).select(s)))
            << "slot " << s << " is written by no sequence but changed";
      }
    }
    if (c.step_states) {
      SCOPED_TRACE("step_states");
      EXPECT_CLOSE(on_host(steps.device_storage), steps.host_storage, kF32Values);
    }
  }
}

TEST(GatedDeltaRuleRecurrentCudaTest, RefusesHeadDimAboveItsLimitAndHostIndices) {
  HYLA_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(3);
  const int64_t T = 2, H = 1, d_k = 257, d_v = 8;
  const Tensor q = on_gpu(testing::random_uniform({T, H, d_k}, kF32, rng));
  const Tensor v = on_gpu(testing::random_uniform({T, H, d_v}, kF32, rng));
  const Tensor g = on_gpu(testing::random_uniform({T, H}, kF32, rng, -1.0f, 0.0f));
  const Tensor beta = on_gpu(testing::random_uniform({T, H}, kF32, rng, 0.0f, 1.0f));
  const Tensor o = testing::poisoned_gpu({T, H, d_v}, kF32);
  const Tensor cu_host = testing::int32_tensor({0, 2});
  GatedDeltaRuleParams p;
  p.q = q;
  p.k = q;
  p.v = v;
  p.g = g;
  p.beta = beta;
  p.o = o;
  p.cu_seqlens = cu_host;
  EXPECT_ERROR_CONTAINS(gated_delta_rule_recurrent(p),
                        "gated_delta_rule_recurrent: cu_seqlens is on cpu, expected cuda:0");
  const Tensor cu_gpu = on_gpu(cu_host);
  p.cu_seqlens = cu_gpu;
  EXPECT_ERROR_CONTAINS(gated_delta_rule_recurrent(p),
                        "gated_delta_rule_recurrent: d_k = 257 on CUDA, supported: 1 to 256");
}

}  // namespace
}  // namespace hyla::kernels
