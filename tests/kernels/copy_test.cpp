// Strided copy: 1-4 dims, every f32/bf16 pair (bf16 rounded once), transposed, padded and
// misaligned views on either side, a broadcast (stride 0) source, in place; nothing outside y is
// written; bad arguments are refused.
#include "kernels/copy.h"

#include <random>
#include <vector>

#include "strided_views.h"
#include "testing.h"

namespace hyla::kernels {
namespace {

using testing::padded_numel;
using testing::padded_view;

struct CopyCase {
  std::vector<int64_t> shape;
  DType x_dtype, y_dtype;
  int64_t x_pad, y_pad, y_offset;
  bool transpose_x;  ///< x is a view with its last two dimensions swapped
  bool broadcast_x;  ///< x has stride 0 in dimension 0
  std::string name() const {
    std::string s = "shape";
    for (size_t i = 0; i < shape.size(); ++i) s += str_cat(i ? "x" : "", shape[i]);
    return str_cat(s, "_", dtype_name(x_dtype), "_to_", dtype_name(y_dtype), "_xpad", x_pad,
                   "_ypad", y_pad, "_at", y_offset, transpose_x ? "_transposed" : "",
                   broadcast_x ? "_broadcast" : "");
  }
};

const CopyCase kCases[] = {
    {{37}, DType::kF32, DType::kF32, 0, 0, 0, false, false},
    {{5, 33}, DType::kF32, DType::kBF16, 2, 3, 1, false, false},
    {{3, 4, 65}, DType::kBF16, DType::kF32, 0, 1, 3, false, false},
    {{2, 3, 4, 9}, DType::kBF16, DType::kBF16, 1, 0, 0, false, false},
    {{2, 3, 7, 6}, DType::kF32, DType::kF32, 0, 2, 1, true, false},
    {{4, 3, 17}, DType::kF32, DType::kBF16, 0, 0, 0, false, true},
    {{0, 5}, DType::kF32, DType::kF32, 0, 0, 0, false, false},
};

/// x for a case: padded rows, or the transpose of a padded [.., n, m] view, or dimension 0
/// broadcast from one stored row block.
TensorView make_x(const CopyCase& c, Tensor& storage, std::mt19937& rng) {
  std::vector<int64_t> stored = c.shape;
  if (c.transpose_x) std::swap(stored[stored.size() - 1], stored[stored.size() - 2]);
  if (c.broadcast_x) stored[0] = 1;
  storage = testing::random_uniform({padded_numel(stored, c.x_pad, 0)}, c.x_dtype, rng);
  TensorView v = padded_view(storage, stored, c.x_pad, 0);
  std::vector<int64_t> shape(v.shape(), v.shape() + v.ndim());
  std::vector<int64_t> stride(v.strides(), v.strides() + v.ndim());
  if (c.transpose_x) {
    std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
    std::swap(stride[stride.size() - 1], stride[stride.size() - 2]);
  }
  if (c.broadcast_x) {
    shape[0] = c.shape[0];
    stride[0] = 0;
  }
  return TensorView(v.raw(), v.dtype(), v.ndim(), shape.data(), stride.data(), v.device());
}

TEST(CopyTest, EqualsTheSourceRoundedToTheTarget) {
  std::mt19937 rng(14);
  for (const CopyCase& c : kCases) {
    SCOPED_TRACE(c.name());
    Tensor x_storage;
    const TensorView x = make_x(c, x_storage, rng);
    Tensor y_storage = testing::poisoned({padded_numel(c.shape, c.y_pad, c.y_offset)}, c.y_dtype);
    const TensorView y = padded_view(y_storage, c.shape, c.y_pad, c.y_offset);
    ASSERT_OK(copy({.x = x, .y = y}));
    // want: x's values (to_f64 honours strides) rounded to y's dtype
    const std::vector<double> xs = testing::to_f64(x);
    const std::vector<double> want =
        xs.empty() ? xs
                   : testing::to_f64(testing::tensor_from(xs, {int64_t(xs.size())}, c.y_dtype));
    EXPECT_CLOSE(y, want, {.atol = 0, .rtol = 0, .why = "a copy, rounded once to y's dtype"});
    EXPECT_TRUE(testing::untouched_outside(y_storage, y));
  }
}

TEST(CopyTest, InPlaceLeavesTheValues) {
  std::mt19937 rng(15);
  Tensor x = testing::random_uniform({4, 9}, DType::kBF16, rng);
  Tensor before = x.clone();
  ASSERT_OK(copy({.x = x, .y = x}));
  EXPECT_TRUE(testing::bitwise_equal(x, before));
}

TEST(CopyTest, RefusesBadArguments) {
  Tensor x = Tensor::zeros({3, 4}, DType::kF32);
  Tensor y = Tensor::zeros({4, 3}, DType::kF32);
  EXPECT_ERROR_CONTAINS(copy({.x = x, .y = y}), "y has shape [4, 3], expected [3, 4]");
  Tensor x5 = Tensor::zeros({1, 1, 1, 1, 2}, DType::kF32);
  EXPECT_ERROR_CONTAINS(copy({.x = x5, .y = x5}), "expected 1 to 4 dims");
  const int64_t shape[] = {3, 4}, stride[] = {0, 1};
  const TensorView y_broadcast(y.view().raw(), DType::kF32, 2, shape, stride);
  EXPECT_ERROR_CONTAINS(copy({.x = x, .y = y_broadcast}), "y has stride 0 in dimension 0");
  Tensor y_i32 = Tensor::zeros({3, 4}, DType::kI32);
  EXPECT_ERROR_CONTAINS(copy({.x = x, .y = y_i32}), "y has dtype i32");
  EXPECT_ERROR_CONTAINS(copy({.x = x, .y = TensorView(x.view().raw(), DType::kBF16, {3, 4})}),
                        "y aliases x");
}

}  // namespace
}  // namespace hyla::kernels
