// Gated RMSNorm against a float64 reference: silu (GDN) and sigmoid (KDA) gates, f32 / bf16 in
// every combination, odd d_v, strided and misaligned views, in place; zero rows; argument errors.
#include "kernels/gated_rmsnorm.h"

#include <cmath>
#include <functional>
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

/// y = weight * x * rsqrt(mean(x^2) + eps) * act(gate), per row of d_v, in float64.
std::vector<double> gated_rmsnorm_reference(const std::vector<double>& x,
                                            const std::vector<double>& gate,
                                            const std::vector<double>& weight, double eps,
                                            GateActivation act) {
  const size_t d_v = weight.size();
  std::vector<double> y(x.size());
  for (size_t row = 0; row < x.size() / d_v; ++row) {
    double sum_sq = 0;
    for (size_t i_v = 0; i_v < d_v; ++i_v) sum_sq += x[row * d_v + i_v] * x[row * d_v + i_v];
    const double inv_rms = 1.0 / std::sqrt(sum_sq / double(d_v) + eps);
    for (size_t i_v = 0; i_v < d_v; ++i_v) {
      const double z = gate[row * d_v + i_v];
      const double gate_value =
          act == GateActivation::kSilu ? z / (1.0 + std::exp(-z)) : 1.0 / (1.0 + std::exp(-z));
      y[row * d_v + i_v] = weight[i_v] * x[row * d_v + i_v] * inv_rms * gate_value;
    }
  }
  return y;
}

Tolerance output_tolerance(DType y_dtype) {
  if (y_dtype == DType::kBF16)
    return {.atol = 1e-5,
            .rtol = 5e-3,
            .why = "bf16 output: rounding is half an ulp, 2^-8 relative; fp32 compute adds ~1e-6"};
  return {.atol = 1e-6,
          .rtol = 2e-5,
          .why =
              "fp32 sum of d_v <= 128 squares (<= 128 * 2^-24 relative, halved by the rsqrt) "
              "and a few ulp for expf and the three products"};
}

enum class Layout { kContiguous, kStrided, kInPlace };

struct RmsNormCase {
  int64_t T, HV, d_v;
  DType x_dtype, gate_dtype, weight_dtype, y_dtype;
  GateActivation act;
  Layout layout;

  std::string name() const {
    return str_cat("T", T, "_HV", HV, "_dv", d_v, "_x", dtype_name(x_dtype), "_gate",
                   dtype_name(gate_dtype), "_w", dtype_name(weight_dtype), "_y",
                   dtype_name(y_dtype), act == GateActivation::kSilu ? "_silu" : "_sigmoid",
                   layout == Layout::kStrided   ? "_strided"
                   : layout == Layout::kInPlace ? "_inplace"
                                                : "");
  }
};

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;
constexpr GateActivation kSilu = GateActivation::kSilu, kSigmoid = GateActivation::kSigmoid;
const RmsNormCase kCases[] = {
    {1, 1, 32, kF32, kF32, kF32, kF32, kSilu, Layout::kContiguous},
    {7, 3, 37, kBF16, kBF16, kF32, kBF16, kSilu, Layout::kContiguous},
    {5, 4, 128, kF32, kBF16, kBF16, kF32, kSigmoid, Layout::kStrided},
    {64, 2, 64, kBF16, kF32, kBF16, kF32, kSigmoid, Layout::kStrided},
    {3, 5, 33, kF32, kF32, kF32, kF32, kSilu, Layout::kInPlace},
    {9, 2, 128, kBF16, kBF16, kBF16, kBF16, kSigmoid, Layout::kInPlace},
};

TEST(GatedRmsNormTest, MatchesFloat64Reference) {
  int seed = 0;
  for (const RmsNormCase& c : kCases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    const std::vector<int64_t> shape = {c.T, c.HV, c.d_v};
    // strided: rows padded by a few elements, x and y start at odd offsets
    const bool strided = c.layout == Layout::kStrided;
    const int64_t x_pad = strided ? 3 : 0, x_offset = strided ? 1 : 0;
    const int64_t gate_pad = strided ? c.d_v : 0;  // gate = half of a fused [.., 2 d_v] row
    const int64_t y_pad = strided ? 2 : 0, y_offset = strided ? 3 : 0;
    Tensor x_storage =
        testing::random_normal({padded_numel(shape, x_pad, x_offset)}, c.x_dtype, rng, 0.0f, 1.0f);
    Tensor gate_storage =
        testing::random_normal({padded_numel(shape, gate_pad, 0)}, c.gate_dtype, rng, 0.0f, 2.0f);
    Tensor weight = testing::random_normal({c.d_v}, c.weight_dtype, rng, 1.0f, 0.1f);
    const TensorView x = padded_view(x_storage, shape, x_pad, x_offset);
    const TensorView gate = padded_view(gate_storage, shape, gate_pad, 0);
    Tensor y_storage;
    TensorView y = x;
    if (c.layout != Layout::kInPlace) {
      y_storage = testing::poisoned({padded_numel(shape, y_pad, y_offset)}, c.y_dtype);
      y = padded_view(y_storage, shape, y_pad, y_offset);
    }
    const std::vector<double> want = gated_rmsnorm_reference(
        testing::to_f64(x), testing::to_f64(gate), testing::to_f64(weight), 1e-6, c.act);
    ASSERT_OK(gated_rmsnorm(
        {.x = x, .gate = gate, .weight = weight, .eps = 1e-6f, .act = c.act, .y = y}));
    EXPECT_CLOSE(y, want, output_tolerance(c.y_dtype));
    if (c.layout != Layout::kInPlace) {
      EXPECT_TRUE(testing::untouched_outside(y_storage, y));
    }
  }
}

