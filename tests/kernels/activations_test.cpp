// l2norm and the elementwise activations against float64 references: f32 / bf16 / f16 in and out,
// 1-4 dims, strided and misaligned views, in place; zero rows, softplus's threshold, saturation,
// and argument errors.
#include "kernels/activations.h"

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

// ---- float64 references ----

std::vector<double> l2norm_reference(const std::vector<double>& x, int64_t n, double eps) {
  std::vector<double> y(x.size());
  for (size_t row = 0; row < x.size() / size_t(n); ++row) {
    double sum_sq = 0;
    for (int64_t i = 0; i < n; ++i)
      sum_sq += x[row * size_t(n) + size_t(i)] * x[row * size_t(n) + size_t(i)];
    for (int64_t i = 0; i < n; ++i)
      y[row * size_t(n) + size_t(i)] = x[row * size_t(n) + size_t(i)] / std::sqrt(sum_sq + eps);
  }
  return y;
}

double activation_reference(Activation act, double x) {
  switch (act) {
    case Activation::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
    case Activation::kSoftplus:
      return x > 20.0 ? x : std::log1p(std::exp(x));  // torch threshold 20
    case Activation::kSilu: return x / (1.0 + std::exp(-x));
  }
  return 0;
}

const char* activation_name(Activation act) {
  switch (act) {
    case Activation::kSigmoid: return "sigmoid";
    case Activation::kSoftplus: return "softplus";
    case Activation::kSilu: return "silu";
  }
  return "?";
}

Tolerance output_tolerance(DType y_dtype) {
  switch (y_dtype) {
    case DType::kBF16:
      return {
          .atol = 1e-6,
          .rtol = 5e-3,
          .why = "bf16 output: rounding is half an ulp, 2^-8 relative; fp32 compute adds ~1e-6"};
    case DType::kF16:
      return {
          .atol = 1e-6,
          .rtol = 1e-3,
          .why = "f16 output: rounding is half an ulp, 2^-11 relative; fp32 compute adds ~1e-6"};
    default:
      return {.atol = 1e-6,
              .rtol = 1e-5,
              .why =
                  "fp32 compute: expf / log1pf / sqrtf within a few ulp; a row sum of <= 128 "
                  "squares adds at most 128 * 2^-24 relative, halved by the square root"};
  }
}

// ---- cases ----

struct ElementwiseCase {
  std::vector<int64_t> shape;
  DType x_dtype;
  DType y_dtype;
  int64_t pad = 0;     // extra elements per row of storage: > 0 makes strided views
  int64_t offset = 0;  // first element's offset in storage: odd values misalign the view
  bool in_place = false;

  std::string name() const {
    std::string s = "shape";
    for (size_t d = 0; d < shape.size(); ++d) s += str_cat(d ? "x" : "", shape[d]);
    s += str_cat("_", dtype_name(x_dtype), "_to_", dtype_name(y_dtype));
    if (pad) s += str_cat("_pad", pad);
    if (offset) s += str_cat("_offset", offset);
    if (in_place) s += "_inplace";
    return s;
  }
};

const ElementwiseCase kCases[] = {
    {{37}, DType::kF32, DType::kF32},
    {{1, 1}, DType::kF32, DType::kF32},
    {{5, 128}, DType::kBF16, DType::kBF16},
    {{7, 64}, DType::kBF16, DType::kF32, 2, 1},
    {{3, 2, 33}, DType::kF32, DType::kBF16, 3, 1},
    {{2, 3, 4, 17}, DType::kF16, DType::kF32, 5},
    {{9, 3, 16}, DType::kF32, DType::kF16, 1, 3},
    {{6, 31}, DType::kF32, DType::kF32, 1, 0, true},
    {{4, 2, 19}, DType::kBF16, DType::kBF16, 0, 0, true},
};

/// Inputs drawn from [lo, hi) into a (possibly strided) view, and a poisoned output view of the
/// same shape (or the input itself when in place).
struct ElementwiseTensors {
  Tensor x_storage, y_storage;
  TensorView x, y;
};

