// RMSNorm against a float64 reference: the plain (w) and zero-centred ((1 + w)) forms, f32 / bf16
// in every combination, 1-4 dims, odd d, strided and misaligned views, in place; the fused
// residual add (residual += x, y = norm(residual)); zero rows; argument errors.
#include "kernels/rmsnorm.h"

#include <cmath>
#include <functional>
#include <limits>
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

/// y = (offset + w) * x * rsqrt(mean(x^2) + eps) per row of d, in float64.
std::vector<double> rmsnorm_reference(const std::vector<double>& x,
                                      const std::vector<double>& weight, double eps,
                                      RmsNormForm form) {
  const size_t d = weight.size();
  const double offset = form == RmsNormForm::kOffset ? 1.0 : 0.0;
  std::vector<double> y(x.size());
  for (size_t row = 0; row < x.size() / d; ++row) {
    double sum_sq = 0;
    for (size_t i = 0; i < d; ++i) sum_sq += x[row * d + i] * x[row * d + i];
    const double inv_rms = 1.0 / std::sqrt(sum_sq / double(d) + eps);
    for (size_t i = 0; i < d; ++i) y[row * d + i] = (offset + weight[i]) * x[row * d + i] * inv_rms;
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
              "fp32 sum of d <= 2048 squares (sequential: <= d 2^-24 relative, ~1e-5 worst case, "
              "halved by the rsqrt) and a few ulp for the sqrt, division and two products"};
}

struct RmsNormCase {
  std::vector<int64_t> shape;
  DType x_dtype, weight_dtype, y_dtype;
  RmsNormForm form;
  int64_t pad = 0;     // extra elements per row of storage: > 0 makes strided views
  int64_t offset = 0;  // first element's offset in storage: odd values misalign the view
  bool in_place = false;

  std::string name() const {
    std::string s = "shape";
    for (size_t i = 0; i < shape.size(); ++i) s += str_cat(i ? "x" : "", shape[i]);
    s += str_cat("_x", dtype_name(x_dtype), "_w", dtype_name(weight_dtype), "_y",
                 dtype_name(y_dtype), form == RmsNormForm::kOffset ? "_offset" : "_weight");
    if (pad) s += str_cat("_pad", pad);
    if (offset) s += str_cat("_at", offset);
    if (in_place) s += "_inplace";
    return s;
  }
};

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;
constexpr RmsNormForm kWeight = RmsNormForm::kWeight, kOffset = RmsNormForm::kOffset;
const RmsNormCase kCases[] = {
    {{37}, kF32, kF32, kF32, kWeight},
    {{1, 128}, kF32, kF32, kF32, kOffset},
    {{0, 16}, kF32, kF32, kF32, kOffset},
    {{7, 2048}, kF32, kBF16, kF32, kOffset},
    {{5, 33}, kBF16, kBF16, kBF16, kWeight},
    {{9, 4, 32}, kF32, kF32, kF32, kOffset, 3, 1},
    {{3, 2, 65}, kBF16, kF32, kF32, kWeight, 2, 0},
    {{2, 3, 2, 17}, kF32, kBF16, kBF16, kOffset, 5, 3},
    {{6, 31}, kF32, kF32, kF32, kOffset, 1, 0, true},
    {{4, 2, 19}, kBF16, kBF16, kBF16, kWeight, 0, 1, true},
};

TEST(RmsNormTest, MatchesFloat64Reference) {
  int seed = 0;
  for (const RmsNormCase& c : kCases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    const int64_t d = c.shape.back();
    const int64_t numel = padded_numel(c.shape, c.pad, c.offset);
    Tensor x_storage = testing::random_normal({numel}, c.x_dtype, rng, 0.5f, 2.0f);
    const TensorView x = padded_view(x_storage, c.shape, c.pad, c.offset);
    // kOffset weights are small (zero-centred), kWeight weights near 1
    Tensor weight =
        testing::random_normal({d}, c.weight_dtype, rng, c.form == kOffset ? 0.0f : 1.0f, 0.1f);
    Tensor y_storage;
    TensorView y = x;
    if (!c.in_place) {
      y_storage = testing::poisoned({numel}, c.y_dtype);
      y = padded_view(y_storage, c.shape, c.pad, c.offset);
    }
    const std::vector<double> want =
        rmsnorm_reference(testing::to_f64(x), testing::to_f64(weight), 1e-6, c.form);
    ASSERT_OK(rmsnorm({.x = x, .weight = weight, .eps = 1e-6f, .form = c.form, .y = y}));
    EXPECT_CLOSE(y, want, output_tolerance(c.y_dtype));
    if (!c.in_place) {
      EXPECT_TRUE(testing::untouched_outside(y_storage, y));
    }
  }
}

struct ResidualCase {
  std::vector<int64_t> shape;
  DType x_dtype, y_dtype;
  RmsNormForm form;
  int64_t pad = 0;        // extra elements per row of every storage (x, y, residual)
  bool in_place = false;  // y = x

