// Row gather: y[i] = x[index[i]] converted to y's dtype (rounded once to bf16), repeated and
// out-of-order indices, strided and misaligned views, M = 0; bad indices, aliasing and shapes
// are refused.
#include "kernels/gather_rows.h"

#include <random>

#include "strided_views.h"
#include "testing.h"

namespace hyla::kernels {
namespace {

using testing::padded_numel;
using testing::padded_view;

/// want[i, c] = x[index[i], c], rounded to `y_dtype` (x's values are exact in double).
Tensor gather_reference(const TensorView& x, const std::vector<int32_t>& index, DType y_dtype) {
  const std::vector<double> all = testing::to_f64(x);
  const size_t W = size_t(x.size(1));
  std::vector<double> want;
  for (int32_t i : index)
    want.insert(want.end(), all.begin() + ptrdiff_t(size_t(i) * W),
                all.begin() + ptrdiff_t(size_t(i + 1) * W));
  return testing::tensor_from(want, {int64_t(index.size()), int64_t(W)}, y_dtype);
}

TEST(GatherRowsTest, RowsFollowTheIndex) {
  std::mt19937 rng(12);
  const std::vector<int32_t> index = {10, 0, 3, 3, 7};
  const int64_t N = 11, W = 67, M = int64_t(index.size());
  for (DType x_dtype : {DType::kF32, DType::kBF16}) {
    for (DType y_dtype : {DType::kF32, DType::kBF16}) {
      for (int64_t pad : {0, 3}) {
        SCOPED_TRACE(str_cat(dtype_name(x_dtype), "_to_", dtype_name(y_dtype), "_pad", pad));
        Tensor x_storage = testing::random_uniform({padded_numel({N, W}, pad, pad)}, x_dtype, rng);
        const TensorView x = padded_view(x_storage, {N, W}, pad, pad);
        Tensor y_storage = testing::poisoned({padded_numel({M, W}, pad, 1)}, y_dtype);
        const TensorView y = padded_view(y_storage, {M, W}, pad, 1);
        ASSERT_OK(gather_rows({.x = x, .index = testing::int32_tensor(index), .y = y}));
        EXPECT_CLOSE(y, gather_reference(x, index, y_dtype),
                     {.atol = 0, .rtol = 0, .why = "a row copy, rounded once to y's dtype"});
        EXPECT_TRUE(testing::untouched_outside(y_storage, y));
      }
    }
  }
}

TEST(GatherRowsTest, RefusesBadArguments) {
  Tensor x = Tensor::zeros({4, 3}, DType::kF32);
  Tensor y = Tensor::empty({2, 3}, DType::kF32);
  EXPECT_ERROR_CONTAINS(gather_rows({.x = x, .index = testing::int32_tensor({1, 4}), .y = y}),
                        "index[1] is 4, outside [0, 4)");
  EXPECT_ERROR_CONTAINS(
      gather_rows({.x = x, .index = testing::int32_tensor({0, 1}), .y = x.view().slice(0, 2)}),
      "y aliases x");
  EXPECT_ERROR_CONTAINS(gather_rows({.x = x, .index = testing::int32_tensor({0}), .y = y}),
                        "y has shape [2, 3], expected [1, 3]");
  Tensor y_i32 = Tensor::empty({2, 3}, DType::kI32);
  EXPECT_ERROR_CONTAINS(gather_rows({.x = x, .index = testing::int32_tensor({0, 1}), .y = y_i32}),
                        "y has dtype i32");
  Tensor none = Tensor::empty({0, 3}, DType::kF32);
  EXPECT_OK(gather_rows({.x = x, .index = Tensor::empty({0}, DType::kI32), .y = none}));
}

}  // namespace
}  // namespace hyla::kernels
