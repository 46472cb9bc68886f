// SiTU-GLU against a float64 reference of Kimi K3's formula: odd I, T = 0, 1 and larger, strided
// and misaligned x, y as a column slice of a wider buffer, in place over x's gate half, other
// betas, saturation; argument errors.
#include "kernels/situ_glu.h"

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "glu_layouts.h"
#include "testing.h"

namespace hyla::kernels {
namespace {

using testing::GluLayout;
using testing::Tolerance;

/// y[t, i] = beta tanh(g / beta) sigmoid(g) * linear_beta tanh(u / linear_beta) in float64;
/// x is [T, 2I] row-major, g = x[t, i], u = x[t, I + i].
std::vector<double> situ_glu_reference(const std::vector<double>& x, int64_t T, int64_t I,
                                       double beta, double linear_beta) {
  std::vector<double> y(size_t(T * I));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < I; ++i) {
      const double g = x[size_t(t * 2 * I + i)], u = x[size_t(t * 2 * I + I + i)];
      const double gate = beta * std::tanh(g / beta) / (1.0 + std::exp(-g));
      y[size_t(t * I + i)] = gate * linear_beta * std::tanh(u / linear_beta);
    }
  }
  return y;
}

// |y| <= beta * linear_beta = 100 for K3; fp32 tanhf / expf are within a few ulp each and there
// are three products and a division: a few 1e-7 relative, 1e-5 leaves room without hiding a wrong
// formula (a missing bound or sigmoid moves y by >= 1e-2 relative at these inputs).
constexpr Tolerance kOutputTolerance = {
    .atol = 1e-6, .rtol = 1e-5, .why = "fp32 tanhf / expf within a few ulp, four products"};

/// A bf16 y is the fp32 result rounded once: at most half a bf16 ulp, 2^-8 relative, on top of
/// the fp32 error of kOutputTolerance.
constexpr Tolerance kBf16OutputTolerance = {.atol = 1e-6,
                                            .rtol = 1.0 / 256 + 1e-5,
                                            .why =
                                                "fp32 result (kOutputTolerance) rounded once "
                                                "to bf16: <= 2^-8 relative"};

struct SituCase {
  int64_t T, I;
  GluLayout layout;
  float beta = 4.0f, linear_beta = 25.0f;

  std::string name() const {
    return str_cat("T", T, "_I", I, testing::glu_layout_suffix(layout), "_beta", beta, "_",
                   linear_beta);
  }
};

const SituCase kCases[] = {
    {0, 8, GluLayout::kContiguous},
    {1, 1, GluLayout::kContiguous},
    {1, 17, GluLayout::kStrided},
    {5, 128, GluLayout::kContiguous},
    {33, 37, GluLayout::kStrided},
    {7, 64, GluLayout::kInPlace},
    {1, 33, GluLayout::kInPlace},
    {300, 96, GluLayout::kStrided},
    {9, 40, GluLayout::kContiguous, 1.0f, 3.0f},
    {4, 24, GluLayout::kStrided, 10.0f, 0.5f},
};

TEST(SituGluTest, MatchesFloat64Reference) {
  int seed = 0;
  for (const SituCase& c : kCases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    // std 20: gates and ups well into both tanh bounds (|x| >> beta) as well as near 0
    testing::expect_glu_matches_reference(
        c.T, c.I, c.layout, /*stddev=*/20.0f, rng, kOutputTolerance,
        [&](const TensorView& x, const TensorView& y) {
          return situ_glu({.x = x, .beta = c.beta, .linear_beta = c.linear_beta, .y = y});
        },
        [&](const std::vector<double>& x) {
          return situ_glu_reference(x, c.T, c.I, c.beta, c.linear_beta);
        });
  }
}

TEST(SituGluTest, BoundsAndSaturatesWithoutNaN) {
  // Huge gates and ups: y -> beta * linear_beta * sign(u) (g >> 0) or -0 (g << 0), never NaN or
  // inf. gates [-1e30, 1e30, 100, 0.5], ups [1e30, -1e30, 0.5, 1e-3].
  Tensor x =
      testing::tensor_from({-1e30, 1e30, 100, 0.5, 1e30, -1e30, 0.5, 1e-3}, {1, 8}, DType::kF32);
  Tensor y = testing::poisoned({1, 4}, DType::kF32);
  ASSERT_OK(situ_glu({.x = x, .beta = 4.0f, .linear_beta = 25.0f, .y = y}));
  EXPECT_CLOSE(y, situ_glu_reference(testing::to_f64(x), 1, 4, 4.0, 25.0),
               {.atol = 1e-30, .rtol = 1e-6, .why = "saturated tanh and sigmoid are exact"});
  EXPECT_EQ(testing::to_f64(y)[1], -100.0) << "4 tanh(2.5e29) sigmoid(1e30) * 25 tanh(-4e28)";
}

