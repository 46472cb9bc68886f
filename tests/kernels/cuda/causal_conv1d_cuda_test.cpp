// CUDA bodies of the depthwise causal conv (kernels/causal_conv1d.h) against the CPU bodies, which
// are the specification. Fresh random inputs every run (the seed is in each failure's trace;
// HYLA_TEST_SEED=<n> replays one). Prefill: varlen batches of lengths {1, 2, 5, 64, 130} (plus an
// empty sequence) in one call, D not a multiple of 32 and D > 128 (two channel blocks), K = 1 to 8,
// f32 / bf16 for x, weight, bias, pool and y, strided x / y rows and a strided pool, initial
// slots with -1, final slots in place / elsewhere / -1. Decode update: padding rows (slot -1).
// Compared: every y element (poisoned beforehand; storage outside the view must stay poisoned, as
// must padding rows) and every pool element, written or not (exact: the pool receives copies).
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_testing.h"
#include "kernels/causal_conv1d.h"

namespace hyla::kernels {
namespace {

using testing::on_gpu;
using testing::on_host;
using testing::Tolerance;
using testing::TwinView;

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;

// ---- Tolerances ----
// Both bodies form acc = bias + sum_j w[j] u_j with the same fmaf chain in the same order from the
// same rounded inputs, so acc is bit-identical; only SiLU's expf differs (<= 2 ulp on the GPU,
// libm's is correctly rounded in practice): ~2^-22 relative in the output.
Tolerance output_tolerance(DType y_dtype, bool silu) {
  if (y_dtype == kBF16)
    return {.atol = 0,
            .rtol = silu ? 1.0 / 128 : 0.0,
            .why =
                "bf16 y: an expf ulp apart can round to neighbouring bf16 values (2^-7); "
                "without SiLU the fp32 values are identical"};
  return {.atol = silu ? 1e-7 : 0.0,
          .rtol = silu ? 1e-6 : 0.0,
          .why = "identical fmaf chain; SiLU's expf differs by a few ulp (~2^-22 relative)"};
}

struct ConvCase {
  std::vector<int32_t> seqlens;
  int64_t D;
  int K;
  DType x, weight, state, y;
  bool bias, silu;
  bool initial;   // read initial states from slots (else zero history)
  bool pool;      // use a pool at all (final slots)
  int64_t pad;    // extra elements per x / y row (0: contiguous)
  bool pool_pad;  // the pool strided over slots

