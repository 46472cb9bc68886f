// Partial NeoX rotary embedding against float64 references: one that rounds inv_freq and the
// angle in fp32 as HF does (tight tolerance, positions up to 131071) and one exact in float64
// (small positions); rotary_dim from 2 to head_dim, odd head_dim, strided views; pass-through dims
// unchanged; argument errors.
#include "kernels/rope.h"

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

enum class AngleRounding {
  kHfFloat32,  // inv_freq and pos * inv_freq rounded to fp32 as HF computes them
  kExact,      // everything in float64
};

/// x [T, heads, head_dim] (row-major values) rotated on its first rotary_dim dims; cos, sin and
/// the rotation in float64, the angle rounded as `rounding` says.
std::vector<double> rope_reference(std::vector<double> x, const std::vector<int32_t>& positions,
                                   int64_t heads, int64_t head_dim, int64_t rotary_dim, float theta,
                                   AngleRounding rounding) {
  const int64_t half = rotary_dim / 2;
  for (size_t t = 0; t < positions.size(); ++t) {
    for (int64_t i = 0; i < half; ++i) {
      double angle;
      if (rounding == AngleRounding::kHfFloat32) {
        // HF: 1.0 / (theta ** (arange(0, dim, 2).float() / dim)), then an fp32 outer product
        const float inv_freq = 1.0f / std::pow(theta, float(2 * i) / float(rotary_dim));
        angle = double(float(positions[t]) * inv_freq);
      } else {
        angle = double(positions[t]) * std::pow(double(theta), -double(2 * i) / double(rotary_dim));
      }
      const double c = std::cos(angle), s = std::sin(angle);
      for (int64_t h = 0; h < heads; ++h) {
        double* row = x.data() + (int64_t(t) * heads + h) * head_dim;
        const double x1 = row[i], x2 = row[i + half];
        row[i] = x1 * c - x2 * s;
        row[i + half] = x2 * c + x1 * s;
      }
    }
  }
  return x;
}

/// Writes N(0, 1) values (rounded to f32) into every element of `view`, which lies in `storage`.
void fill_normal(const Tensor& storage, const TensorView& view, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t offset : testing::element_offsets(storage, view))
    storage.data<float>()[offset] = dist(rng);
}

struct RopeCase {
  int64_t T, heads, head_dim, rotary_dim;
  float theta;
  std::vector<int32_t> positions;  // empty: past, past + 1, ... with past = 0
  int64_t pad = 0;                 // extra elements per [head_dim] row: > 0 makes strided views
  int64_t offset = 0;              // first element's offset in storage

  std::string name() const {
    return str_cat("T", T, "_heads", heads, "_hd", head_dim, "_rot", rotary_dim, "_theta", theta,
                   positions.empty() ? "" : "_far", pad ? str_cat("_pad", pad) : "",
                   offset ? str_cat("_at", offset) : "");
  }

  std::vector<int32_t> position_values() const {
    if (!positions.empty()) return positions;
    std::vector<int32_t> values(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) values[size_t(t)] = int32_t(t);
    return values;
  }
};

const RopeCase kCases[] = {
    {0, 2, 8, 8, 1e4f, {}},
    {1, 1, 8, 8, 1e4f, {}},   // position 0: identity
    {7, 4, 32, 8, 1e4f, {}},  // Qwen3-Next: head_dim 32, partial_rotary_factor 0.25
    {5, 3, 64, 64, 1e6f, {4095, 65535, 131071, 7, 100000}},
    {4, 2, 256, 64, 1e7f, {12345, 99999, 3, 50000}},  // Qwen3-Next 80B: hd 256, theta 1e7
    {33, 2, 48, 16, 1e4f, {}, 48, 0},                 // x = q half of a [T, heads, 2 hd] buffer
    {9, 3, 37, 10, 5e5f, {}, 3, 1},
    {3, 2, 16, 2, 1e4f, {1000, 2000, 3000}, 1, 3},
};

TEST(RopeTest, MatchesHfFloat32Angles) {
  int seed = 0;
  for (const RopeCase& c : kCases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    const std::vector<int64_t> shape = {c.T, c.heads, c.head_dim};
    // poisoned storage with random values in the view: the rest must stay poisoned
    Tensor storage = testing::poisoned({padded_numel(shape, c.pad, c.offset)}, DType::kF32);
    const TensorView x = padded_view(storage, shape, c.pad, c.offset);
    fill_normal(storage, x, rng);
    const std::vector<int32_t> positions = c.position_values();
    Tensor positions_tensor = testing::int32_tensor(positions);
    const std::vector<double> x_before = testing::to_f64(x);
    const std::vector<double> want = rope_reference(
        x_before, positions, c.heads, c.head_dim, c.rotary_dim, c.theta, AngleRounding::kHfFloat32);
    ASSERT_OK(rope(
        {.x = x, .positions = positions_tensor, .rotary_dim = c.rotary_dim, .theta = c.theta}));
    EXPECT_CLOSE(x, want,
                 {.atol = 1e-6,
                  .rtol = 1e-6,
                  .why = "same fp32 angle as HF; cosf / sinf within ~1 ulp and two fp32 products "
                         "and a sum of |x| <= ~5 values"});
    EXPECT_TRUE(testing::untouched_outside(storage, x));
    // dims past rotary_dim pass through bit for bit
    const std::vector<double> got = testing::to_f64(x);
    for (size_t row = 0; row < size_t(c.T * c.heads); ++row) {
      for (int64_t i = c.rotary_dim; i < c.head_dim; ++i) {
        const size_t at = row * size_t(c.head_dim) + size_t(i);
        ASSERT_EQ(got[at], x_before[at]) << "row " << row << ", dim " << i;
      }
    }
  }
}