TEST(SituGluTest, Bf16OutputMatchesFloat64Reference) {
  struct Bf16Case {
    int64_t T, I;
    GluLayout layout;
  };
  const Bf16Case cases[] = {{0, 8, GluLayout::kContiguous},
                            {1, 1, GluLayout::kContiguous},
                            {7, 129, GluLayout::kStrided},
                            {33, 64, GluLayout::kContiguous}};
  int seed = 50;
  for (const Bf16Case& c : cases) {
    SCOPED_TRACE(str_cat("T", c.T, "_I", c.I, testing::glu_layout_suffix(c.layout)));
    std::mt19937 rng(++seed);
    testing::expect_glu_matches_reference(
        c.T, c.I, c.layout, /*stddev=*/20.0f, rng, kBf16OutputTolerance,
        [&](const TensorView& x, const TensorView& y) {
          return situ_glu({.x = x, .beta = 4.0f, .linear_beta = 25.0f, .y = y});
        },
        [&](const std::vector<double>& x) { return situ_glu_reference(x, c.T, c.I, 4.0f, 25.0f); },
        DType::kBF16);
  }
}

TEST(SituGluTest, RejectsBadArguments) {
  std::mt19937 rng(5);
  const int64_t T = 3, I = 4;
  Tensor x = testing::random_normal({T, 2 * I}, DType::kF32, rng);
  Tensor x_odd = testing::random_normal({T, 2 * I + 1}, DType::kF32, rng);
  Tensor x_bf16 = testing::random_normal({T, 2 * I}, DType::kBF16, rng);
  Tensor y = testing::poisoned({T, I}, DType::kF32);
  Tensor y_wide = testing::poisoned({T, 2 * I}, DType::kF32);
  const TensorView y_alias_packed(x.view().raw(), DType::kF32, {T, I});
  // x's memory as a bf16 y with x's row stride (in elements)
  const int64_t y_shape[] = {T, I}, x_row_stride[] = {2 * I, 1};
  const TensorView y_alias_bf16(x.view().raw(), DType::kBF16, 2, y_shape, x_row_stride);
  const SituGluParams good = {.x = x, .beta = 4.0f, .linear_beta = 25.0f, .y = y};

  struct ErrorCase {
    const char* name;
    std::function<void(SituGluParams&)> change;
    const char* error;
  };
  const ErrorCase cases[] = {
      {"x_odd", [&](SituGluParams& p) { p.x = x_odd; },
       "situ_glu: x has shape [3, 9], expected an even last dim (2I: gate then up)"},
      {"y_shape", [&](SituGluParams& p) { p.y = y_wide; },
       "situ_glu: y has shape [3, 8], expected [3, 4] (T, I)"},
      {"x_dtype", [&](SituGluParams& p) { p.x = x_bf16; },
       "situ_glu: x has dtype bf16, expected f32"},
      {"alias_other_stride", [&](SituGluParams& p) { p.y = y_alias_packed; },
       "situ_glu: y aliases x with row stride 4, x has 8; in place needs the same row stride"},
      {"alias_other_dtype", [&](SituGluParams& p) { p.y = y_alias_bf16; },
       "situ_glu: y aliases x with dtype bf16, x has f32; in place needs x's dtype"},
      {"beta_zero", [&](SituGluParams& p) { p.beta = 0.0f; },
       "situ_glu: beta is 0, expected a finite value > 0"},
      {"linear_beta_nan", [&](SituGluParams& p) { p.linear_beta = NAN; },
       "situ_glu: linear_beta is nan, expected a finite value > 0"},
      {"missing_y", [&](SituGluParams& p) { p.y = {}; }, "situ_glu: y is missing"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    SituGluParams p = good;
    c.change(p);
    EXPECT_ERROR_CONTAINS(situ_glu(p), c.error);
  }
  EXPECT_OK(situ_glu(good));
}

}  // namespace
}  // namespace hyla::kernels
