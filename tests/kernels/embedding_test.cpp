// Embedding lookup: every row equals the table row its id names, widened exactly (f32 and bf16
// tables, a row-strided table and output, T = 0), and bad ids / shapes / dtypes are refused.
#include "kernels/embedding.h"

#include <random>

#include "strided_views.h"
#include "testing.h"

namespace hyla::kernels {
namespace {

using testing::padded_numel;
using testing::padded_view;

/// want[t, i] = table[ids[t], i] as double (both widenings are exact).
std::vector<double> embedding_reference(const TensorView& table, const std::vector<int32_t>& ids) {
  const std::vector<double> all = testing::to_f64(table);
  const size_t H = size_t(table.size(1));
  std::vector<double> want;
  for (int32_t id : ids)
    want.insert(want.end(), all.begin() + ptrdiff_t(size_t(id) * H),
                all.begin() + ptrdiff_t(size_t(id + 1) * H));
  return want;
}

TEST(EmbeddingTest, RowsAreTheTableRowsOfTheIds) {
  std::mt19937 rng(11);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t pad : {0, 5}) {
      SCOPED_TRACE(str_cat(dtype_name(dtype), "_pad", pad));
      const int64_t V = 37, H = 19;
      const std::vector<int32_t> ids = {0, 36, 5, 5, 17, 1, 36};
      const int64_t T = int64_t(ids.size());
      Tensor table_storage = testing::random_uniform({padded_numel({V, H}, pad, pad)}, dtype, rng);
      const TensorView table = padded_view(table_storage, {V, H}, pad, pad);
      Tensor y_storage = testing::poisoned({padded_numel({T, H}, pad, 0)}, DType::kF32);
      const TensorView y = padded_view(y_storage, {T, H}, pad, 0);
      Tensor id_tensor = testing::int32_tensor(ids);
      ASSERT_OK(embedding({.table = table, .ids = id_tensor, .y = y}));
      EXPECT_CLOSE(y, embedding_reference(table, ids),
                   {.atol = 0, .rtol = 0, .why = "a row copy; f32 and bf16 -> f32 are exact"});
      EXPECT_TRUE(testing::untouched_outside(y_storage, y));
    }
  }
}

TEST(EmbeddingTest, NoTokens) {
  Tensor table = Tensor::zeros({4, 3}, DType::kF32);
  Tensor ids = Tensor::empty({0}, DType::kI32);
  Tensor y = Tensor::empty({0, 3}, DType::kF32);
  EXPECT_OK(embedding({.table = table, .ids = ids, .y = y}));
}

TEST(EmbeddingTest, RefusesBadArguments) {
  Tensor table = Tensor::zeros({4, 3}, DType::kF32);
  Tensor y = Tensor::empty({2, 3}, DType::kF32);
  Tensor ok_ids = testing::int32_tensor({0, 3});
  EXPECT_ERROR_CONTAINS(embedding({.table = table, .ids = testing::int32_tensor({0, 4}), .y = y}),
                        "ids[1] is 4, outside [0, 4)");
  EXPECT_ERROR_CONTAINS(embedding({.table = table, .ids = testing::int32_tensor({-1, 0}), .y = y}),
                        "ids[0] is -1");
  Tensor y_bf16 = Tensor::empty({2, 3}, DType::kBF16);
  EXPECT_ERROR_CONTAINS(embedding({.table = table, .ids = ok_ids, .y = y_bf16}),
                        "y has dtype bf16, expected f32");
  Tensor y_short = Tensor::empty({2, 2}, DType::kF32);
  EXPECT_ERROR_CONTAINS(embedding({.table = table, .ids = ok_ids, .y = y_short}),
                        "y has shape [2, 2], expected [2, 3]");
  Tensor f32_ids = Tensor::zeros({2}, DType::kF32);
  EXPECT_ERROR_CONTAINS(embedding({.table = table, .ids = f32_ids, .y = y}),
                        "ids has dtype f32, expected i32");
}

}  // namespace
}  // namespace hyla::kernels