  std::string name() const {
    std::string s = "shape";
    for (size_t i = 0; i < shape.size(); ++i) s += str_cat(i ? "x" : "", shape[i]);
    s += str_cat("_x", dtype_name(x_dtype), "_y", dtype_name(y_dtype),
                 form == RmsNormForm::kOffset ? "_offset" : "_weight");
    if (pad) s += str_cat("_pad", pad);
    if (in_place) s += "_inplace";
    return s;
  }
};

TEST(RmsNormTest, FusedResidualAddsThenNormalises) {
  const ResidualCase cases[] = {
      {{1}, kF32, kF32, kWeight},
      {{3, 33}, kF32, kF32, kOffset},
      {{0, 8}, kF32, kF32, kOffset},
      {{5, 129}, kBF16, kBF16, kWeight, 2},
      {{2, 3, 64}, kF32, kBF16, kOffset, 1},
      {{4, 2048}, kF32, kF32, kOffset, 0, true},
      {{2, 2, 2, 17}, kBF16, kBF16, kWeight, 3, true},
  };
  int seed = 100;
  for (const ResidualCase& c : cases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    const int64_t d = c.shape.back();
    const int64_t numel = padded_numel(c.shape, c.pad, 0);
    Tensor x_storage = testing::random_normal({numel}, c.x_dtype, rng, 0.0f, 1.0f);
    Tensor r_storage = testing::random_normal({numel}, kF32, rng, 0.5f, 2.0f);
    const TensorView x = padded_view(x_storage, c.shape, c.pad, 0);
    const TensorView residual = padded_view(r_storage, c.shape, c.pad, 0);
    Tensor weight = testing::random_normal({d}, kF32, rng, c.form == kOffset ? 0.0f : 1.0f, 0.1f);
    // the sum the kernel must keep: residual + x rounded once to f32
    const std::vector<double> x64 = testing::to_f64(x), r64 = testing::to_f64(residual);
    std::vector<double> sum(x64.size());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = double(float(r64[i]) + float(x64[i]));
    Tensor y_storage;
    TensorView y = x;
    if (!c.in_place) {
      y_storage = testing::poisoned({numel}, c.y_dtype);
      y = padded_view(y_storage, c.shape, c.pad, 0);
    }
    ASSERT_OK(rmsnorm(
        {.x = x, .weight = weight, .eps = 1e-6f, .form = c.form, .y = y, .residual = residual}));
    EXPECT_CLOSE(residual, sum,
                 {.atol = 0, .rtol = 0, .why = "one fp32 add per element, as the reference"});
    EXPECT_CLOSE(y, rmsnorm_reference(sum, testing::to_f64(weight), 1e-6, c.form),
                 output_tolerance(c.in_place ? c.x_dtype : c.y_dtype));
    if (!c.in_place) {
      EXPECT_TRUE(testing::untouched_outside(y_storage, y));
    }
  }
}

TEST(RmsNormTest, ZeroRowStaysZeroAndEpsIsUsed) {
  // row 0 is all zeros: rsqrt(0 + eps) is large but finite, and 0 times it is 0.
  // row 1 is tiny (mean square 1e-8, below eps = 1e-5): eps dominates, y ~ x / sqrt(eps)
  const int64_t d = 4;
  Tensor x = testing::tensor_from({0, 0, 0, 0, 1e-4, -1e-4, 1e-4, -1e-4}, {2, d}, kF32);
  Tensor weight = testing::tensor_from({1, 2, 0.5, 1}, {d}, kF32);
  for (RmsNormForm form : {kWeight, kOffset}) {
    SCOPED_TRACE(form == kOffset ? "offset" : "weight");
    Tensor y = testing::poisoned({2, d}, kF32);
    ASSERT_OK(rmsnorm({.x = x, .weight = weight, .eps = 1e-5f, .form = form, .y = y}));
    for (int64_t i = 0; i < d; ++i) EXPECT_EQ(y.data<float>()[i], 0.0f) << "i = " << i;
    EXPECT_CLOSE(y, rmsnorm_reference(testing::to_f64(x), testing::to_f64(weight), 1e-5, form),
                 output_tolerance(kF32));
  }
}

