// CUDA body of the rotary embedding (kernels/rope.h) against the CPU body, which is the
// specification: positions on the device (0 up to 131071, a strided view too), rotary_dim from 2
// to head_dim, odd head_dim, T and heads strided and misaligned, theta 1e4 and 1e7; the
// pass-through dims must come back bit for bit. Fresh random inputs per run (seed in the trace;
// HYLA_TEST_SEED=<n> replays it). Skipped when no CUDA device is visible.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cuda_testing.h"
#include "kernels/rope.h"

namespace hyla::kernels {
namespace {

using testing::Tolerance;
using testing::TwinView;

constexpr DType kF32 = DType::kF32;

/// Both bodies take inv_freq from rope_inv_freq and round every product and sum alike, so the
/// angles are equal bit for bit; only cosf / sinf differ (CUDA <= 2 ulp, the host <= 1 ulp: <= 3
/// ulp, 1.8e-7, of values <= 1). With |x| <= 1 an output x1 c - x2 s moves by <= 2 x 1.8e-7, and
/// its final rounding by one more ulp of a value <= 2 (2.4e-7): <= 6e-7 absolute.
constexpr Tolerance kRotated{
    .atol = 1e-6, .rtol = 0, .why = "same angles; cosf / sinf of two libms, <= 3 ulp each"};

struct Case {
  int64_t T, heads, head_dim, rotary_dim;
  float theta;
  int64_t pad = 0, offset = 0;     // x rows
  bool strided_positions = false;  // positions as every other element of a [2T] buffer

  std::string name() const {
    return str_cat("T", T, "_heads", heads, "_hd", head_dim, "_rd", rotary_dim, "_theta", theta,
                   pad ? str_cat("_pad", pad) : "", offset ? str_cat("_at", offset) : "",
                   strided_positions ? "_strided_positions" : "");
  }
};

const Case kCases[] = {
    {0, 2, 8, 8, 1e4f},
    {1, 1, 2, 2, 1e4f},
    {5, 3, 64, 64, 1e4f},
    {7, 4, 256, 64, 1e7f, 3, 1},
    {9, 2, 33, 16, 1e4f, 0, 0, true},
    {33, 5, 129, 128, 1e6f, 2, 0, true},
    {4, 2, 512, 512, 1e4f},
    {65, 16, 128, 64, 5e6f},
};

TEST(RopeCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name());
    const std::vector<int64_t> x_shape = {c.T, c.heads, c.head_dim};
    Tensor x_values = testing::random_normal({testing::padded_numel(x_shape, c.pad, c.offset)},
                                             kF32, rng, 0.0f, 1.0f);
    // |x| <= 1, the bound the tolerance assumes
    for (float* v = x_values.data<float>(); v != x_values.data<float>() + x_values.numel(); ++v)
      *v = std::fmax(-1.0f, std::fmin(1.0f, *v));
    const TwinView x = testing::twin(x_values, x_shape, c.pad, c.offset);
    // positions: 0, small, and large (up to 2^17 - 1), where fp32 angles round coarsely
    const int64_t stride = c.strided_positions ? 2 : 1;
    std::vector<int32_t> values(size_t(std::max<int64_t>(1, c.T * stride)), -7);
    std::uniform_int_distribution<int32_t> small(0, 64), large(0, 131071);
    for (int64_t t = 0; t < c.T; ++t)
      values[size_t(t * stride)] = t == 0 ? 0 : t % 2 ? small(rng) : large(rng);
    Tensor positions_host_storage = testing::int32_tensor(values);
    Tensor positions_device_storage = testing::on_gpu(positions_host_storage);
    const int64_t positions_shape[] = {c.T}, positions_stride[] = {stride};
    const TensorView positions_host(positions_host_storage.view().raw(), DType::kI32, 1,
                                    positions_shape, positions_stride);
    const TensorView positions_device(positions_device_storage.view().raw(), DType::kI32, 1,
                                      positions_shape, positions_stride,
                                      positions_device_storage.device());
    ASSERT_OK(rope(
        {.x = x.host, .positions = positions_host, .rotary_dim = c.rotary_dim, .theta = c.theta}));
    ASSERT_OK(rope({.x = x.device,
                    .positions = positions_device,
                    .rotary_dim = c.rotary_dim,
                    .theta = c.theta}));
    testing::expect_twin_close(x, kRotated);
    // dims [rotary_dim, head_dim) pass through untouched
    if (c.rotary_dim < c.head_dim && c.T > 0) {
      const testing::HostResult got = testing::device_result(x);
      EXPECT_TRUE(
          testing::bitwise_equal(got.view.narrow(2, c.rotary_dim, c.head_dim - c.rotary_dim),
                                 x.host.narrow(2, c.rotary_dim, c.head_dim - c.rotary_dim)));
    }
  }
}

TEST(RopeCudaTest, RefusesHostPositionsForDeviceX) {
  HYLA_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(1);
  TwinView x = testing::twin_random({2, 1, 8}, kF32, rng);
  Tensor positions = testing::int32_tensor({0, 1});
  EXPECT_ERROR_CONTAINS(rope({.x = x.device, .positions = positions, .rotary_dim = 8}),
                        "rope: positions is on cpu, expected cuda:0");
}

TEST(RopeCudaTest, RefusesRotaryDimAboveTheCudaLimit) {
  HYLA_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(1);
  const int64_t dim = kRopeCudaMaxRotaryDim + 2;
  TwinView x = testing::twin_random({1, 1, dim}, kF32, rng);
  Tensor positions = testing::on_gpu(testing::int32_tensor({3}));
  EXPECT_ERROR_CONTAINS(rope({.x = x.device, .positions = positions, .rotary_dim = dim}),
                        "rope: rotary_dim is 514 on CUDA, supported up to 512");
}

}  // namespace
}  // namespace hyla::kernels