  std::string name() const {
    return str_cat("B", seqlens.size(), "_D", D, "_K", K, "_x", dtype_name(x), "_w",
                   dtype_name(weight), "_state", dtype_name(state), "_y", dtype_name(y),
                   bias ? "_bias" : "", silu ? "_silu" : "_linear", initial ? "_initial" : "",
                   pool ? "" : "_nopool", pad ? "_strided" : "", pool_pad ? "_poolstrided" : "");
  }
};

const std::vector<int32_t> kLengths = {1, 2, 5, 64, 130, 0};

const ConvCase kCases[] = {
    {kLengths, 200, 4, kF32, kF32, kF32, kF32, true, true, true, true, 5, true},
    {kLengths, 37, 4, kBF16, kBF16, kBF16, kBF16, false, true, true, true, 3, false},
    {kLengths, 64, 3, kF32, kF32, kBF16, kBF16, true, false, true, true, 0, true},
    {kLengths, 129, 8, kBF16, kF32, kF32, kF32, true, true, false, true, 7, false},
    {kLengths, 33, 2, kF32, kBF16, kF32, kF32, false, true, true, true, 0, false},
    {kLengths, 96, 4, kBF16, kBF16, kF32, kBF16, true, true, false, false, 2, false},
    {{3, 1, 130}, 32, 1, kF32, kF32, kF32, kF32, true, true, false, false, 0, false},
};

TEST(CausalConv1dCudaTest, PrefillMatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed0 = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed0));
  uint32_t n = 0;
  for (const ConvCase& c : kCases) {
    const uint32_t seed = seed0 + n++;
    SCOPED_TRACE(str_cat(c.name(), " seed ", seed));
    std::mt19937 rng(seed);
    const int64_t B = int64_t(c.seqlens.size()), D = c.D, K = c.K;
    std::vector<int32_t> cu = {0};
    for (int32_t len : c.seqlens) cu.push_back(cu.back() + len);
    const int64_t T = cu.back();

    // Pool of 2B + 1 slots in random order: sequence b reads ids[b] (one of them -1 when there
    // are initial states) and writes it in place (even b), writes a fresh slot ids[B + b] (odd b)
    // or nothing (b = 3); slot ids[2B] is never touched.
    std::vector<int32_t> ids(static_cast<size_t>(2 * B + 1));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int32_t> initial(static_cast<size_t>(B)), final(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      initial[size_t(b)] = c.initial && b != 1 ? ids[size_t(b)] : -1;
      final[size_t(b)] = b == 3 ? -1 : b % 2 == 0 ? ids[size_t(b)] : ids[size_t(B + b)];
    }
    const int64_t slots = 2 * B + 1;

    const std::vector<int64_t> x_shape = {T, D}, pool_shape = {slots, D, K - 1};
    const TwinView x = testing::twin_uniform(x_shape, c.x, rng, -1.0f, 1.0f, c.pad);
    const TwinView y = testing::twin_poisoned(x_shape, c.y, c.pad);
    const TwinView weight = testing::twin_random({D, K}, c.weight, rng, 0.0f, 0.5f);
    const TwinView bias = testing::twin_uniform({D}, c.weight, rng);
    // strided pool: each slot's [D, K-1] block followed by 5 unused elements
    const int64_t pool_pad_elems = c.pool_pad ? 5 : 0;
    TwinView pool = testing::twin_uniform(
        {std::max<int64_t>(1, slots * (D * (K - 1) + pool_pad_elems))}, c.state, rng);
    const int64_t pool_stride[] = {D * (K - 1) + pool_pad_elems, K - 1, 1};
    const int64_t pool_dims[] = {slots, D, K - 1};
    pool.host = TensorView(pool.host_storage.view().raw(), c.state, 3, pool_dims, pool_stride);
    pool.device = TensorView(pool.device_storage.view().raw(), c.state, 3, pool_dims, pool_stride,
                             Device::cuda());
    const Tensor cu_host = testing::int32_tensor(cu), initial_host = testing::int32_tensor(initial),
                 final_host = testing::int32_tensor(final);
    const Tensor cu_gpu = on_gpu(cu_host), initial_gpu = on_gpu(initial_host),
                 final_gpu = on_gpu(final_host);

    auto params = [&](bool gpu) {
      CausalConv1dParams p;
      p.x = gpu ? x.device : x.host;
      p.weight = gpu ? weight.device : weight.host;
      if (c.bias) p.bias = gpu ? bias.device : bias.host;
      p.cu_seqlens = gpu ? cu_gpu : cu_host;
      if (c.pool) {
        p.conv_state = gpu ? pool.device : pool.host;
        p.final_slots = gpu ? final_gpu : final_host;
        if (c.initial) p.initial_slots = gpu ? initial_gpu : initial_host;
      }
      p.silu = c.silu;
      p.y = gpu ? y.device : y.host;
      return p;
    };
    ASSERT_OK(causal_conv1d(params(false)));
    ASSERT_OK(causal_conv1d(params(true)));

    const testing::HostResult y_back = testing::device_result(y);
    const Tensor pool_back = on_host(pool.device_storage);
    EXPECT_CLOSE(y_back.view, y.host, output_tolerance(c.y, c.silu));
    EXPECT_TRUE(testing::untouched_outside(y_back.storage, y_back.view));
    // the whole pool storage: written final slots, untouched slots and the padding between slots;
    // exact, as the pool receives copies of inputs or of its own entries, rounded alike
    EXPECT_TRUE(testing::bitwise_equal(pool_back, pool.host_storage));
  }
}