TEST(RmsNormTest, RejectsBadArguments) {
  std::mt19937 rng(5);
  const int64_t T = 3, d = 8;
  Tensor x = testing::random_normal({T, d}, kF32, rng);
  Tensor x_f16 = testing::random_normal({T, d}, DType::kF16, rng);
  Tensor x_5d = testing::random_normal({1, 1, 1, T, d}, kF32, rng);
  Tensor weight = testing::random_normal({d}, kF32, rng);
  Tensor weight_long = testing::random_normal({d + 1}, kF32, rng);
  Tensor weight_half = testing::random_normal({d / 2}, kF32, rng);
  Tensor y = testing::poisoned({T, d}, kF32);
  Tensor y_tall = testing::poisoned({T + 1, d}, kF32);
  const int64_t shape[] = {T, d / 2}, every_other[] = {d, 2};
  const TensorView x_strided_last(x.view().raw(), kF32, 2, shape, every_other);
  const TensorView weight_on_cuda(weight.view().raw(), kF32, {d}, Device::cuda(0));
  const TensorView x_as_bf16(x.view().raw(), kBF16, {T, d});
  Tensor residual = testing::random_normal({T, d}, kF32, rng);
  Tensor residual_bf16 = testing::random_normal({T, d}, kBF16, rng);
  Tensor residual_tall = testing::random_normal({T + 1, d}, kF32, rng);
  const TensorView residual_on_cuda(residual.view().raw(), kF32, {T, d}, Device::cuda(0));
  const RmsNormParams good = {.x = x, .weight = weight, .eps = 1e-6f, .y = y};

  struct ErrorCase {
    const char* name;
    std::function<void(RmsNormParams&)> change;
    const char* error;
  };
  const ErrorCase cases[] = {
      {"weight_shape", [&](RmsNormParams& p) { p.weight = weight_long; },
       "rmsnorm: weight has shape [9], expected [8] (d)"},
      {"y_shape", [&](RmsNormParams& p) { p.y = y_tall; },
       "rmsnorm: y has shape [4, 8], expected [3, 8] (the shape of x)"},
      {"five_dims",
       [&](RmsNormParams& p) {
         p.x = x_5d;
         p.y = x_5d;
       },
       "rmsnorm: x has shape [1, 1, 1, 3, 8], expected 1 to 4 dims"},
      {"x_dtype", [&](RmsNormParams& p) { p.x = x_f16; },
       "rmsnorm: x has dtype f16, expected f32 or bf16"},
      {"last_dim_strided",
       [&](RmsNormParams& p) {
         p.x = x_strided_last;
         p.y = x_strided_last;
         p.weight = weight_half;
       },
       "rmsnorm: x must have a contiguous last dimension"},
      {"weight_device", [&](RmsNormParams& p) { p.weight = weight_on_cuda; },
       "rmsnorm: weight is on cuda:0, expected cpu"},
      {"eps_zero", [&](RmsNormParams& p) { p.eps = 0.0f; },
       "rmsnorm: eps is 0, expected a finite value > 0"},
      {"eps_inf", [&](RmsNormParams& p) { p.eps = std::numeric_limits<float>::infinity(); },
       "rmsnorm: eps is inf"},
      {"form", [&](RmsNormParams& p) { p.form = static_cast<RmsNormForm>(7); },
       "rmsnorm: form is 7, expected kWeight or kOffset"},
      {"alias_two_dtypes", [&](RmsNormParams& p) { p.y = x_as_bf16; },
       "rmsnorm: y aliases x with a different dtype or strides"},
      {"missing_weight", [&](RmsNormParams& p) { p.weight = {}; }, "rmsnorm: weight is missing"},
      {"missing_y", [&](RmsNormParams& p) { p.y = {}; }, "rmsnorm: y is missing"},
      {"residual_shape", [&](RmsNormParams& p) { p.residual = residual_tall; },
       "rmsnorm: residual has shape [4, 8], expected [3, 8] (the shape of x)"},
      {"residual_dtype", [&](RmsNormParams& p) { p.residual = residual_bf16; },
       "rmsnorm: residual has dtype bf16, expected f32"},
      {"residual_device", [&](RmsNormParams& p) { p.residual = residual_on_cuda; },
       "rmsnorm: residual is on cuda:0, expected cpu"},
      {"residual_is_x", [&](RmsNormParams& p) { p.residual = x; },
       "rmsnorm: residual overlaps x; the residual sum is kept in its own buffer"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    RmsNormParams p = good;
    c.change(p);
    EXPECT_ERROR_CONTAINS(rmsnorm(p), c.error);
  }
  EXPECT_OK(rmsnorm(good));
  RmsNormParams with_residual = good;
  with_residual.residual = residual;
  EXPECT_OK(rmsnorm(with_residual));
}

TEST(RmsNormTest, ResidualMustNotOverlapY) {
  std::mt19937 rng(6);
  const int64_t T = 3, d = 8;
  Tensor x = testing::random_normal({T, d}, kF32, rng);
  Tensor weight = testing::random_normal({d}, kF32, rng);
  Tensor storage = testing::poisoned({T * d + 1}, kF32);
  const TensorView y(storage.data<float>(), kF32, {T, d});
  // one element further on: a [T, d] residual sharing all but one element with y
  const TensorView residual(storage.data<float>() + 1, kF32, {T, d});
  for (const TensorView& r : {y, residual}) {
    EXPECT_ERROR_CONTAINS(
        rmsnorm({.x = x, .weight = weight, .y = y, .residual = r}),
        "rmsnorm: residual overlaps y; the residual sum is kept in its own buffer");
  }
}

}  // namespace
}  // namespace hyla::kernels
