// SwiGLU against a float64 reference: odd I, T = 0, 1 and larger, strided and misaligned x, y as a
// column slice of a wider buffer, in place over x's gate half; argument errors.
#include "kernels/swiglu.h"

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

/// y[t, i] = silu(x[t, i]) * x[t, I + i] in float64; x is [T, 2I] row-major.
std::vector<double> swiglu_reference(const std::vector<double>& x, int64_t T, int64_t I) {
  std::vector<double> y(size_t(T * I));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < I; ++i) {
      const double gate = x[size_t(t * 2 * I + i)], up = x[size_t(t * 2 * I + I + i)];
      y[size_t(t * I + i)] = gate / (1.0 + std::exp(-gate)) * up;
    }
  }
  return y;
}

constexpr Tolerance kOutputTolerance = {
    .atol = 1e-6, .rtol = 1e-5, .why = "fp32 expf within a few ulp, one division and two products"};

/// A bf16 y is the fp32 result rounded once: at most half a bf16 ulp, 2^-8 relative, on top of
/// the fp32 error of kOutputTolerance.
constexpr Tolerance kBf16OutputTolerance = {.atol = 1e-6,
                                            .rtol = 1.0 / 256 + 1e-5,
                                            .why =
                                                "fp32 result (kOutputTolerance) rounded once "
                                                "to bf16: <= 2^-8 relative"};

struct SwigluCase {
  int64_t T, I;
  GluLayout layout;

  std::string name() const { return str_cat("T", T, "_I", I, testing::glu_layout_suffix(layout)); }
};

const SwigluCase kCases[] = {
    {0, 8, GluLayout::kContiguous},   {1, 1, GluLayout::kContiguous}, {1, 17, GluLayout::kStrided},
    {5, 128, GluLayout::kContiguous}, {33, 37, GluLayout::kStrided},  {7, 64, GluLayout::kInPlace},
    {1, 33, GluLayout::kInPlace},     {300, 96, GluLayout::kStrided},
};

TEST(SwigluTest, MatchesFloat64Reference) {
  int seed = 0;
  for (const SwigluCase& c : kCases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    testing::expect_glu_matches_reference(
        c.T, c.I, c.layout, /*stddev=*/3.0f, rng, kOutputTolerance,
        [](const TensorView& x, const TensorView& y) { return swiglu({.x = x, .y = y}); },
        [&](const std::vector<double>& x) { return swiglu_reference(x, c.T, c.I); });
  }
}

TEST(SwigluTest, SaturatesWithoutNaN) {
  // silu(-1e30) * up = -0 * up and silu(1e30) * up = 1e30 * up: no inf / inf or 0 * inf
  Tensor x = testing::tensor_from({-1e30, -100, 100, 1e3, 2, 3, 0.5, 1e-3}, {1, 8}, DType::kF32);
  Tensor y = testing::poisoned({1, 4}, DType::kF32);
  ASSERT_OK(swiglu({.x = x, .y = y}));
  EXPECT_CLOSE(y, swiglu_reference(testing::to_f64(x), 1, 4),
               {.atol = 1e-30, .rtol = 1e-6, .why = "saturated silu is exactly 0 or x"});
}

TEST(SwigluTest, Bf16OutputMatchesFloat64Reference) {
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
        c.T, c.I, c.layout, /*stddev=*/3.0f, rng, kBf16OutputTolerance,
        [&](const TensorView& x, const TensorView& y) { return swiglu({.x = x, .y = y}); },
        [&](const std::vector<double>& x) { return swiglu_reference(x, c.T, c.I); }, DType::kBF16);
  }
}

TEST(SwigluTest, RejectsBadArguments) {
  std::mt19937 rng(5);
  const int64_t T = 3, I = 4;
  Tensor x = testing::random_normal({T, 2 * I}, DType::kF32, rng);
  Tensor x_odd = testing::random_normal({T, 2 * I + 1}, DType::kF32, rng);
  Tensor x_bf16 = testing::random_normal({T, 2 * I}, DType::kBF16, rng);
  Tensor x_3d = testing::random_normal({T, 1, 2 * I}, DType::kF32, rng);
  Tensor y = testing::poisoned({T, I}, DType::kF32);
  Tensor y_wide = testing::poisoned({T, 2 * I}, DType::kF32);
  const TensorView y_on_cuda(y.view().raw(), DType::kF32, {T, I}, Device::cuda(0));
  // x's memory as a contiguous [T, I] y: same pointer, row stride I instead of 2I
  const TensorView y_alias_packed(x.view().raw(), DType::kF32, {T, I});
  // x's memory as a bf16 y with x's row stride (in elements)
  const int64_t y_shape[] = {T, I}, x_row_stride[] = {2 * I, 1};
  const TensorView y_alias_bf16(x.view().raw(), DType::kBF16, 2, y_shape, x_row_stride);
  const SwigluParams good = {.x = x, .y = y};

  struct ErrorCase {
    const char* name;
    std::function<void(SwigluParams&)> change;
    const char* error;
  };
  const ErrorCase cases[] = {
      {"x_rank", [&](SwigluParams& p) { p.x = x_3d; },
       "swiglu: x has shape [3, 1, 8], expected [*, *] (T, 2I)"},
      {"x_odd", [&](SwigluParams& p) { p.x = x_odd; },
       "swiglu: x has shape [3, 9], expected an even last dim (2I: gate then up)"},
      {"y_shape", [&](SwigluParams& p) { p.y = y_wide; },
       "swiglu: y has shape [3, 8], expected [3, 4] (T, I)"},
      {"x_dtype", [&](SwigluParams& p) { p.x = x_bf16; }, "swiglu: x has dtype bf16, expected f32"},
      {"y_device", [&](SwigluParams& p) { p.y = y_on_cuda; },
       "swiglu: y is on cuda:0, expected cpu"},
      {"alias_other_stride", [&](SwigluParams& p) { p.y = y_alias_packed; },
       "swiglu: y aliases x with row stride 4, x has 8; in place needs the same row stride"},
      {"alias_other_dtype", [&](SwigluParams& p) { p.y = y_alias_bf16; },
       "swiglu: y aliases x with dtype bf16, x has f32; in place needs x's dtype"},
      {"missing_y", [&](SwigluParams& p) { p.y = {}; }, "swiglu: y is missing"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    SwigluParams p = good;
    c.change(p);
    EXPECT_ERROR_CONTAINS(swiglu(p), c.error);
  }
  EXPECT_OK(swiglu(good));
}

}  // namespace
}  // namespace hyla::kernels
