// TensorView / Tensor basics.
#include "core/tensor.h"

#include "testing.h"

namespace hyla {
namespace {

TEST(TensorTest, ContiguousStridesAndSelect) {
  Tensor t = Tensor::zeros({2, 3, 4}, DType::kF32);
  EXPECT_EQ(t.view().stride(0), 12);
  EXPECT_EQ(t.view().stride(-1), 1);
  EXPECT_TRUE(t.view().is_contiguous());
  TensorView row = t.view().select(1);
  EXPECT_EQ(row.ndim(), 2);
  EXPECT_EQ(row.data<float>(), t.data<float>() + 12);
}

}  // namespace
}  // namespace hyla
