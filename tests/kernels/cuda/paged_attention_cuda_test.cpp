// CUDA body of paged attention (kernels/paged_attention.h) against the CPU body, which is the
// specification, over the shared cases (tests/kernels/paged_kv_cases.h: several sequences, page
// sizes 1 / 16 / 64, shuffled pages with NaN in every row no sequence owns, GQA 1:1 and 4:1, d 32
// to 256, past 0 and > 0, decode and prefill, f32 / bf16 pages, gate, MLA's rope part, an empty
// sequence) plus strided q / gate / o views and d = 512. Fresh random inputs every run (the seed
// is in each failure's trace; HYLA_TEST_SEED=<n> replays one). o is poisoned beforehand; the pages
// must come back bitwise unchanged. Skipped when no CUDA device is visible.
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

#include "cuda_testing.h"
#include "kernels/paged_attention.h"
#include "kernels/paged_kv_cases.h"
#include "kernels/strided_views.h"  // bitwise_equal, padded_view
#include "testing.h"

namespace hyla::kernels {
namespace {

using testing::on_gpu;
using testing::on_host;
using testing::PagedCase;
using testing::PagedInputs;
using testing::Tolerance;

// Both bodies compute in fp32 from the same page values. The CPU takes two passes (max, then
// normalised weights), the GPU one (online softmax: rescaled running sums, one division at the
// end), and the dot products are summed in other orders (32 lane partials + shuffles vs the CPU's
// simd lanes). Scores |s| <= ~2 sqrt(d_qk) d_qk^-1/2 differ by <= d_qk 2^-24 |q||k| ~ 1e-5 worst
// case; expf differs by a few ulp; o is a convex mixture of |v| <= 1 values, so each of those
// relative differences shows up at most once in o.
constexpr Tolerance kOutputTolerance{
    .atol = 2e-5,
    .rtol = 2e-5,
    .why =
        "fp32 both, other summation order (dots over d_qk <= 512, online vs two-pass "
        "softmax) and expf: ~1e-5 of the unit-sized output"};

uint32_t base_seed() {
  if (const char* env = std::getenv("HYLA_TEST_SEED"))
    return uint32_t(std::strtoul(env, nullptr, 10));
  return std::random_device{}();
}

PagedAttentionParams params(const PagedCase& c, const PagedInputs& in, const TensorView& o) {
  return {.q = in.q,
          .k_pages = in.k_pages,
          .k_rope_pages = in.k_rope_pages,
          .v_pages = in.v_pages,
          .index = in.index(),
          .scale = c.scale,
          .gate = in.gate,
          .o = o};
}

/// Every tensor of `in` copied to the GPU.
PagedInputs to_gpu(const PagedInputs& in) {
  PagedInputs d = in;
  for (Tensor* t : {&d.q, &d.k_pages, &d.k_rope_pages, &d.v_pages, &d.gate, &d.cu_seqlens, &d.past,
                    &d.page_table})
    if (t->defined()) *t = on_gpu(*t);
  return d;
}

void expect_cuda_matches_cpu(const PagedCase& c, uint32_t seed) {
  SCOPED_TRACE(str_cat(c.name(), " seed ", seed));
  std::mt19937 rng(seed);
  const PagedInputs in = testing::make_paged_inputs(c, rng);
  Tensor want = testing::poisoned({c.T(), c.HQ, c.d_v}, DType::kF32);
  ASSERT_OK(paged_attention(params(c, in, want)));

  const PagedInputs dev = to_gpu(in);
  Tensor got = testing::poisoned_gpu({c.T(), c.HQ, c.d_v}, DType::kF32);
  ASSERT_OK(paged_attention(params(c, dev, got)));
  EXPECT_CLOSE(on_host(got), want, kOutputTolerance);
  // the pages are inputs only
  EXPECT_TRUE(testing::bitwise_equal(on_host(dev.k_pages), in.k_pages));
  EXPECT_TRUE(testing::bitwise_equal(on_host(dev.v_pages), in.v_pages));
  if (c.d_rope > 0) {
    EXPECT_TRUE(testing::bitwise_equal(on_host(dev.k_rope_pages), in.k_rope_pages));
  }
}

TEST(PagedAttentionCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  uint32_t seed = base_seed();
  for (const PagedCase& c : testing::paged_cases()) expect_cuda_matches_cpu(c, seed++);
}

TEST(PagedAttentionCudaTest, LargestHeadDimAndManySequences) {
  HYLA_SKIP_WITHOUT_CUDA();
  uint32_t seed = base_seed();
  // d = 512: 16 values per lane; 33 decoding sequences over pages of 16
  expect_cuda_matches_cpu({{40, 3}, {2, 1}, 16, 2, 1, 512, 512, 0, DType::kBF16, true}, seed++);
  PagedCase many = {{}, {}, 16, 4, 2, 64, 64, 0, DType::kBF16};
  for (int b = 0; b < 33; ++b) {
    many.past.push_back(int32_t(b * 7 % 50));
    many.new_tokens.push_back(1);
  }
  expect_cuda_matches_cpu(many, seed++);
}

TEST(PagedAttentionCudaTest, StridedViews) {
  HYLA_SKIP_WITHOUT_CUDA();
  // q and gate halves of one fused [T, HQ, 2d] buffer; o padded and misaligned; the rest of o's
  // storage keeps its poison
  const PagedCase c = {{6, 0}, {3, 4}, 16, 4, 2, 32, 32, 0, DType::kF32, true};
  const uint32_t seed = base_seed();
  SCOPED_TRACE(str_cat("seed ", seed));
  std::mt19937 rng(seed);
  const PagedInputs in = testing::make_paged_inputs(c, rng);
  const int64_t T = c.T(), d = c.d_k;
  Tensor fused = Tensor::empty({T, c.HQ, 2 * d}, DType::kF32);
  for (int64_t r = 0; r < T * c.HQ; ++r) {
    std::copy_n(in.q.host<float>() + r * d, d, fused.host<float>() + r * 2 * d);
    std::copy_n(in.gate.host<float>() + r * d, d, fused.host<float>() + r * 2 * d + d);
  }
  Tensor want = testing::poisoned({T, c.HQ, d}, DType::kF32);
  ASSERT_OK(paged_attention(params(c, in, want)));

  const PagedInputs dev = to_gpu(in);
  Tensor fused_gpu = on_gpu(fused);
  Tensor o_storage = testing::poisoned({testing::padded_numel({T, c.HQ, d}, 2, 3)}, DType::kF32);
  Tensor o_storage_gpu = on_gpu(o_storage);
  const TensorView o = testing::padded_view(o_storage_gpu, {T, c.HQ, d}, 2, 3);
  PagedAttentionParams p = params(c, dev, o);
  p.q = fused_gpu.view().narrow(2, 0, d);
  p.gate = fused_gpu.view().narrow(2, d, d);
  ASSERT_OK(paged_attention(p));
  Tensor back = on_host(o_storage_gpu);
  EXPECT_CLOSE(testing::padded_view(back, {T, c.HQ, d}, 2, 3), want, kOutputTolerance);
  EXPECT_TRUE(testing::untouched_outside(back, testing::padded_view(back, {T, c.HQ, d}, 2, 3)));
}

}  // namespace
}  // namespace hyla::kernels
