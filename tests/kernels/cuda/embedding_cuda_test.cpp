// CUDA body of the embedding lookup (kernels/embedding.h) against the CPU body: f32 and bf16
// tables of odd widths, a row-strided table and output, repeated ids; an id outside [0, V) gives a
// NaN row on CUDA (the CPU entry refuses it). Fresh random inputs (seed in the trace;
// HYLA_TEST_SEED=<n> replays one). Skipped when no CUDA device is visible.
#include <cstdlib>
#include <random>

#include "kernels/cuda/cuda_testing.h"
#include "kernels/embedding.h"
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

TEST(EmbeddingCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = base_seed();
  SCOPED_TRACE(str_cat("seed ", seed));
  std::mt19937 rng(seed);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t H : {1, 37, 300, 1029}) {
      for (int64_t pad : {0, 3}) {
        SCOPED_TRACE(str_cat(dtype_name(dtype), "_H", H, "_pad", pad));
        const int64_t V = 53;
        std::vector<int32_t> ids = {0, 52};
        for (int i = 0; i < 67; ++i) ids.push_back(int32_t(rng() % V));
        const int64_t T = int64_t(ids.size());
        Tensor table = testing::random_uniform({padded_numel({V, H}, pad, 0)}, dtype, rng);
        Tensor id_host = testing::int32_tensor(ids);
        Tensor want_storage = testing::poisoned({padded_numel({T, H}, pad, 0)}, DType::kF32);
        ASSERT_OK(embedding({.table = padded_view(table, {V, H}, pad, 0),
                             .ids = id_host,
                             .y = padded_view(want_storage, {T, H}, pad, 0)}));
        Tensor table_gpu = on_gpu(table), id_gpu = on_gpu(id_host);
        Tensor got_gpu = on_gpu(testing::poisoned({padded_numel({T, H}, pad, 0)}, DType::kF32));
        ASSERT_OK(embedding({.table = padded_view(table_gpu, {V, H}, pad, 0),
                             .ids = id_gpu,
                             .y = padded_view(got_gpu, {T, H}, pad, 0)}));
        const Tensor got_storage = on_host(got_gpu);
        const TensorView got = padded_view(got_storage, {T, H}, pad, 0);
        EXPECT_CLOSE(got, padded_view(want_storage, {T, H}, pad, 0),
                     {.atol = 0, .rtol = 0, .why = "a row copy; f32 and bf16 -> f32 are exact"});
        EXPECT_TRUE(testing::untouched_outside(got_storage, got));
      }
    }
  }
}

TEST(EmbeddingCudaTest, IdOutsideTheTableGivesNaN) {
  HYLA_SKIP_WITHOUT_CUDA();
  Tensor table = on_gpu(Tensor::zeros({4, 5}, DType::kF32));
  Tensor ids = on_gpu(testing::int32_tensor({1, 4, -1}));
  Tensor y = on_gpu(Tensor::zeros({3, 5}, DType::kF32));
  ASSERT_OK(embedding({.table = table, .ids = ids, .y = y}));
  const Tensor out = on_host(y);
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(out.host<float>()[i], 0.0f);
    EXPECT_TRUE(std::isnan(out.host<float>()[5 + i]));
    EXPECT_TRUE(std::isnan(out.host<float>()[10 + i]));
  }
}

}  // namespace
}  // namespace hyla::kernels
