// CUDA body of the row gather (kernels/gather_rows.h) against the CPU body: every f32/bf16 pair,
// odd widths, strided and misaligned views, repeated indices; an index outside [0, N) gives a NaN
// row on CUDA. Fresh random inputs (seed in the trace; HYLA_TEST_SEED=<n> replays one). Skipped
// when no CUDA device is visible.
#include <cmath>
#include <cstdlib>
#include <random>

#include "kernels/cuda/cuda_testing.h"
#include "kernels/gather_rows.h"
#include "kernels/strided_views.h"

namespace hyla::kernels {
namespace {

using testing::on_gpu;
using testing::on_host;
using testing::padded_numel;
using testing::padded_view;

uint32_t base_seed() {
  if (const char* env = std::getenv("HYLA_TEST_SEED"))
    return uint32_t(std::strtoul(env, nullptr, 10));
  return std::random_device{}();
}

TEST(GatherRowsCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = base_seed();
  SCOPED_TRACE(str_cat("seed ", seed));
  std::mt19937 rng(seed);
  for (DType x_dtype : {DType::kF32, DType::kBF16}) {
    for (DType y_dtype : {DType::kF32, DType::kBF16}) {
      for (int64_t W : {1, 129, 2051}) {
        const int64_t pad = W % 2 ? 3 : 0, N = 41;
        SCOPED_TRACE(str_cat(dtype_name(x_dtype), "_to_", dtype_name(y_dtype), "_W", W));
        std::vector<int32_t> index = {40, 0};
        for (int i = 0; i < 29; ++i) index.push_back(int32_t(rng() % N));
        const int64_t M = int64_t(index.size());
        Tensor x = testing::random_uniform({padded_numel({N, W}, pad, 1)}, x_dtype, rng);
        Tensor index_host = testing::int32_tensor(index);
        Tensor want_storage = testing::poisoned({padded_numel({M, W}, pad, 0)}, y_dtype);
        ASSERT_OK(gather_rows({.x = padded_view(x, {N, W}, pad, 1),
                               .index = index_host,
                               .y = padded_view(want_storage, {M, W}, pad, 0)}));
        Tensor x_gpu = on_gpu(x), index_gpu = on_gpu(index_host);
        Tensor got_gpu = on_gpu(testing::poisoned({padded_numel({M, W}, pad, 0)}, y_dtype));
        ASSERT_OK(gather_rows({.x = padded_view(x_gpu, {N, W}, pad, 1),
                               .index = index_gpu,
                               .y = padded_view(got_gpu, {M, W}, pad, 0)}));
        const Tensor got_storage = on_host(got_gpu);
        const TensorView got = padded_view(got_storage, {M, W}, pad, 0);
        EXPECT_TRUE(testing::bitwise_equal(got, padded_view(want_storage, {M, W}, pad, 0)))
            << "a row copy rounded once to nearest even on both sides";
        EXPECT_TRUE(testing::untouched_outside(got_storage, got));
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