TEST(GatedRmsNormTest, ZeroRowStaysZeroAndFinite) {
  // row (t=0, h=1) is all zeros: rsqrt(0 + eps) is large but finite, and 0 times it is 0
  std::mt19937 rng(11);
  const int64_t T = 2, HV = 2, d_v = 16;
  Tensor x = testing::random_normal({T, HV, d_v}, DType::kF32, rng);
  for (int64_t i_v = 0; i_v < d_v; ++i_v) x.data<float>()[d_v + i_v] = 0.0f;
  Tensor gate = testing::random_normal({T, HV, d_v}, DType::kF32, rng);
  Tensor weight = testing::random_normal({d_v}, DType::kF32, rng, 1.0f, 0.1f);
  Tensor y = testing::poisoned({T, HV, d_v}, DType::kF32);
  ASSERT_OK(gated_rmsnorm(
      {.x = x, .gate = gate, .weight = weight, .eps = 1e-5f, .act = kSigmoid, .y = y}));
  for (int64_t i_v = 0; i_v < d_v; ++i_v) EXPECT_EQ(y.data<float>()[d_v + i_v], 0.0f);
  EXPECT_CLOSE(y,
               gated_rmsnorm_reference(testing::to_f64(x), testing::to_f64(gate),
                                       testing::to_f64(weight), 1e-5, kSigmoid),
               output_tolerance(DType::kF32));
}

TEST(GatedRmsNormTest, RejectsBadArguments) {
  std::mt19937 rng(5);
  const int64_t T = 3, HV = 2, d_v = 8;
  Tensor x = testing::random_normal({T, HV, d_v}, kF32, rng);
  Tensor x_f16 = testing::random_normal({T, HV, d_v}, DType::kF16, rng);
  Tensor x_2d = testing::random_normal({T, HV * d_v}, kF32, rng);
  Tensor gate = testing::random_normal({T, HV, d_v}, kBF16, rng);
  Tensor gate_short = testing::random_normal({T, HV - 1, d_v}, kBF16, rng);
  Tensor weight = testing::random_normal({d_v}, kF32, rng);
  Tensor weight_long = testing::random_normal({d_v + 1}, kF32, rng);
  Tensor y = testing::poisoned({T, HV, d_v}, kF32);
  const TensorView gate_on_cuda(gate.view().raw(), kBF16, {T, HV, d_v}, Device::cuda(0));
  const TensorView x_as_bf16(x.view().raw(), kBF16, {T, HV, d_v});
  const GatedRmsNormParams good = {
      .x = x, .gate = gate, .weight = weight, .eps = 1e-6f, .act = kSilu, .y = y};

  struct ErrorCase {
    const char* name;
    std::function<void(GatedRmsNormParams&)> change;
    const char* error;
  };
  const ErrorCase cases[] = {
      {"gate_shape", [&](GatedRmsNormParams& p) { p.gate = gate_short; },
       "gated_rmsnorm: gate has shape [3, 1, 8], expected [3, 2, 8] (T, HV, d_v)"},
      {"weight_shape", [&](GatedRmsNormParams& p) { p.weight = weight_long; },
       "gated_rmsnorm: weight has shape [9], expected [8] (d_v)"},
      {"x_rank", [&](GatedRmsNormParams& p) { p.x = x_2d; },
       "gated_rmsnorm: x has shape [3, 16], expected [*, *, *] (T, HV, d_v)"},
      {"x_dtype", [&](GatedRmsNormParams& p) { p.x = x_f16; },
       "gated_rmsnorm: x has dtype f16, expected f32 or bf16"},
      {"gate_device", [&](GatedRmsNormParams& p) { p.gate = gate_on_cuda; },
       "gated_rmsnorm: gate is on cuda:0, expected cpu"},
      {"eps_zero", [&](GatedRmsNormParams& p) { p.eps = 0.0f; },
       "gated_rmsnorm: eps is 0, expected a finite value > 0"},
      {"alias_two_dtypes", [&](GatedRmsNormParams& p) { p.y = x_as_bf16; },
       "gated_rmsnorm: y aliases x with a different dtype or strides"},
      {"missing_y", [&](GatedRmsNormParams& p) { p.y = {}; }, "gated_rmsnorm: y is missing"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    GatedRmsNormParams p = good;
    c.change(p);
    EXPECT_ERROR_CONTAINS(gated_rmsnorm(p), c.error);
  }
  EXPECT_OK(gated_rmsnorm(good));
}

}  // namespace
}  // namespace hyla::kernels
