// TensorView / Tensor: strides, views (select, slice, reshape), contiguity, span, copies, fills.
#include "core/tensor.h"

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/device_memory.h"
#include "testing.h"

namespace hyla {
namespace {

/// A [rows, cols] f32 tensor holding 0, 1, 2, ... in row-major order.
Tensor iota(int64_t rows, int64_t cols) {
  Tensor t = Tensor::empty({rows, cols}, DType::kF32);
  std::iota(t.data<float>(), t.data<float>() + t.numel(), 0.0f);
  return t;
}

TEST(TensorTest, ContiguousStridesAndSelect) {
  Tensor t = Tensor::zeros({2, 3, 4}, DType::kF32);
  EXPECT_EQ(t.view().stride(0), 12);
  EXPECT_EQ(t.view().stride(1), 4);
  EXPECT_EQ(t.view().stride(-1), 1);
  EXPECT_EQ(t.view().size(-2), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96);
  EXPECT_TRUE(t.view().is_contiguous());
  TensorView row = t.view().select(1);
  EXPECT_EQ(row.ndim(), 2);
  EXPECT_EQ(row.size(0), 3);
  EXPECT_EQ(row.stride(0), 4);
  EXPECT_EQ(row.data<float>(), t.data<float>() + 12);
  EXPECT_TRUE(row.is_contiguous());
  TensorView element = row.select(2).select(3);
  EXPECT_EQ(element.ndim(), 0);
  EXPECT_EQ(element.numel(), 1);
  EXPECT_EQ(element.data<float>(), t.data<float>() + 12 + 8 + 3);
}

TEST(TensorTest, ZerosAreZeroAndHostBuffersAreAligned) {
  Tensor t = Tensor::zeros({3, 5}, DType::kBF16);
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.data<bf16>()[i].bits, 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.view().raw()) % 64, 0u);
}

TEST(TensorTest, ToStringNamesShapeDtypeAndDevice) {
  Tensor t = Tensor::empty({4, 32, 128}, DType::kBF16);
  EXPECT_EQ(t.view().to_string(), "[4, 32, 128] bf16 cpu");
  EXPECT_EQ(t.view().shape_string(), "[4, 32, 128]");
  EXPECT_EQ(device_name(Device::cuda(1)), "cuda:1");
  EXPECT_EQ(TensorView().shape_string(), "[]");
}

TEST(TensorTest, SliceKeepsStridesAndOffsetsTheData) {
  Tensor t = iota(5, 4);
  TensorView rows = t.view().slice(1, 4);
  EXPECT_EQ(rows.size(0), 3);
  EXPECT_EQ(rows.size(1), 4);
  EXPECT_EQ(rows.stride(0), 4);
  EXPECT_EQ(rows.data<float>()[0], 4.0f);
  EXPECT_TRUE(rows.is_contiguous());  // whole rows of a contiguous tensor
  EXPECT_EQ(t.view().slice(2, 2).numel(), 0);
  EXPECT_EQ(t.view().slice(0, 5).data<float>(), t.data<float>());
  EXPECT_EQ(testing::to_f64(rows.select(2)), (std::vector<double>{12, 13, 14, 15}));
}

TEST(TensorTest, ReshapeOfContiguousView) {
  Tensor t = iota(4, 6);
  TensorView r = t.view().reshape({2, 3, 4});
  EXPECT_EQ(r.ndim(), 3);
  EXPECT_EQ(r.stride(0), 12);
  EXPECT_EQ(r.stride(1), 4);
  EXPECT_EQ(r.raw(), t.view().raw());
  EXPECT_EQ(r.select(1).select(2).data<float>()[3], 23.0f);
  // A slice of whole rows is contiguous, so it reshapes too.
  TensorView s = t.view().slice(2, 4).reshape({12});
  EXPECT_EQ(s.data<float>()[0], 12.0f);
}

TEST(TensorTest, NonContiguousViews) {
  Tensor t = iota(3, 4);
  // Columns 1..2 of the [3, 4] matrix: shape [3, 2], row stride 4.
  const int64_t shape[] = {3, 2};
  const int64_t stride[] = {4, 1};
  TensorView cols(t.data<float>() + 1, DType::kF32, 2, shape, stride);
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(cols.numel(), 6);
  EXPECT_EQ(testing::to_f64(cols), (std::vector<double>{1, 2, 5, 6, 9, 10}));
  // Selecting a row of it is contiguous again; slicing keeps the gaps.
  EXPECT_TRUE(cols.select(1).is_contiguous());
  EXPECT_FALSE(cols.slice(0, 2).is_contiguous());
  EXPECT_TRUE(cols.slice(1, 2).is_contiguous());  // a single row: the size-1 dim's stride is free

  // The transpose [4, 3] with strides {1, 4}.
  const int64_t t_shape[] = {4, 3};
  const int64_t t_stride[] = {1, 4};
  TensorView transposed(t.data<float>(), DType::kF32, 2, t_shape, t_stride);
  EXPECT_FALSE(transposed.is_contiguous());
  EXPECT_EQ(testing::to_f64(transposed.select(1)), (std::vector<double>{1, 5, 9}));

  // Size-1 dimensions may carry any stride without breaking contiguity.
  const int64_t one_shape[] = {1, 4, 1};
  const int64_t one_stride[] = {1000, 1, 77};
  EXPECT_TRUE(TensorView(t.data<float>(), DType::kF32, 3, one_shape, one_stride).is_contiguous());
}

