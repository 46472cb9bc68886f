// CUDA body of the row gather (kernels/gather_rows.h) against the CPU body: every f32/bf16 pair,
// odd widths, strided and misaligned views, repeated indices; an index outside [0, N) gives a NaN
// row on CUDA. Fresh random inputs (seed in the trace; HYLA_TEST_SEED=<n> replays one). Skipped
// when no CUDA device is visible.
#include <cmath>
#include <random>

#include "cuda_testing.h"
#include "kernels/gather_rows.h"

namespace hyla::kernels {
namespace {

using testing::on_gpu;
using testing::on_host;
using testing::TwinView;

TEST(GatherRowsCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  for (DType x_dtype : {DType::kF32, DType::kBF16}) {
    for (DType y_dtype : {DType::kF32, DType::kBF16}) {
      for (int64_t W : {1, 129, 2051}) {
        const int64_t pad = W % 2 ? 3 : 0, N = 41;
        SCOPED_TRACE(str_cat(dtype_name(x_dtype), "_to_", dtype_name(y_dtype), "_W", W));
        std::vector<int32_t> index = {40, 0};
        for (int i = 0; i < 29; ++i) index.push_back(int32_t(rng() % N));
        const int64_t M = int64_t(index.size());
        const TwinView x = testing::twin_uniform({N, W}, x_dtype, rng, -1.0f, 1.0f, pad, 1);
        const Tensor index_host = testing::int32_tensor(index), index_gpu = on_gpu(index_host);
        const TwinView y = testing::twin_poisoned({M, W}, y_dtype, pad, 0);
        ASSERT_OK(gather_rows({.x = x.host, .index = index_host, .y = y.host}));
        ASSERT_OK(gather_rows({.x = x.device, .index = index_gpu, .y = y.device}));
        const testing::HostResult got = testing::device_result(y);
        EXPECT_TRUE(testing::bitwise_equal(got.view, y.host))
            << "a row copy rounded once to nearest even on both sides";
        EXPECT_TRUE(testing::untouched_outside(got.storage, got.view));
      }
    }
  }
}

TEST(GatherRowsCudaTest, IndexOutsideTheRowsGivesNaN) {
  HYLA_SKIP_WITHOUT_CUDA();
  Tensor x = on_gpu(Tensor::zeros({3, 4}, DType::kF32));
  Tensor index = on_gpu(testing::int32_tensor({2, 3}));
  Tensor y = on_gpu(Tensor::zeros({2, 4}, DType::kBF16));
  ASSERT_OK(gather_rows({.x = x, .index = index, .y = y}));
  const Tensor out = on_host(y);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(bf16_to_f32(out.host<bf16>()[i]), 0.0f);
    EXPECT_TRUE(std::isnan(bf16_to_f32(out.host<bf16>()[4 + i])));
  }
}

}  // namespace
}  // namespace hyla::kernels
