// CUDA body of the embedding lookup (kernels/embedding.h) against the CPU body: f32 and bf16
// tables of odd widths, a row-strided table and output, repeated ids; an id outside [0, V) gives a
// NaN row on CUDA (the CPU entry refuses it). Fresh random inputs (seed in the trace;
// HYLA_TEST_SEED=<n> replays one). Skipped when no CUDA device is visible.
#include <cmath>
#include <random>

#include "cuda_testing.h"
#include "kernels/embedding.h"

namespace hyla::kernels {
namespace {

using testing::on_gpu;
using testing::on_host;
using testing::TwinView;

TEST(EmbeddingCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t H : {1, 37, 300, 1029}) {
      for (int64_t pad : {0, 3}) {
        SCOPED_TRACE(str_cat(dtype_name(dtype), "_H", H, "_pad", pad));
        const int64_t V = 53;
        std::vector<int32_t> ids = {0, 52};
        for (int i = 0; i < 67; ++i) ids.push_back(int32_t(rng() % V));
        const int64_t T = int64_t(ids.size());
        const TwinView table = testing::twin_uniform({V, H}, dtype, rng, -1.0f, 1.0f, pad, 0);
        const Tensor id_host = testing::int32_tensor(ids), id_gpu = on_gpu(id_host);
        const TwinView y = testing::twin_poisoned({T, H}, DType::kF32, pad, 0);
        ASSERT_OK(embedding({.table = table.host, .ids = id_host, .y = y.host}));
        ASSERT_OK(embedding({.table = table.device, .ids = id_gpu, .y = y.device}));
        const testing::HostResult got = testing::device_result(y);
        EXPECT_CLOSE(got.view, y.host,
                     {.atol = 0, .rtol = 0, .why = "a row copy; f32 and bf16 -> f32 are exact"});
        EXPECT_TRUE(testing::untouched_outside(got.storage, got.view));
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
