// CUDA body of paged attention (kernels/paged_attention.h) against the CPU body, which is the
// specification, over the shared cases (tests/kernels/paged_kv_cases.h: several sequences, page
// sizes 1 / 16 / 64, shuffled pages with NaN in every row no sequence owns, GQA 1:1 and 4:1, d 32
// to 256, past 0 and > 0, decode and prefill, f32 / bf16 pages, gate, MLA's rope part, an empty
// sequence) plus strided q / gate / o views and d = 512; the decode path (T = B) at contexts
// around tile and page boundaries up to 4097 with one, several and many key splits (the merge),
// batches of mixed contexts, GQA groups 1 to 32, d 64 to 512 and odd d, MLA's rope key; the prefill
// path with mixed lengths and past > 0, and batches mixing decode and prefill rows; page ids
// outside [0, num_pages) against a float64 reference that skips them; workspace errors. Fresh
// random inputs every run (the seed is in each failure's trace; HYLA_TEST_SEED=<n> replays one).
// o is poisoned beforehand; the pages must come back bitwise unchanged. Skipped when no CUDA device
// is visible.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda_testing.h"
#include "kernels/paged_attention.h"
#include "kernels/paged_kv_cases.h"

namespace hyla::kernels {
namespace {

using testing::on_gpu;
using testing::on_host;
using testing::PagedCase;
using testing::PagedInputs;
using testing::Tolerance;

// Both bodies compute in fp32 from the same page values. The CPU takes two passes (max, then
// normalised weights), the GPU one (online softmax: rescaled running sums, one division at the
// end, per key split and again in the merge), and the sums run in other orders (a lane's serial dot
// vs the CPU's simd lanes; p v summed per 32-key tile vs one running sum). Scores |s| <= ~2
// sqrt(d_qk) d_qk^-1/2 differ by <= d_qk 2^-24 |q||k| ~ 1e-5 worst case; expf differs by a few
// ulp; o is a convex mixture of |v| <= 1 values, so each of those relative differences shows up at
// most once in o. The sums over up to 4097 keys of unit-sized terms differ by a random walk of
// ~sqrt(n) 2^-24 ~ 4e-6 (both sides).
constexpr Tolerance kOutputTolerance{
    .atol = 2e-5,
    .rtol = 2e-5,
    .why =
        "fp32 both, other summation order (dots over d_qk <= 512, online vs two-pass softmax, "
        "split merge, sums over <= 4097 keys) and expf: ~1e-5 of the unit-sized output"};

PagedAttentionParams params(const PagedCase& c, const PagedInputs& in, const TensorView& o,
                            int decode_splits = 0) {
  return {.q = in.q,
          .k_pages = in.k_pages,
          .k_rope_pages = in.k_rope_pages,
          .v_pages = in.v_pages,
          .index = in.index(),
          .scale = c.scale,
          .gate = in.gate,
          .o = o,
          .decode_splits = decode_splits};
}

/// Runs the GPU call with a workspace of paged_attention_workspace_bytes(p).
Status run_gpu(PagedAttentionParams p) {
  Tensor workspace;
  if (const int64_t bytes = paged_attention_workspace_bytes(p); bytes > 0) {
    workspace = Tensor::empty({bytes}, DType::kU8, Device::cuda());
    p.workspace = workspace;
  }
  return paged_attention(p);
}

/// Every tensor of `in` copied to the GPU.
PagedInputs to_gpu(const PagedInputs& in) {
  PagedInputs d = in;
  for (Tensor* t : {&d.q, &d.k_pages, &d.k_rope_pages, &d.v_pages, &d.gate, &d.cu_seqlens, &d.past,
                    &d.page_table})
    if (t->defined()) *t = on_gpu(*t);
  return d;
}

/// `decode_splits`: 0 auto, else forced on the decode path (T = B).
void expect_cuda_matches_cpu(const PagedCase& c, uint32_t seed, int decode_splits = 0) {
  SCOPED_TRACE(str_cat(c.name(), " splits ", decode_splits, " seed ", seed));
  std::mt19937 rng(seed);
  const PagedInputs in = testing::make_paged_inputs(c, rng);
  Tensor want = testing::poisoned({c.T(), c.HQ, c.d_v}, DType::kF32);
  ASSERT_OK(paged_attention(params(c, in, want)));

  const PagedInputs dev = to_gpu(in);
  Tensor got = testing::poisoned_gpu({c.T(), c.HQ, c.d_v}, DType::kF32);
  const PagedAttentionParams p = params(c, dev, got, decode_splits);
  if (decode_splits > 0 && c.T() == c.B()) {
    // the forced split count is the one run, and more than one needs the merge's workspace
    EXPECT_EQ(paged_attention_splits(p), decode_splits);
    EXPECT_EQ(paged_attention_workspace_bytes(p) > 0, decode_splits > 1);
  }
  ASSERT_OK(run_gpu(p));
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
  uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  for (const PagedCase& c : testing::paged_cases()) expect_cuda_matches_cpu(c, seed++);
}

TEST(PagedAttentionCudaTest, LargestHeadDimAndManySequences) {
  HYLA_SKIP_WITHOUT_CUDA();
  uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  // d = 512: 16 values per lane; 33 decoding sequences over pages of 16
  expect_cuda_matches_cpu({{40, 3}, {2, 1}, 16, 2, 1, 512, 512, 0, DType::kBF16, true}, seed++);
  PagedCase many = {{}, {}, 16, 4, 2, 64, 64, 0, DType::kBF16};
  for (int b = 0; b < 33; ++b) {
    many.past.push_back(int32_t(b * 7 % 50));
    many.new_tokens.push_back(1);
  }
  expect_cuda_matches_cpu(many, seed++);
}

void expect_strided_views_match(const PagedCase& c, int splits);

TEST(PagedAttentionCudaTest, StridedViews) {
  HYLA_SKIP_WITHOUT_CUDA();
  // q and gate halves of one fused [T, HQ, 2d] buffer; o padded and misaligned; the rest of o's
  // storage keeps its poison. Prefill, and decode through 3 key splits (the merge writes o).
  for (const int splits : {0, 3}) {
    const PagedCase c = splits == 0
                            ? PagedCase{{6, 0}, {3, 4}, 16, 4, 2, 32, 32, 0, DType::kF32, true}
                            : PagedCase{{70, 9}, {1, 1}, 16, 4, 2, 32, 32, 0, DType::kBF16, true};
    expect_strided_views_match(c, splits);
  }
}

void expect_strided_views_match(const PagedCase& c, int splits) {
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  SCOPED_TRACE(str_cat(c.name(), " splits ", splits));
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
  const testing::TwinView o = testing::twin_poisoned({T, c.HQ, d}, DType::kF32, 2, 3);
  PagedAttentionParams p = params(c, dev, o.device, splits);
  p.q = fused_gpu.view().narrow(2, 0, d);
  p.gate = fused_gpu.view().narrow(2, d, d);
  ASSERT_OK(run_gpu(p));
  const testing::HostResult back = testing::device_result(o);
  EXPECT_CLOSE(back.view, want, kOutputTolerance);
  EXPECT_TRUE(testing::untouched_outside(back.storage, back.view));
}

TEST(PagedAttentionCudaTest, DecodeContextsAndSplits) {
  HYLA_SKIP_WITHOUT_CUDA();
  uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  // Qwen3-Next widths, one sequence decoding at contexts around the 32-key tiles and 64-row pages;
  // splits auto, 1 (o written by the attention kernel), 3 and 40 (most splits empty at small
  // contexts: the merge weighs them 0)
  for (const int32_t context : {1, 63, 64, 65, 1000, 4097})
    for (const DType dtype : {DType::kF32, DType::kBF16})
      for (const int splits : {0, 1, 3, 40}) {
        const bool gate = (splits + (dtype == DType::kBF16 ? 1 : 0)) % 2 == 0;
        expect_cuda_matches_cpu({{context - 1}, {1}, 64, 16, 2, 256, 256, 0, dtype, gate}, seed++,
                                splits);
      }
}

TEST(PagedAttentionCudaTest, DecodeBatches) {
  HYLA_SKIP_WITHOUT_CUDA();
  uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  const DType f32 = DType::kF32, bf16 = DType::kBF16;
  const std::vector<int32_t> past = {0, 4, 63, 64, 299, 999, 128, 2047};  // 8 sequences
  const std::vector<int32_t> ones(8, 1);
  const PagedCase cases[] = {
      {past, ones, 64, 16, 2, 256, 256, 0, bf16, true},   // group 8, d 256
      {past, ones, 16, 4, 4, 128, 128, 0, f32},           // group 1, d 128
      {past, ones, 16, 8, 1, 80, 80, 0, bf16, true},      // group 8, odd d 80 (scalar loads)
      {past, ones, 64, 32, 1, 64, 64, 0, f32},            // group 32: two head chunks of 16
      {past, ones, 16, 12, 4, 30, 30, 0, f32},            // group 3, d 30 (not a multiple of 4)
      {past, ones, 64, 16, 1, 128, 128, 64, bf16, true},  // MLA: d_k 128 + rope 64, K3-like
      {past, ones, 16, 4, 1, 48, 32, 16, f32},            // MLA: d_qk 64 != d_v 32
      {{2, 300}, {1, 1}, 16, 4, 2, 512, 512, 0, bf16},    // d 512 (4 value chunks a lane)
      {{5, 9}, {0, 2}, 16, 8, 2, 64, 64, 0, f32},         // T = B, yet one sequence has 2 tokens
  };
  for (const PagedCase& c : cases)
    for (const int splits : {0, 1, 5}) expect_cuda_matches_cpu(c, seed++, splits);
}

TEST(PagedAttentionCudaTest, Prefill) {
  HYLA_SKIP_WITHOUT_CUDA();
  uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  const DType f32 = DType::kF32, bf16 = DType::kBF16;
  const std::vector<int32_t> past = {0, 30, 5, 100}, lengths = {1, 17, 64, 200};
  const PagedCase cases[] = {
      {past, lengths, 64, 16, 2, 256, 256, 0, f32, true},  // 4 tokens x 8 heads a block
      {past, lengths, 64, 16, 2, 256, 256, 0, bf16, false},
      {past, lengths, 16, 4, 4, 128, 128, 0, bf16, true},    // group 1: 32 tokens a block
      {past, lengths, 16, 6, 2, 80, 80, 0, f32},             // group 3: 10 tokens, 30 of 32 rows
      {past, lengths, 64, 16, 1, 128, 128, 64, bf16, true},  // MLA rope key, 2 tokens a block
      {past, lengths, 16, 64, 1, 32, 32, 0, f32},            // group 64: two head chunks of 32
      {{3, 0}, {40, 9}, 16, 4, 2, 512, 512, 0, bf16, true},  // d 512: 4 rows a warp
      // mixed batch (T > B): decode rows beside prefill rows, an empty sequence
      {{100, 0, 37, 2000, 7}, {1, 33, 1, 5, 0}, 64, 16, 2, 256, 256, 0, bf16, true},
  };
  for (const PagedCase& c : cases) expect_cuda_matches_cpu(c, seed++);
}

/// o in float64 like testing::paged_attention_reference, with `table` instead of the inputs'
/// (its ids outside [0, num_pages) skipped: their keys take no weight; a row with none left is 0).
std::vector<double> reference_skipping(const PagedCase& c, const PagedInputs& in,
                                       const std::vector<int32_t>& table) {
  const int64_t T = c.T(), d_qk = c.d_k + c.d_rope, group = c.HQ / c.HKV;
  const int64_t max_pages = in.page_table.size(1);
  const double scale = 1.0 / std::sqrt(double(d_qk));
  const int32_t* cu = in.cu_seqlens.host<int32_t>();
  std::vector<double> o(static_cast<size_t>(T * c.HQ * c.d_v), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t b = in.sequence[size_t(t)], len = c.past[size_t(b)] + (t - cu[b]) + 1;
    for (int64_t h = 0; h < c.HQ; ++h) {
      const float* q_row = in.q.host<float>() + (t * c.HQ + h) * d_qk;
      std::vector<double> score;
      std::vector<std::pair<int64_t, int64_t>> rows;  // (page, row) of each kept key
      for (int64_t j = 0; j < len; ++j) {
        const int64_t page = table[size_t(b * max_pages + j / c.page_size)];
        if (page < 0 || page >= in.num_pages) continue;
        double dot = 0;
        for (int64_t i = 0; i < c.d_k; ++i)
          dot += double(q_row[i]) *
                 testing::page_value(in.k_pages, page, j % c.page_size, h / group, i);
        score.push_back(scale * dot);
        rows.emplace_back(page, j % c.page_size);
      }
      if (score.empty()) continue;
      const double max_score = *std::max_element(score.begin(), score.end());
      double sum = 0;
      for (double& s : score) sum += (s = std::exp(s - max_score));
      double* o_row = o.data() + (t * c.HQ + h) * c.d_v;
      for (size_t j = 0; j < score.size(); ++j)
        for (int64_t i = 0; i < c.d_v; ++i)
          o_row[i] += score[j] / sum *
                      testing::page_value(in.v_pages, rows[j].first, rows[j].second, h / group, i);
    }
  }
  return o;
}

TEST(PagedAttentionCudaTest, SkipsPageIdsOutsideThePool) {
  HYLA_SKIP_WITHOUT_CUDA();
  uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  // sequence 0 loses its page 1 (-1), sequence 1 its page 0 (num_pages + 3), sequence 2 every
  // page (its rows are 0); decode with 1 and 4 splits, and prefill
  for (const bool decode : {true, false})
    for (const int splits : {1, 4}) {
      if (!decode && splits > 1) continue;
      const PagedCase c = {{100, 40, 10},
                           decode ? std::vector<int32_t>{1, 1, 1} : std::vector<int32_t>{3, 20, 2},
                           16,
                           8,
                           2,
                           64,
                           64,
                           0,
                           DType::kBF16};
      const uint32_t s = seed++;
      SCOPED_TRACE(str_cat(c.name(), " splits ", splits, " seed ", s));
      std::mt19937 rng(s);
      PagedInputs in = testing::make_paged_inputs(c, rng);
      const int64_t max_pages = in.page_table.size(1);
      int32_t* table = in.page_table.host<int32_t>();
      table[0 * max_pages + 1] = -1;
      table[1 * max_pages + 0] = int32_t(in.num_pages + 3);
      for (int64_t i = 0; i < max_pages; ++i) table[2 * max_pages + i] = -1;
      const std::vector<double> want =
          reference_skipping(c, in, std::vector<int32_t>(table, table + 3 * max_pages));
      const PagedInputs dev = to_gpu(in);
      Tensor got = testing::poisoned_gpu({c.T(), c.HQ, c.d_v}, DType::kF32);
      ASSERT_OK(run_gpu(params(c, dev, got, splits)));
      EXPECT_CLOSE(on_host(got), want, kOutputTolerance);
    }
}

TEST(PagedAttentionCudaTest, WorkspaceErrors) {
  HYLA_SKIP_WITHOUT_CUDA();
  const PagedCase c = {{300, 20}, {1, 1}, 16, 4, 2, 64, 64, 0, DType::kF32};
  std::mt19937 rng(3);
  const PagedInputs dev = to_gpu(testing::make_paged_inputs(c, rng));
  Tensor o = testing::poisoned_gpu({c.T(), c.HQ, c.d_v}, DType::kF32);
  PagedAttentionParams p = params(c, dev, o, 4);
  const int64_t need = paged_attention_workspace_bytes(p);
  // 2 tokens x 4 heads x 4 splits: (m, l) pairs, then 64 outputs each
  EXPECT_EQ(need, int64_t(sizeof(float)) * (2 * 32 + 32 * 64));
  EXPECT_ERROR_CONTAINS(paged_attention(p), str_cat("paged_attention: workspace is missing; this "
                                                    "call needs ",
                                                    need, " bytes"));
  Tensor small = Tensor::empty({need - 1}, DType::kU8, Device::cuda());
  p.workspace = small;
  EXPECT_ERROR_CONTAINS(paged_attention(p), str_cat("paged_attention: workspace holds ", need - 1,
                                                    " bytes, expected at least ", need));
  Tensor enough = Tensor::empty({need / 4}, DType::kF32, Device::cuda());
  p.workspace = enough;
  EXPECT_OK(paged_attention(p));
  // prefill and a single split need none
  p.decode_splits = 1;
  EXPECT_EQ(paged_attention_workspace_bytes(p), 0);
}

}  // namespace
}  // namespace hyla::kernels
