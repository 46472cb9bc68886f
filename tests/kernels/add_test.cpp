// Scaled residual add y += s_t x: with scale 1 and no gate exactly fp32 y + x (the model's
// residual), other scales one fma, the per-row sigmoid gate against float64, strided rows, in
// place; bad arguments are refused.
#include "kernels/add.h"

#include <cmath>
#include <random>

#include "strided_views.h"
#include "testing.h"

namespace hyla::kernels {
namespace {

using testing::padded_numel;
using testing::padded_view;
using testing::Tolerance;

struct AddCase {
  int64_t T, W;
  float scale;
  bool gate;
  int64_t pad;
  bool in_place;
  std::string name() const {
    return str_cat("T", T, "_W", W, "_scale", scale, gate ? "_gate" : "", "_pad", pad,
                   in_place ? "_inplace" : "");
  }
};

/// want = y + s_t x in float64, s_t = scale (* sigmoid(gate[t])); with s_t = 1 the fp32 sum.
std::vector<double> add_reference(const TensorView& x, const TensorView& y, const TensorView& gate,
                                  double scale) {
  const std::vector<double> xs = testing::to_f64(x), ys = testing::to_f64(y);
  const std::vector<double> gs = gate.defined() ? testing::to_f64(gate) : std::vector<double>();
  const size_t W = size_t(x.size(1));
  std::vector<double> want(ys.size());
  for (size_t i = 0; i < ys.size(); ++i) {
    const double s = gate.defined() ? scale / (1.0 + std::exp(-gs[i / W])) : scale;
    // scale 1 without a gate: the fp32 sum y + x itself (what the model's residual was)
    want[i] =
        !gate.defined() && scale == 1.0 ? double(float(ys[i]) + float(xs[i])) : ys[i] + s * xs[i];
  }
  return want;
}

Tolerance add_tolerance(const AddCase& c) {
  if (!c.gate && c.scale == 1.0f)
    return {.atol = 0, .rtol = 0, .why = "fma(1, x, y) rounds the exact sum once: the fp32 y + x"};
  if (!c.gate)
    return {.atol = 0, .rtol = 6e-8, .why = "one fma: the exact s x + y rounded once (2^-24)"};
  return {.atol = 1e-6,
          .rtol = 1.2e-7,
          .why =
              "fp32 sigmoid (expf, a divide: a few ulp of s <= |scale|) times |x| <= 1, and "
              "the fma's rounding"};
}

TEST(AddTest, MatchesFloat64) {
  const AddCase cases[] = {
      {7, 45, 1.0f, false, 0, false},   {7, 45, 1.0f, false, 3, false},
      {5, 130, -0.5f, false, 2, false}, {9, 33, 1.0f, true, 0, false},
      {9, 33, 2.5f, true, 4, false},    {6, 64, 1.0f, false, 0, true},
      {6, 17, 0.75f, true, 1, true},    {0, 8, 1.0f, true, 0, false},
  };
  std::mt19937 rng(13);
  for (const AddCase& c : cases) {
    SCOPED_TRACE(c.name());
    Tensor x_storage =
        testing::random_uniform({padded_numel({c.T, c.W}, c.pad, 1)}, DType::kF32, rng);
    const TensorView x = padded_view(x_storage, {c.T, c.W}, c.pad, 1);
    Tensor y_storage = testing::poisoned({padded_numel({c.T, c.W}, c.pad + 1, 0)}, DType::kF32);
    TensorView y = padded_view(y_storage, {c.T, c.W}, c.pad + 1, 0);
    Tensor y_init = testing::random_uniform({c.T, c.W}, DType::kF32, rng);
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t i = 0; i < c.W; ++i)
        y.data<float>()[t * y.stride(0) + i] = y_init.data<float>()[t * c.W + i];
    if (c.in_place) y = x;
    // gate [T] with stride 2: a column of a [T, 2] projection output
    Tensor gate_storage = testing::random_uniform({2 * c.T}, DType::kF32, rng, -4.0f, 4.0f);
    const int64_t gate_shape[] = {c.T}, gate_stride[] = {2};
    const TensorView gate =
        c.gate ? TensorView(gate_storage.view().raw(), DType::kF32, 1, gate_shape, gate_stride)
               : TensorView();
    const std::vector<double> want = add_reference(x, y, gate, c.scale);
    ASSERT_OK(add({.x = x, .gate = gate, .scale = c.scale, .y = y}));
    EXPECT_CLOSE(y, want, add_tolerance(c));
    if (!c.in_place) {
      EXPECT_TRUE(testing::untouched_outside(y_storage, y));
    }
  }
}

TEST(AddTest, RefusesBadArguments) {
  Tensor x = Tensor::zeros({3, 4}, DType::kF32);
  Tensor y = Tensor::zeros({3, 4}, DType::kF32);
  Tensor gate4 = Tensor::zeros({4}, DType::kF32);
  EXPECT_ERROR_CONTAINS(add({.x = x, .gate = gate4, .scale = 1.0f, .y = y}),
                        "gate has shape [4], expected [3]");
  Tensor x_bf16 = Tensor::zeros({3, 4}, DType::kBF16);
  EXPECT_ERROR_CONTAINS(add({.x = x_bf16, .gate = {}, .scale = 1.0f, .y = y}),
                        "x has dtype bf16, expected f32");
  Tensor x_wide = Tensor::zeros({3, 5}, DType::kF32);
  EXPECT_ERROR_CONTAINS(add({.x = x_wide, .gate = {}, .scale = 1.0f, .y = y}),
                        "x has shape [3, 5], expected [3, 4]");
  EXPECT_ERROR_CONTAINS(add({.x = x, .gate = {}, .scale = NAN, .y = y}), "expected a finite value");
}

}  // namespace
}  // namespace hyla::kernels