ElementwiseTensors make_tensors(const ElementwiseCase& c, std::mt19937& rng, float lo, float hi) {
  ElementwiseTensors t;
  const int64_t numel = padded_numel(c.shape, c.pad, c.offset);
  t.x_storage = testing::random_uniform({numel}, c.x_dtype, rng, lo, hi);
  t.x = padded_view(t.x_storage, c.shape, c.pad, c.offset);
  if (c.in_place) {
    t.y = t.x;
  } else {
    t.y_storage = testing::poisoned({numel}, c.y_dtype);
    t.y = padded_view(t.y_storage, c.shape, c.pad, c.offset);
  }
  return t;
}

// ---- l2norm ----

TEST(L2NormTest, MatchesFloat64Reference) {
  int seed = 0;
  for (const ElementwiseCase& c : kCases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    ElementwiseTensors t = make_tensors(c, rng, -1.0f, 1.0f);
    const std::vector<double> want = l2norm_reference(testing::to_f64(t.x), c.shape.back(), 1e-6);
    ASSERT_OK(l2norm(t.x, t.y));
    EXPECT_CLOSE(t.y, want, output_tolerance(c.y_dtype));
    if (!c.in_place) {
      EXPECT_TRUE(testing::untouched_outside(t.y_storage, t.y));
    }
  }
}

TEST(L2NormTest, ZeroRowStaysZeroAndFinite) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    // rows: zeros, a tiny nonzero row (sum of squares far below eps), an ordinary row
    Tensor x = testing::tensor_from({0, 0, 0, 0, 1e-30, 0, -1e-30, 0, 3, 0, -4, 0}, {3, 4}, dtype);
    Tensor y = testing::poisoned({3, 4}, dtype);
    ASSERT_OK(l2norm(x, y));
    const std::vector<double> got = testing::to_f64(y);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got[size_t(i)], 0.0) << "zero row, i = " << i;
    for (int i = 4; i < 8; ++i) EXPECT_TRUE(std::isfinite(got[size_t(i)])) << "tiny row, i = " << i;
    EXPECT_CLOSE(y.view().select(2), std::vector<double>{0.6, 0, -0.8, 0},
                 {.atol = 0,
                  .rtol = 4e-3,
                  .why = "3-4-5 row: bf16 rounds 0.6 and 0.8 by up to 2^-8 relative"});
  }
}

// ---- activations ----

TEST(ActivationTest, MatchesFloat64Reference) {
  int seed = 100;
  for (Activation act : {Activation::kSigmoid, Activation::kSoftplus, Activation::kSilu}) {
    for (const ElementwiseCase& c : kCases) {
      SCOPED_TRACE(std::string(activation_name(act)) + "_" + c.name());
      std::mt19937 rng(++seed);
      ElementwiseTensors t = make_tensors(c, rng, -8.0f, 8.0f);
      std::vector<double> want = testing::to_f64(t.x);
      for (double& v : want) v = activation_reference(act, v);
      ASSERT_OK(activation(act, t.x, t.y));
      EXPECT_CLOSE(t.y, want, output_tolerance(c.y_dtype));
      if (!c.in_place) {
        EXPECT_TRUE(testing::untouched_outside(t.y_storage, t.y));
      }
    }
  }
}

TEST(ActivationTest, SoftplusPassesInputsAboveTwentyThrough) {
  // torch's softplus(threshold=20) returns x itself above 20, so huge inputs stay finite instead of
  // log1p(exp(x)) overflowing to inf
  const std::vector<double> above = {20.5, 25, 88.8, 100, 1e4, 1e30};
  Tensor x = testing::tensor_from(above, {int64_t(above.size())}, DType::kF32);
  Tensor y = testing::poisoned({int64_t(above.size())}, DType::kF32);
  ASSERT_OK(activation(Activation::kSoftplus, x, y));
  for (size_t i = 0; i < above.size(); ++i)
    EXPECT_EQ(y.data<float>()[i], x.data<float>()[i]) << "x = " << above[i];

  // below the threshold: log1p(exp(x)), accurate down to exp(x) near fp32's smallest normal
  const std::vector<double> below = {-80, -20, -1, 0, 1, 19.5};
  Tensor x_below = testing::tensor_from(below, {int64_t(below.size())}, DType::kF32);
  Tensor y_below = testing::poisoned({int64_t(below.size())}, DType::kF32);
  ASSERT_OK(activation(Activation::kSoftplus, x_below, y_below));
  std::vector<double> want;
  for (double v : below) want.push_back(std::log1p(std::exp(v)));
  EXPECT_CLOSE(y_below, want,
               {.atol = 0, .rtol = 1e-6, .why = "expf then log1pf, each within ~1 ulp (6e-8)"});
}