TEST(RopeTest, MatchesExactFloat64AtSmallPositions) {
  // positions < 64: the fp32 angle's rounding (<= 64 * 2^-24 relative ~ 4e-6 absolute) is the
  // only difference from exact math
  std::mt19937 rng(77);
  const int64_t T = 64, heads = 2, head_dim = 24, rotary_dim = 24;
  Tensor x = testing::random_normal({T, heads, head_dim}, DType::kF32, rng);
  std::vector<int32_t> positions(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) positions[size_t(t)] = int32_t(t);
  Tensor positions_tensor = testing::int32_tensor(positions);
  const std::vector<double> want = rope_reference(testing::to_f64(x), positions, heads, head_dim,
                                                  rotary_dim, 1e4f, AngleRounding::kExact);
  ASSERT_OK(rope({.x = x, .positions = positions_tensor, .rotary_dim = rotary_dim}));
  EXPECT_CLOSE(x, want,
               {.atol = 3e-5,
                .rtol = 1e-5,
                .why = "fp32 angle off by <= 64 * 2^-23 ~ 8e-6, times |x| <= ~4 from the "
                       "rotation"});
}

TEST(RopeTest, RejectsBadArguments) {
  std::mt19937 rng(5);
  const int64_t T = 3, heads = 2, head_dim = 16;
  Tensor x = testing::random_normal({T, heads, head_dim}, DType::kF32, rng);
  Tensor x_bf16 = testing::random_normal({T, heads, head_dim}, DType::kBF16, rng);
  Tensor x_2d = testing::random_normal({T, heads * head_dim}, DType::kF32, rng);
  Tensor positions = testing::int32_tensor({0, 1, 2});
  Tensor positions_short = testing::int32_tensor({0, 1});
  Tensor positions_negative = testing::int32_tensor({0, -1, 2});
  Tensor positions_i64 = Tensor::zeros({T}, DType::kI64);
  const TensorView positions_on_cuda(positions.view().raw(), DType::kI32, {T}, Device::cuda(0));
  const RopeParams good = {.x = x, .positions = positions, .rotary_dim = 8, .theta = 1e4f};

  struct ErrorCase {
    const char* name;
    std::function<void(RopeParams&)> change;
    const char* error;
  };
  const ErrorCase cases[] = {
      {"x_rank", [&](RopeParams& p) { p.x = x_2d; },
       "rope: x has shape [3, 32], expected [*, *, *] (T, heads, head_dim)"},
      {"x_dtype", [&](RopeParams& p) { p.x = x_bf16; }, "rope: x has dtype bf16, expected f32"},
      {"positions_shape", [&](RopeParams& p) { p.positions = positions_short; },
       "rope: positions has shape [2], expected [3] (T)"},
      {"positions_dtype", [&](RopeParams& p) { p.positions = positions_i64; },
       "rope: positions has dtype i64, expected i32"},
      {"positions_device", [&](RopeParams& p) { p.positions = positions_on_cuda; },
       "rope: positions is on cuda:0, expected cpu"},
      {"negative_position", [&](RopeParams& p) { p.positions = positions_negative; },
       "rope: positions[1] is -1, expected >= 0"},
      {"rotary_dim_odd", [&](RopeParams& p) { p.rotary_dim = 7; },
       "rope: rotary_dim is 7, expected an even value in [2, head_dim = 16]"},
      {"rotary_dim_too_big", [&](RopeParams& p) { p.rotary_dim = 18; },
       "rope: rotary_dim is 18, expected an even value in [2, head_dim = 16]"},
      {"rotary_dim_unset", [&](RopeParams& p) { p.rotary_dim = 0; }, "rope: rotary_dim is 0"},
      {"theta_zero", [&](RopeParams& p) { p.theta = 0.0f; },
       "rope: theta is 0, expected a finite value > 0"},
      {"missing_positions", [&](RopeParams& p) { p.positions = {}; }, "rope: positions is missing"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    RopeParams p = good;
    c.change(p);
    EXPECT_ERROR_CONTAINS(rope(p), c.error);
  }
  EXPECT_OK(rope(good));
}

}  // namespace
}  // namespace hyla::kernels