TEST(CausalConv1dCudaTest, UpdateMatchesCpuAndSkipsPadding) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed0 = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed0));
  struct UpdateCase {
    int64_t B, D;
    int K;
    DType x, state, y;
    int64_t pad;
  };
  const UpdateCase cases[] = {{7, 200, 4, kF32, kF32, kF32, 3},
                              {7, 37, 4, kBF16, kBF16, kBF16, 0},
                              {1, 64, 2, kF32, kBF16, kBF16, 5},
                              {33, 129, 8, kBF16, kF32, kF32, 0}};
  uint32_t n = 0;
  for (const UpdateCase& c : cases) {
    const uint32_t seed = seed0 + n++;
    SCOPED_TRACE(str_cat("B", c.B, "_D", c.D, "_K", c.K, "_x", dtype_name(c.x), "_state",
                         dtype_name(c.state), "_y", dtype_name(c.y), " seed ", seed));
    std::mt19937 rng(seed);
    const int64_t B = c.B, D = c.D, K = c.K, slots = B + 3;
    // B distinct slots out of B + 3 in random order, one of them -1 (padding) when B > 1
    std::vector<int32_t> ids(static_cast<size_t>(slots));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(size_t(B));
    if (B > 1) ids[size_t(rng() % uint32_t(B))] = -1;

    const std::vector<int64_t> x_shape = {B, D};
    const TwinView x = testing::twin_uniform(x_shape, c.x, rng, -1.0f, 1.0f, c.pad);
    const TwinView y = testing::twin_poisoned(x_shape, c.y, c.pad);
    const TwinView weight = testing::twin_random({D, K}, kF32, rng, 0.0f, 0.5f);
    const TwinView bias = testing::twin_uniform({D}, kBF16, rng);
    const TwinView pool = testing::twin_uniform({slots, D, K - 1}, c.state, rng);
    const Tensor slots_host = testing::int32_tensor(ids), slots_gpu = on_gpu(slots_host);
    auto params = [&](bool gpu) {
      CausalConv1dUpdateParams p;
      p.x = gpu ? x.device : x.host;
      p.weight = gpu ? weight.device : weight.host;
      p.bias = gpu ? bias.device : bias.host;
      p.conv_state = gpu ? pool.device : pool.host;
      p.slots = gpu ? slots_gpu : slots_host;
      p.y = gpu ? y.device : y.host;
      return p;
    };
    ASSERT_OK(causal_conv1d_update(params(false)));
    ASSERT_OK(causal_conv1d_update(params(true)));

    const testing::HostResult y_back = testing::device_result(y);
    const Tensor pool_back = on_host(pool.device_storage);
    const TensorView y_got = y_back.view;
    for (int64_t b = 0; b < B; ++b) {
      SCOPED_TRACE(str_cat("row b = ", b, ", slot ", ids[size_t(b)]));
      const TensorView got = y_got.slice(b, b + 1), want = y.host.slice(b, b + 1);
      if (ids[size_t(b)] < 0) {
        EXPECT_TRUE(testing::bitwise_equal(got, want)) << "the GPU wrote a padding row";
      } else {
        EXPECT_CLOSE(got, want, output_tolerance(c.y, true));
      }
    }
    EXPECT_TRUE(testing::untouched_outside(y_back.storage, y_got));
    EXPECT_TRUE(testing::bitwise_equal(pool_back, pool.host_storage))
        << "the pool differs: exact copies of inputs and history expected";
  }
}

/// Index tensors on the device are accepted without being read; on the host they are refused
/// for a CUDA call (the kernel could not read them), as a CUDA x with host slots would be.
TEST(CausalConv1dCudaTest, IndexTensorsMustLiveOnTheDevice) {
  HYLA_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(5);
  const Tensor x = on_gpu(testing::random_uniform({4, 16}, kF32, rng));
  const Tensor w = on_gpu(testing::random_normal({16, 4}, kF32, rng));
  const Tensor pool = on_gpu(testing::random_uniform({3, 16, 3}, kF32, rng));
  const Tensor y = testing::poisoned_gpu({4, 16}, kF32);
  const Tensor cu_host = testing::int32_tensor({0, 1, 4});
  CausalConv1dParams p;
  p.x = x;
  p.weight = w;
  p.cu_seqlens = cu_host;
  p.y = y;
  EXPECT_ERROR_CONTAINS(causal_conv1d(p), "causal_conv1d: cu_seqlens is on cpu, expected cuda:0");
  const Tensor slots_host = testing::int32_tensor({0, 1, 2, -1});
  CausalConv1dUpdateParams u;
  u.x = x;
  u.weight = w;
  u.conv_state = pool;
  u.slots = slots_host;
  u.y = y;
  EXPECT_ERROR_CONTAINS(causal_conv1d_update(u),
                        "causal_conv1d_update: slots is on cpu, expected cuda:0");
}

}  // namespace
}  // namespace hyla::kernels
