// CUDA bodies of kv_page_write and kv_page_gather (kernels/kv_pages.h) against the CPU bodies:
// both are copies (bf16 rounded to nearest even on both sides), so every page byte and every
// gathered element must be equal: rows no token writes keep their NaN poison, gather padding rows
// are zeros. Shuffled pages, several sequences (one empty), page sizes 1 / 16 / 64, f32 and bf16
// pages, k alone and k + v, strided rows. Fresh random inputs every run (the seed is in each
// failure's trace; HYLA_TEST_SEED=<n> replays one). Skipped when no CUDA device is visible.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>

#include "cuda_testing.h"
#include "kernels/kv_pages.h"
#include "kernels/paged_kv_cases.h"

namespace hyla::kernels {
namespace {

using testing::on_gpu;
using testing::on_host;
using testing::PagedCase;

const PagedCase kCases[] = {
    {{0}, {5}, 16, 1, 2, 32, 32},
    {{3, 0, 40}, {1, 17, 1}, 1, 1, 2, 8, 24, 0, DType::kBF16},
    {{63, 1, 0}, {2, 64, 0}, 64, 1, 4, 64, 33},
    {{15, 16, 2}, {1, 33, 0}, 16, 1, 3, 40, 40, 0, DType::kBF16},
    {{100}, {300}, 64, 1, 8, 128, 128, 0, DType::kBF16},
};

kernels::PageIndex gpu_index(const testing::PagedInputs& in, Tensor* cu, Tensor* past,
                             Tensor* table) {
  *cu = on_gpu(in.cu_seqlens);
  *past = on_gpu(in.past);
  *table = on_gpu(in.page_table);
  return {*cu, *past, *table};
}

TEST(KvPageWriteCudaTest, PagesEqualTheCpuBody) {
  HYLA_SKIP_WITHOUT_CUDA();
  uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  for (const PagedCase& c : kCases) {
    for (bool with_v : {false, true}) {
      SCOPED_TRACE(str_cat(c.name(), with_v ? "_v" : "", " seed ", seed));
      std::mt19937 rng(seed++);
      const testing::PagedInputs in = testing::make_paged_inputs(c, rng);
      // k rows: a column narrow of a wider buffer (row stride > H d)
      Tensor k_wide = testing::random_uniform({c.T(), c.HKV, c.d_k + 5}, DType::kF32, rng, -3, 3);
      Tensor v = testing::random_uniform({c.T(), c.HKV, c.d_v}, DType::kF32, rng, -3, 3);
      const TensorView k = k_wide.view().narrow(2, 2, c.d_k);

      Tensor k_want = in.k_pages.clone(), v_want = in.v_pages.clone();
      ASSERT_OK(kv_page_write({.k = k,
                               .k_pages = k_want,
                               .v = with_v ? v.view() : TensorView(),
                               .v_pages = with_v ? v_want.view() : TensorView(),
                               .index = in.index()}));

      Tensor cu, past, table;
      Tensor k_wide_gpu = on_gpu(k_wide), v_gpu = on_gpu(v);
      Tensor k_got = on_gpu(in.k_pages), v_got = on_gpu(in.v_pages);
      ASSERT_OK(kv_page_write({.k = k_wide_gpu.view().narrow(2, 2, c.d_k),
                               .k_pages = k_got,
                               .v = with_v ? v_gpu.view() : TensorView(),
                               .v_pages = with_v ? v_got.view() : TensorView(),
                               .index = gpu_index(in, &cu, &past, &table)}));
      EXPECT_TRUE(testing::bitwise_equal(on_host(k_got), k_want));
      EXPECT_TRUE(testing::bitwise_equal(on_host(v_got), v_want));
    }
  }
}

TEST(KvPageGatherCudaTest, RowsEqualTheCpuBody) {
  HYLA_SKIP_WITHOUT_CUDA();
  uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  for (const PagedCase& c : kCases) {
    SCOPED_TRACE(str_cat(c.name(), " seed ", seed));
    std::mt19937 rng(seed++);
    const testing::PagedInputs in = testing::make_paged_inputs(c, rng);
    int64_t R = 1;
    for (int64_t b = 0; b < c.B(); ++b)
      R = std::max<int64_t>(R, c.past[size_t(b)] + c.new_tokens[size_t(b)]);
    R += 3;
    // the pages as a column narrow (MLA gathers the latent part of [c | k_pe] rows)
    const TensorView pages = in.v_pages.view().narrow(3, 1, c.d_v - 1);
    Tensor want = testing::poisoned({c.B(), R, c.HKV, c.d_v - 1}, DType::kF32);
    ASSERT_OK(kv_page_gather({.pages = pages, .index = in.index(), .out = want}));

    Tensor cu, past, table;
    Tensor pages_gpu = on_gpu(in.v_pages);
    Tensor got = testing::poisoned_gpu({c.B(), R, c.HKV, c.d_v - 1}, DType::kF32);
    ASSERT_OK(kv_page_gather({.pages = pages_gpu.view().narrow(3, 1, c.d_v - 1),
                              .index = gpu_index(in, &cu, &past, &table),
                              .out = got}));
    EXPECT_TRUE(testing::bitwise_equal(on_host(got), want));
  }
}

}  // namespace
}  // namespace hyla::kernels
