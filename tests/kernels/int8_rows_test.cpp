// int8 row quantisation against a float64 reference: every element within half a step of its row
// (|q s - x| <= s / 2, i.e. max |x| / 254), the scale max |x| / 127, the largest element at +-127;
// dequantisation y = q s rounded once to y's dtype; zero, NaN and inf rows; strided rows; f32 and
// bf16 on both sides; bad arguments refused.
#include "kernels/int8_rows.h"

#include <cmath>
#include <limits>
#include <random>

#include "testing.h"

namespace hyla::kernels {
namespace {

using testing::to_f64;

/// Quantises `x` (a [R, C] view) into fresh outputs.
struct Quantized {
  Tensor q, scale;
};
Quantized quantize(const TensorView& x) {
  Quantized out{testing::poisoned({x.size(0), x.size(1)}, DType::kI8),
                testing::poisoned({x.size(0)}, DType::kF32)};
  EXPECT_OK(quantize_int8_rows({x, out.q, out.scale}));
  return out;
}

// The quantisation error bound, checked in double against the stored scale s: half a step. The
// slack 2^-16 s covers the fp32 rounding of x / s before it is rounded to an integer (half an ulp
// of a value up to 127, i.e. 2^-17 s at most), which can tip an exact tie the other way.
void expect_within_half_step(const TensorView& x, const Quantized& got) {
  const std::vector<double> xs = to_f64(x), s = to_f64(got.scale);
  const int8_t* q = got.q.host<int8_t>();
  const int64_t R = x.size(0), C = x.size(1);
  for (int64_t r = 0; r < R; ++r) {
    double amax = 0;
    for (int64_t i = 0; i < C; ++i) amax = std::max(amax, std::fabs(xs[size_t(r * C + i)]));
    EXPECT_EQ(float(s[size_t(r)]), float(amax) / 127.0f) << "row " << r;
    EXPECT_NEAR(s[size_t(r)], amax / 127.0, amax / 127.0 * 0x1p-23) << "row " << r;
    int most = 0;
    for (int64_t i = 0; i < C; ++i) {
      const int v = q[r * C + i];
      ASSERT_LE(std::abs(v), 127) << "row " << r << " element " << i;
      most = std::max(most, std::abs(v));
      EXPECT_LE(std::fabs(v * s[size_t(r)] - xs[size_t(r * C + i)]), s[size_t(r)] * (0.5 + 0x1p-16))
          << "row " << r << " element " << i;
    }
    if (amax > 0) {
      EXPECT_EQ(most, 127) << "row " << r << ": the largest element sets the scale";
    }
  }
}

TEST(Int8RowsTest, QuantizesWithinHalfAStep) {
  std::mt19937 rng(11);
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const auto& [R, C] : {std::pair<int64_t, int64_t>{1, 1}, {7, 128}, {33, 300}, {4, 5}}) {
      SCOPED_TRACE(str_cat(dtype_name(dtype), " ", R, "x", C));
      // states span magnitudes: scale rows by powers of ten
      Tensor x = testing::random_normal({R, C}, dtype, rng);
      const std::vector<double> v = to_f64(x);
      std::vector<double> scaled(v.size());
      for (int64_t r = 0; r < R; ++r)
        for (int64_t i = 0; i < C; ++i)
          scaled[size_t(r * C + i)] = v[size_t(r * C + i)] * std::pow(10.0, double(r % 7) - 3);
      x = testing::tensor_from(scaled, {R, C}, dtype);
      expect_within_half_step(x, quantize(x));
    }
  }
}

TEST(Int8RowsTest, DequantizesOnceToTheOutputDtype) {
  std::mt19937 rng(12);
  const Tensor x = testing::random_normal({9, 70}, DType::kF32, rng);
  const Quantized qs = quantize(x);
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor y = testing::poisoned({9, 70}, dtype);
    ASSERT_OK(dequantize_int8_rows({qs.q, qs.scale, y}));
    std::vector<double> want(9 * 70);
    for (int64_t r = 0; r < 9; ++r)
      for (int64_t i = 0; i < 70; ++i)
        want[size_t(r * 70 + i)] =
            double(float(qs.q.host<int8_t>()[r * 70 + i]) * qs.scale.host<float>()[r]);
    // exact: one fp32 product, then the output's own rounding (tensor_from rounds the same way)
    EXPECT_CLOSE(y, to_f64(testing::tensor_from(want, {9, 70}, dtype)),
                 {0, 0, "one product rounded once"});
  }
}

TEST(Int8RowsTest, StridedRows) {
  std::mt19937 rng(13);
  const Tensor wide = testing::random_uniform({6, 50}, DType::kF32, rng);
  const TensorView x = TensorView(wide).narrow(1, 3, 40);  // row stride 50
  const Quantized got = quantize(x);
  expect_within_half_step(x, got);
  Tensor out = testing::poisoned({6, 50}, DType::kF32);
  const TensorView y = TensorView(out).narrow(1, 5, 40);
  ASSERT_OK(dequantize_int8_rows({got.q, got.scale, y}));
  const std::vector<double> ys = to_f64(y), xs = to_f64(x);
  for (size_t i = 0; i < xs.size(); ++i)
    EXPECT_LE(std::fabs(ys[i] - xs[i]), got.scale.host<float>()[i / 40] * (0.5 + 0x1p-16));
}

TEST(Int8RowsTest, ZeroAndNonFiniteRows) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = testing::tensor_from({0, 0, 0, 1, nan, 2, -inf, 1, 1}, {3, 3}, DType::kF32);
  const Quantized got = quantize(x);
  EXPECT_EQ(got.scale.host<float>()[0], 0.0f);
  EXPECT_TRUE(std::isnan(got.scale.host<float>()[1]));
  EXPECT_TRUE(std::isnan(got.scale.host<float>()[2]));
  for (int i = 0; i < 9; ++i) EXPECT_EQ(got.q.host<int8_t>()[i], 0) << i;
  Tensor y = testing::poisoned({3, 3}, DType::kF32);
  ASSERT_OK(dequantize_int8_rows({got.q, got.scale, y}));
  const std::vector<double> ys = to_f64(y);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ys[size_t(i)], 0.0) << i;
  for (int i = 3; i < 9; ++i) EXPECT_TRUE(std::isnan(ys[size_t(i)])) << "a non-finite row, " << i;
}

TEST(Int8RowsTest, BadArgumentsAreRefused) {
  const Tensor x = Tensor::zeros({4, 8}, DType::kF32);
  const Tensor q = Tensor::zeros({4, 8}, DType::kI8), scale = Tensor::zeros({4}, DType::kF32);
  auto refused = [](const Status& s, const char* what) {
    EXPECT_FALSE(s.ok()) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  refused(quantize_int8_rows({Tensor::zeros({4, 8}, DType::kI32), q, scale}), "x");
  refused(quantize_int8_rows({x, Tensor::zeros({4, 7}, DType::kI8), scale}), "q");
  refused(quantize_int8_rows({x, Tensor::zeros({4, 8}, DType::kF32), scale}), "q");
  refused(quantize_int8_rows({x, q, Tensor::zeros({5}, DType::kF32)}), "scale");
  refused(quantize_int8_rows({TensorView(x).reshape({32}), q, scale}), "x");
  refused(dequantize_int8_rows({q, Tensor::zeros({4}, DType::kBF16), x}), "scale");
  refused(dequantize_int8_rows({q, scale, Tensor::zeros({4, 8}, DType::kI8)}), "y");
}

}  // namespace
}  // namespace hyla::kernels
