// Dense projection against a float64 reference: f32 / bf16 / f16 weights, with and without bias,
// T = 0, 1 (decode: sgemv) and larger (sgemm), N above the 256-row tile with a short last tile,
// strided x, y as a column slice of a wider buffer; argument errors.
#include "kernels/linear.h"

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

/// y[t, n] = sum_k x[t, k] w[n, k] + bias[n] in float64 (bias may be empty).
std::vector<double> linear_reference(const std::vector<double>& x, const std::vector<double>& w,
                                     const std::vector<double>& bias, int64_t T, int64_t K,
                                     int64_t N) {
  std::vector<double> y(size_t(T * N));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t n = 0; n < N; ++n) {
      double sum = bias.empty() ? 0.0 : bias[size_t(n)];
      for (int64_t k = 0; k < K; ++k) sum += x[size_t(t * K + k)] * w[size_t(n * K + k)];
      y[size_t(t * N + n)] = sum;
    }
  }
  return y;
}

constexpr Tolerance kOutputTolerance = {
    .atol = 2e-5,
    .rtol = 1e-5,
    .why =
        "fp32 dot products of K <= 2048 terms, x ~ N(0, 1), w ~ N(0, 0.1): |y| <= ~5 and BLAS's "
        "blocked sums round by ~sqrt(K) 2^-24 sum |x w| (~1e-6); bf16 / f16 weights widen "
        "exactly and the reference uses the same rounded values"};

struct LinearCase {
  int64_t T, K, N;
  DType weight_dtype;
  bool bias;
  bool strided;  // x rows padded and misaligned, y a column slice of a wider buffer

  std::string name() const {
    return str_cat("T", T, "_K", K, "_N", N, "_w", dtype_name(weight_dtype), bias ? "_bias" : "",
                   strided ? "_strided" : "");
  }
};

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16, kF16 = DType::kF16;
const LinearCase kCases[] = {
    {0, 16, 8, kF32, true, false},     {0, 16, 8, kBF16, true, true},
    {1, 37, 5, kF32, false, false},    {1, 37, 5, kF32, true, true},
    {1, 129, 300, kBF16, true, true},  {1, 64, 513, kF16, false, false},
    {1, 2048, 70, kBF16, true, false}, {2, 33, 17, kF32, true, true},
    {7, 65, 300, kBF16, false, true},  {33, 130, 513, kBF16, true, false},
    {33, 48, 70, kF16, true, true},    {64, 257, 129, kF32, false, true},
    {100, 31, 600, kBF16, true, true},
};

TEST(LinearTest, MatchesFloat64Reference) {
  int seed = 0;
  for (const LinearCase& c : kCases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    const int64_t x_pad = c.strided ? 3 : 0, x_offset = c.strided ? 1 : 0;
    // strided y: columns [2, 2 + N) of a [T, N + 5] buffer
    const int64_t y_pad = c.strided ? 5 : 0, y_offset = c.strided ? 2 : 0;
    Tensor x_storage =
        testing::random_normal({padded_numel({c.T, c.K}, x_pad, x_offset)}, kF32, rng, 0.0f, 1.0f);
    const TensorView x = padded_view(x_storage, {c.T, c.K}, x_pad, x_offset);
    Tensor weight = testing::random_normal({c.N, c.K}, c.weight_dtype, rng, 0.0f, 0.1f);
    Tensor bias;
    if (c.bias) bias = testing::random_normal({c.N}, kF32, rng, 0.0f, 1.0f);
    Tensor y_storage = testing::poisoned({padded_numel({c.T, c.N}, y_pad, y_offset)}, kF32);
    const TensorView y = padded_view(y_storage, {c.T, c.N}, y_pad, y_offset);

    const std::vector<double> want =
        linear_reference(testing::to_f64(x), testing::to_f64(weight),
                         c.bias ? testing::to_f64(bias) : std::vector<double>{}, c.T, c.K, c.N);
    ASSERT_OK(linear({.x = x, .weight = weight, .bias = bias, .y = y}));
    EXPECT_CLOSE(y, want, kOutputTolerance);
    EXPECT_TRUE(testing::untouched_outside(y_storage, y));
  }
}

TEST(LinearTest, DecodeRowMatchesPrefillRow) {
  // the T = 1 path (sgemv, small tiles) and the T > 1 path (sgemm, 256-row tiles) compute the
  // same row up to summation order
  std::mt19937 rng(42);
  const int64_t T = 9, K = 200, N = 260;
  for (DType weight_dtype : {kF32, kBF16, kF16}) {
    SCOPED_TRACE(dtype_name(weight_dtype));
    Tensor x = testing::random_normal({T, K}, kF32, rng);
    Tensor weight = testing::random_normal({N, K}, weight_dtype, rng, 0.0f, 0.1f);
    Tensor y_all = testing::poisoned({T, N}, kF32);
    ASSERT_OK(linear({.x = x, .weight = weight, .y = y_all}));
    for (int64_t t : {int64_t{0}, int64_t{5}, T - 1}) {
      SCOPED_TRACE(str_cat("t = ", t));
      Tensor y_one = testing::poisoned({1, N}, kF32);
      ASSERT_OK(linear({.x = x.view().slice(t, t + 1), .weight = weight, .y = y_one}));
      EXPECT_CLOSE(y_one.view().select(0), testing::to_f64(y_all.view().select(t)),
                   {.atol = 1e-5,
                    .rtol = 1e-5,
                    .why = "same fp32 products, different summation order (sgemv vs sgemm)"});
    }
  }
}