TEST(ActivationTest, SaturatesWithoutNaN) {
  const std::vector<double> x_values = {-1e30, -1e4, -100, 100, 1e4, 1e30};
  Tensor x = testing::tensor_from(x_values, {int64_t(x_values.size())}, DType::kF32);
  for (Activation act : {Activation::kSigmoid, Activation::kSoftplus, Activation::kSilu}) {
    SCOPED_TRACE(activation_name(act));
    Tensor y = testing::poisoned({int64_t(x_values.size())}, DType::kF32);
    ASSERT_OK(activation(act, x, y));
    std::vector<double> want;
    for (double v : x_values) want.push_back(activation_reference(act, v));
    EXPECT_CLOSE(y, want,
                 {.atol = 1e-30,
                  .rtol = 1e-6,
                  .why = "saturated values are exactly 0, 1 or x; 1e-30 absorbs e^-100"});
  }
}

// ---- argument errors ----

TEST(ElementwiseTest, RejectsBadArguments) {
  std::mt19937 rng(7);
  Tensor x = testing::random_uniform({4, 8}, DType::kF32, rng);
  Tensor y = testing::poisoned({4, 8}, DType::kF32);
  Tensor y_wide = testing::poisoned({4, 9}, DType::kF32);
  Tensor y_bf16 = testing::poisoned({4, 8}, DType::kBF16);
  Tensor x_i32 = Tensor::zeros({4, 8}, DType::kI32);
  Tensor x_5d = testing::random_uniform({1, 1, 1, 2, 8}, DType::kF32, rng);
  const int64_t shape[] = {4, 4}, every_other[] = {8, 2};
  const TensorView x_strided_last(x.view().raw(), DType::kF32, 2, shape, every_other);
  const TensorView y_on_cuda(y.view().raw(), DType::kF32, {4, 8}, Device::cuda(0));
  // x and y share data but y claims bf16: an in-place call with two layouts
  const TensorView x_as_bf16(x.view().raw(), DType::kBF16, {4, 8});

  struct ErrorCase {
    const char* name;
    std::function<Status()> call;
    const char* error;
  };
  const ErrorCase cases[] = {
      {"y_shape", [&] { return l2norm(x, y_wide); },
       "l2norm: y has shape [4, 9], expected [4, 8] (the shape of x)"},
      {"five_dims", [&] { return activation(Activation::kSilu, x_5d, x_5d); },
       "activation(silu): x has shape [1, 1, 1, 2, 8], expected 1 to 4 dims"},
      {"x_dtype", [&] { return activation(Activation::kSigmoid, x_i32, y); },
       "activation(sigmoid): x has dtype i32, expected f32 or bf16 or f16"},
      {"last_dim_strided", [&] { return l2norm(x_strided_last, x_strided_last); },
       "l2norm: x must have a contiguous last dimension"},
      {"y_device", [&] { return activation(Activation::kSoftplus, x, y_on_cuda); },
       "activation(softplus): y is on cuda:0, expected cpu"},
      {"eps_zero", [&] { return l2norm(x, y, 0.0f); },
       "l2norm: eps is 0, expected a finite value > 0"},
      {"eps_nan", [&] { return l2norm(x, y, std::numeric_limits<float>::quiet_NaN()); },
       "l2norm: eps is nan"},
      {"alias_two_dtypes", [&] { return l2norm(x, x_as_bf16); },
       "l2norm: y aliases x with a different dtype or strides"},
      {"missing_y", [&] { return l2norm(x, TensorView()); }, "l2norm: y is missing"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_ERROR_CONTAINS(c.call(), c.error);
  }
  EXPECT_OK(l2norm(x, y_bf16));  // different dtypes are fine when y does not alias x
}

}  // namespace
}  // namespace hyla::kernels