TEST(TensorTest, SpanBytes) {
  Tensor t = iota(3, 4);
  EXPECT_EQ(t.view().span_bytes(), 48);
  EXPECT_EQ(t.view().slice(1, 3).span_bytes(), 32);
  const int64_t shape[] = {3, 2};
  const int64_t stride[] = {4, 1};
  // Last element at offset 2 * 4 + 1 = 9: ten f32 elements spanned.
  EXPECT_EQ(TensorView(t.data<float>(), DType::kF32, 2, shape, stride).span_bytes(), 40);
  EXPECT_EQ(t.view().slice(1, 1).span_bytes(), 0);
  Tensor half = Tensor::empty({2, 8}, DType::kBF16);
  EXPECT_EQ(half.view().span_bytes(), 32);
  EXPECT_EQ(half.view().select(0).select(5).span_bytes(), 2);  // a 0-d view: one element
}

TEST(TensorTest, EmptyWithAZeroDimension) {
  Tensor t = Tensor::empty({0, 16}, DType::kF32);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.nbytes(), 0);
  EXPECT_EQ(t.view().span_bytes(), 0);
  Tensor copy = t.clone();
  EXPECT_EQ(copy.numel(), 0);
  EXPECT_EQ(copy.size(1), 16);
}

TEST(TensorTest, CopiesShareTheBufferAndCloneDoesNot) {
  Tensor a = iota(2, 3);
  Tensor shared = a;
  EXPECT_EQ(shared.data<float>(), a.data<float>());
  Tensor deep = a.clone();
  EXPECT_NE(deep.data<float>(), a.data<float>());
  EXPECT_EQ(deep.dtype(), DType::kF32);
  EXPECT_EQ(deep.ndim(), 2);
  EXPECT_EQ(deep.size(0), 2);
  EXPECT_EQ(deep.size(1), 3);
  EXPECT_EQ(testing::to_f64(deep), testing::to_f64(a));
  a.data<float>()[0] = 42.0f;
  EXPECT_EQ(shared.data<float>()[0], 42.0f);
  EXPECT_EQ(deep.data<float>()[0], 0.0f);

  Tensor host = a.to(Device::cpu());
  EXPECT_TRUE(host.device().is_cpu());
  EXPECT_NE(host.data<float>(), a.data<float>());
  EXPECT_EQ(testing::to_f64(host), testing::to_f64(a));
}

TEST(TensorTest, FillBytes) {
  Tensor t = Tensor::empty({4, 4}, DType::kF32);
  t.fill_bytes(0xff);
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_TRUE(std::isnan(t.data<float>()[i]));
  t.fill_bytes(0);
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.data<float>()[i], 0.0f);
  Tensor bytes = Tensor::empty({7}, DType::kU8);
  bytes.fill_bytes(0xa5);
  for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(bytes.data<uint8_t>()[i], 0xa5);
  Tensor poisoned = testing::poisoned({3}, DType::kBF16);
  EXPECT_TRUE(std::isnan(bf16_to_f32(poisoned.data<bf16>()[2])));
}

TEST(TensorTest, CudaRoundTripWhenAvailable) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device (or a CPU-only build)";
  Tensor host = iota(3, 5);
  Tensor device = host.to(Device::cuda());
  EXPECT_TRUE(device.device().is_cuda());
  Tensor device_copy = device.clone();
  Tensor back = device_copy.to(Device::cpu());
  EXPECT_EQ(testing::to_f64(back), testing::to_f64(host));
  device_copy.fill_bytes(0);
  EXPECT_EQ(testing::to_f64(device_copy.to(Device::cpu())), std::vector<double>(15, 0.0));
}

TEST(TensorDeathTest, ProgrammingErrorsAbortWithTheirValues) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor t = iota(3, 4);
  EXPECT_DEATH((void)t.view().data<int32_t>(), "data<i32> on a f32 tensor");
  EXPECT_DEATH((void)t.view().select(3), "select\\(3\\) on \\[3, 4\\]");
  EXPECT_DEATH((void)t.view().slice(2, 5), "slice\\(2, 5\\) on \\[3, 4\\]");
  EXPECT_DEATH((void)t.view().reshape({5, 2}), "reshape of \\[3, 4\\] to \\[5, 2\\]");
  const int64_t shape[] = {3, 2};
  const int64_t stride[] = {4, 1};
  TensorView cols(t.data<float>(), DType::kF32, 2, shape, stride);
  EXPECT_DEATH((void)cols.reshape({6}), "reshape of \\[3, 2\\] to \\[6\\]");
  const int64_t seven[] = {1, 1, 1, 1, 1, 1, 1};
  EXPECT_DEATH((void)Tensor::empty(7, seven, DType::kF32), "at most 6 dims");
}

}  // namespace
}  // namespace hyla
