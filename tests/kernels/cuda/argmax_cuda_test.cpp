// CUDA body of the greedy pick (kernels/argmax.h) against the CPU body: random rows and rows of
// ties, NaN, +-inf, all -inf, at widths around the block size and the real vocabulary, with a
// row stride. Ids and counts are integers: they must be equal. Fresh random inputs (seed in the
// trace; HYLA_TEST_SEED=<n> replays one). Skipped when no CUDA device is visible.
#include <limits>
#include <random>

#include "cuda_testing.h"
#include "kernels/argmax.h"

namespace hyla::kernels {
namespace {

using testing::on_gpu;
using testing::on_host;
using testing::poisoned_gpu;
using testing::same_values;

TEST(ArgmaxCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (const auto& [B, V, pad] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 0},
                                  {8, 511, 3},
                                  {8, 513, 0},
                                  {17, 4099, 5},
                                  {3, 151936, 0}}) {
    SCOPED_TRACE(str_cat("B", B, "_V", V, "_pad", pad));
    Tensor storage = testing::random_uniform({B, V + pad}, DType::kF32, rng, -4.0f, 4.0f);
    float* x = storage.host<float>();
    std::uniform_int_distribution<int64_t> column(0, V - 1);
    for (int64_t b = 0; b < B; ++b) {
      float* row = x + b * (V + pad);
      switch (b % 6) {
        case 1:
          for (int i = 0; i < 5; ++i) row[column(rng)] = 7.0f;  // ties
          break;
        case 2:
          row[0] = std::numeric_limits<float>::quiet_NaN();
          row[column(rng)] = std::numeric_limits<float>::quiet_NaN();
          break;
        case 3:
          row[column(rng)] = kInf;
          row[column(rng)] = -kInf;
          row[column(rng)] = kInf;
          break;
        case 4:
          for (int64_t v = 0; v < V; ++v) row[v] = -kInf;
          break;
        default: break;
      }
    }
    const int64_t shape[] = {B, V}, strides[] = {V + pad, 1};
    auto rows = [&](const Tensor& t) {
      return TensorView(t.view().raw(), DType::kF32, 2, shape, strides, t.device());
    };
    Tensor ids = Tensor::zeros({B}, DType::kI32), bad = Tensor::zeros({B}, DType::kI32),
           first = Tensor::zeros({B}, DType::kI32), value = Tensor::zeros({B}, DType::kF32);
    ASSERT_OK(argmax({.logits = rows(storage),
                      .ids = ids,
                      .non_finite = bad,
                      .first_bad = first,
                      .first_bad_value = value}));
    const Tensor gpu = on_gpu(storage);
    Tensor g_ids = poisoned_gpu({B}, DType::kI32), g_bad = poisoned_gpu({B}, DType::kI32),
           g_first = poisoned_gpu({B}, DType::kI32), g_value = poisoned_gpu({B}, DType::kF32);
    ASSERT_OK(argmax({.logits = rows(gpu),
                      .ids = g_ids,
                      .non_finite = g_bad,
                      .first_bad = g_first,
                      .first_bad_value = g_value}));
    // equal element by element; a NaN first_bad_value matches the GPU's own NaN bits
    EXPECT_TRUE(same_values(on_host(g_ids), ids));
    EXPECT_TRUE(same_values(on_host(g_bad), bad));
    EXPECT_TRUE(same_values(on_host(g_first), first));
    EXPECT_TRUE(same_values(on_host(g_value), value));
  }
}

}  // namespace
}  // namespace hyla::kernels