TEST(LinearTest, RejectsBadArguments) {
  std::mt19937 rng(5);
  const int64_t T = 3, K = 8, N = 4;
  Tensor x = testing::random_normal({T, K}, kF32, rng);
  Tensor x_bf16 = testing::random_normal({T, K}, kBF16, rng);
  Tensor weight = testing::random_normal({N, K}, kBF16, rng);
  Tensor weight_short = testing::random_normal({N, K - 1}, kBF16, rng);
  Tensor weight_i32 = Tensor::zeros({N, K}, DType::kI32);
  Tensor weight_empty = Tensor::empty({0, K}, kF32);
  Tensor bias = testing::random_normal({N}, kF32, rng);
  Tensor bias_long = testing::random_normal({N + 1}, kF32, rng);
  Tensor bias_bf16 = testing::random_normal({N}, kBF16, rng);
  Tensor y = testing::poisoned({T, N}, kF32);
  Tensor y_wide = testing::poisoned({T, N + 1}, kF32);
  Tensor y_empty = Tensor::empty({T, 0}, kF32);
  Tensor y_bf16 = testing::poisoned({T, N}, kBF16);
  // a [T, 2K] buffer: the second half of each row as x, the first half as y (no overlap), and a
  // y that overlaps x
  Tensor shared = testing::random_normal({T, 2 * K}, kF32, rng);
  const int64_t x_shape[] = {T, K}, y_shape[] = {T, N}, row_2k[] = {2 * K, 1};
  float* shared_data = shared.data<float>();
  const TensorView x_right(shared_data + K, kF32, 2, x_shape, row_2k);
  const TensorView y_left(shared_data, kF32, 2, y_shape, row_2k);
  const TensorView y_over_x(shared_data + K + 2, kF32, 2, y_shape, row_2k);
  const int64_t weight_shape[] = {N, K}, weight_strides[] = {K + 1, 1};
  Tensor weight_padded = testing::random_normal({N * (K + 1)}, kBF16, rng);
  const TensorView weight_strided(weight_padded.view().raw(), kBF16, 2, weight_shape,
                                  weight_strides);
  const int64_t rows_overlap[] = {K - 1, 1};
  const TensorView x_rows_overlap(x.view().raw(), kF32, 2, x_shape, rows_overlap);
  const TensorView weight_on_cuda(weight.view().raw(), kBF16, {N, K}, Device::cuda(0));
  const LinearParams good = {.x = x, .weight = weight, .bias = bias, .y = y};

  struct ErrorCase {
    const char* name;
    std::function<void(LinearParams&)> change;
    const char* error;
  };
  const ErrorCase cases[] = {
      {"weight_K", [&](LinearParams& p) { p.weight = weight_short; },
       "linear: weight has shape [4, 7], expected [*, 8] (N, K)"},
      {"y_shape", [&](LinearParams& p) { p.y = y_wide; },
       "linear: y has shape [3, 5], expected [3, 4] (T, N)"},
      {"bias_shape", [&](LinearParams& p) { p.bias = bias_long; },
       "linear: bias has shape [5], expected [4] (N)"},
      {"x_dtype", [&](LinearParams& p) { p.x = x_bf16; }, "linear: x has dtype bf16, expected f32"},
      {"y_dtype", [&](LinearParams& p) { p.y = y_bf16; },
       "linear: y has dtype bf16, expected f32"},  // bf16 activations only on CUDA
      {"weight_dtype", [&](LinearParams& p) { p.weight = weight_i32; },
       "linear: weight has dtype i32, expected f32 or bf16 or f16"},
      {"bias_dtype", [&](LinearParams& p) { p.bias = bias_bf16; },
       "linear: bias has dtype bf16, expected f32"},
      {"weight_device", [&](LinearParams& p) { p.weight = weight_on_cuda; },
       "linear: weight is on cuda:0, expected cpu"},
      {"weight_strided", [&](LinearParams& p) { p.weight = weight_strided; },
       "linear: weight [4, 8] must be contiguous: has strides [9, 1], expected [8, 1]"},
      {"no_features",
       [&](LinearParams& p) {
         p.weight = weight_empty;
         p.bias = {};
         p.y = y_empty;
       },
       "linear: weight has shape [0, 8], expected N >= 1 output and K >= 1 input features"},
      {"x_rows_overlap", [&](LinearParams& p) { p.x = x_rows_overlap; },
       "linear: x has row stride 7, expected >= K = 8 (rows must not overlap)"},
      {"y_overlaps_x",
       [&](LinearParams& p) {
         p.x = x_right;
         p.y = y_over_x;
       },
       "linear: y overlaps x"},
      {"missing_y", [&](LinearParams& p) { p.y = {}; }, "linear: y is missing"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    LinearParams p = good;
    c.change(p);
    EXPECT_ERROR_CONTAINS(linear(p), c.error);
  }
  EXPECT_OK(linear(good));
  // two column slices of one buffer that do not share an element are fine
  EXPECT_OK(linear({.x = x_right, .weight = weight, .bias = bias, .y = y_left}));
}

}  // namespace
}  // namespace hyla::kernels
