// Paged attention (CPU body) against float64 references: over the shared cases (paged_kv_cases.h:
// several sequences, page sizes 1 / 16 / 64, shuffled pages, GQA 1:1 and 4:1, d 32 to 256, past 0
// and > 0, f32 / bf16 pages, gate, MLA's rope part; unowned page rows hold NaN and must not be
// read), and a plain causal attention over contiguous k / v for one sequence whose rows fill one
// page (prefill, chunked prefill, decode, GQA 1:1 to 4:1, d_qk != d_v both ways, an explicit
// scale, no new tokens). The same rows whether a sequence's tokens come in one call or in chunks.
// Argument errors.
#include "kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/paged_kv_cases.h"
#include "kernels/strided_views.h"
#include "testing.h"

namespace hyla::kernels {
namespace {

using testing::PagedCase;
using testing::PagedInputs;
using testing::Tolerance;

constexpr Tolerance kOutputTolerance = {
    .atol = 1e-5,
    .rtol = 1e-5,
    .why =
        "fp32 dots of d_qk <= 256 terms |q k| <= 2 scaled by d_qk^-1/2 (score error <= ~2e-6 "
        "typical, 1.5e-5 worst), expf within a few ulp, a sum of <= 146 weighted |v| <= 1 rows"};

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

TEST(PagedAttentionTest, MatchesFloat64Reference) {
  int seed = 0;
  for (const PagedCase& c : testing::paged_cases()) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    const PagedInputs in = testing::make_paged_inputs(c, rng);
    Tensor o = testing::poisoned({c.T(), c.HQ, c.d_v}, DType::kF32);
    ASSERT_OK(paged_attention(params(c, in, o)));
    EXPECT_CLOSE(o, testing::paged_attention_reference(c, in), kOutputTolerance);
  }
}

TEST(PagedAttentionTest, StridedViews) {
  // q and gate are halves of one fused [T, HQ, 2 d] row (as the model's q_and_gate), o padded and
  // misaligned, the pages a column narrow of wider page rows
  const PagedCase c = {{6, 0}, {3, 4}, 16, 4, 2, 32, 32, 0, DType::kF32, true};
  std::mt19937 rng(41);
  const PagedInputs dense = testing::make_paged_inputs(c, rng);
  const int64_t T = c.T(), d = c.d_k;
  Tensor fused = Tensor::empty({T, c.HQ, 2 * d}, DType::kF32);
  Tensor k_wide = testing::poisoned({dense.num_pages, c.page_size, c.HKV, d + 3}, DType::kF32);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < c.HQ; ++h)
      for (int64_t i = 0; i < d; ++i) {
        fused.host<float>()[(t * c.HQ + h) * 2 * d + i] =
            dense.q.host<float>()[(t * c.HQ + h) * d + i];
        fused.host<float>()[(t * c.HQ + h) * 2 * d + d + i] =
            dense.gate.host<float>()[(t * c.HQ + h) * d + i];
      }
  const int64_t rows = dense.num_pages * c.page_size * c.HKV;
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(dense.k_pages.host<float>() + r * d, d, k_wide.host<float>() + r * (d + 3) + 1);
  PagedInputs in = dense;
  Tensor o_storage = testing::poisoned({testing::padded_numel({T, c.HQ, d}, 2, 3)}, DType::kF32);
  const TensorView o = testing::padded_view(o_storage, {T, c.HQ, d}, 2, 3);
  PagedAttentionParams p = params(c, in, o);
  p.q = fused.view().narrow(2, 0, d);
  p.gate = fused.view().narrow(2, d, d);
  p.k_pages = k_wide.view().narrow(3, 1, d);
  ASSERT_OK(paged_attention(p));
  EXPECT_CLOSE(o, testing::paged_attention_reference(c, dense), kOutputTolerance);
  EXPECT_TRUE(testing::untouched_outside(o_storage, o));
}

/// o [T, HQ, d_v] in float64 for one sequence over contiguous k / v, the math of
/// kernels/paged_attention.h without pages: token t (position past + t), query head h, kv head
/// h_kv = h / (HQ / HKV), sees the keys j in [0, past + t] (causal, no window);
///   s_j = scale <q[t, h], [k[j, h_kv] | k_rope[j]]>,  o[t, h] = sum_j softmax(s)_j v[j, h_kv],
///   then o[t, h] *= sigmoid(gate[t, h]) with a gate.
/// q [T, HQ, d_k + d_rope], k [>= past + T, HKV, d_k], k_rope [>= past + T, 1, d_rope] (empty
/// without rope), v [>= past + T, HKV, d_v], gate [T, HQ, d_v] (empty without); row-major.
std::vector<double> contiguous_attention_reference(const PagedCase& c, const std::vector<double>& q,
                                                   const std::vector<double>& k,
                                                   const std::vector<double>& k_rope,
                                                   const std::vector<double>& v,
                                                   const std::vector<double>& gate) {
  const int64_t T = c.T(), past = c.past[0], d_qk = c.d_k + c.d_rope, group = c.HQ / c.HKV;
  const double scale = c.scale > 0.0f ? double(c.scale) : 1.0 / std::sqrt(double(d_qk));
  std::vector<double> o(static_cast<size_t>(T * c.HQ * c.d_v));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < c.HQ; ++h) {
      const int64_t h_kv = h / group, len = past + t + 1;
      const double* q_row = q.data() + (t * c.HQ + h) * d_qk;
      std::vector<double> score(static_cast<size_t>(len));
      for (int64_t j = 0; j < len; ++j) {
        const double* k_row = k.data() + (j * c.HKV + h_kv) * c.d_k;
        double dot = 0;
        for (int64_t i = 0; i < c.d_k; ++i) dot += q_row[i] * k_row[i];
        for (int64_t i = 0; i < c.d_rope; ++i) dot += q_row[c.d_k + i] * k_rope[j * c.d_rope + i];
        score[size_t(j)] = scale * dot;
      }
      const double max_score = *std::max_element(score.begin(), score.end());
      double sum = 0;
      for (double& s : score) sum += (s = std::exp(s - max_score));
      double* o_row = o.data() + (t * c.HQ + h) * c.d_v;
      for (int64_t j = 0; j < len; ++j) {
        const double* v_row = v.data() + (j * c.HKV + h_kv) * c.d_v;
        for (int64_t i = 0; i < c.d_v; ++i) o_row[i] += score[size_t(j)] / sum * v_row[i];
      }
      if (c.gate)
        for (int64_t i = 0; i < c.d_v; ++i)
          o_row[i] /= 1.0 + std::exp(-gate[size_t((t * c.HQ + h) * c.d_v + i)]);
    }
  }
  return o;
}

/// One sequence per case; its past + T rows fill one page with 3 rows to spare (NaN), so the page
/// is a contiguous KV cache [page_size, HKV, d].
std::vector<PagedCase> one_page_cases() {
  const DType f32 = DType::kF32, bf16 = DType::kBF16;
  std::vector<PagedCase> cases = {
      {{0}, {1}, 0, 4, 4, 32, 32},                        // one token sees only itself
      {{0}, {7}, 0, 4, 4, 32, 32},                        // prefill
      {{0}, {33}, 0, 8, 2, 64, 64},                       // GQA 4:1
      {{0}, {7}, 0, 4, 4, 48, 32},                        // d_qk 48 != d_v 32
      {{0}, {33}, 0, 4, 1, 48, 32},                       // GQA 4:1, d_qk != d_v
      {{40}, {1}, 0, 4, 4, 32, 32},                       // decode
      {{100}, {1}, 0, 8, 2, 64, 64},                      // decode, GQA 4:1
      {{63}, {1}, 0, 4, 4, 48, 32, 0, f32, false, 0.3f},  // explicit scale
      {{17}, {5}, 0, 6, 3, 16, 24},                       // chunked prefill, GQA 2:1, d_v > d_qk
      {{37}, {5}, 0, 8, 2, 64, 64},                       // chunked prefill
      {{9}, {0}, 0, 4, 2, 32, 32},                        // no new tokens
      {{12}, {6}, 0, 4, 2, 48, 32, 16, f32, true},        // MLA rope key, gate
      {{20}, {3}, 0, 4, 1, 64, 32, 32, bf16, true},       // MLA, bf16 pages, gate
  };
  for (PagedCase& c : cases) c.page_size = c.past[0] + c.T() + 3;
  return cases;
}

TEST(PagedAttentionTest, OnePageMatchesContiguousReference) {
  int seed = 200;
  for (const PagedCase& c : one_page_cases()) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    const PagedInputs in = testing::make_paged_inputs(c, rng);
    Tensor o = testing::poisoned({c.T(), c.HQ, c.d_v}, DType::kF32);
    ASSERT_OK(paged_attention(params(c, in, o)));
    const int64_t page = in.page_table.host<int32_t>()[0];
    const TensorView v = in.v_pages.view().select(page);
    const std::vector<double> want = contiguous_attention_reference(
        c, testing::to_f64(in.q), testing::to_f64(in.k_pages.view().select(page)),
        c.d_rope > 0 ? testing::to_f64(in.k_rope_pages.view().select(page)) : std::vector<double>(),
        testing::to_f64(v), c.gate ? testing::to_f64(in.gate) : std::vector<double>());
    // kOutputTolerance's bounds hold: d_qk <= 96 terms |q k| <= 2, |s| <= 0.3 * 2 * 48 (its
    // d_qk 256 cases: 256^-1/2 * 2 * 256 = 32), <= 101 keys; the reference reads the same values
    EXPECT_CLOSE(o, want, kOutputTolerance);
    // the first token of a prefill has one key, of weight exactly 1: o = v_0
    if (c.past[0] == 0 && c.T() > 0 && !c.gate && c.page_dtype == DType::kF32) {
      for (int64_t h = 0; h < c.HQ; ++h)
        EXPECT_TRUE(testing::bitwise_equal(o.view().select(0).select(h),
                                           v.select(0).select(h / (c.HQ / c.HKV))));
    }
  }
}

TEST(PagedAttentionTest, ChunksGiveTheRowsOfOneCall) {
  // 40 tokens of one sequence at once, then as calls of 1, 16 and 23 tokens over the same pages
  const PagedCase whole = {{0}, {40}, 16, 4, 2, 32, 32, 0, DType::kBF16, true};
  std::mt19937 rng(11);
  const PagedInputs in = testing::make_paged_inputs(whole, rng);
  Tensor o_whole = testing::poisoned({40, whole.HQ, whole.d_v}, DType::kF32);
  ASSERT_OK(paged_attention(params(whole, in, o_whole)));
  struct Split {
    int32_t past, n;
  };
  for (const Split s : {Split{0, 1}, Split{1, 16}, Split{17, 23}, Split{39, 1}}) {
    SCOPED_TRACE(str_cat("past", s.past, "_n", s.n));
    PagedCase chunk = whole;
    chunk.past = {s.past};
    chunk.new_tokens = {s.n};
    PagedInputs part = in;
    part.q = testing::contiguous_f32(in.q.view().slice(s.past, s.past + s.n));
    part.gate = testing::contiguous_f32(in.gate.view().slice(s.past, s.past + s.n));
    part.cu_seqlens = testing::cu_seqlens_tensor(chunk);
    part.past = testing::int32_tensor(chunk.past);
    Tensor o = testing::poisoned({s.n, whole.HQ, whole.d_v}, DType::kF32);
    ASSERT_OK(paged_attention(params(chunk, part, o)));
    EXPECT_TRUE(testing::bitwise_equal(o, o_whole.view().slice(s.past, s.past + s.n)));
  }
}

TEST(PagedAttentionTest, RejectsBadArguments) {
  const PagedCase c = {{2, 0}, {3, 3}, 4, 4, 2, 8, 8};  // 2 pages, then 1 (table [2, 3])
  std::mt19937 rng(5);
  const PagedInputs in = testing::make_paged_inputs(c, rng);
  Tensor o = testing::poisoned({c.T(), c.HQ, c.d_v}, DType::kF32);
  Tensor k_bf16 = testing::random_uniform({in.num_pages, 4, 2, 8}, DType::kBF16, rng);
  Tensor q_wide = testing::random_uniform({c.T(), 4, 9}, DType::kF32, rng);
  Tensor rope = testing::random_uniform({in.num_pages, 4, 1, 2}, DType::kF32, rng);
  Tensor q_3_heads = testing::random_uniform({c.T(), 3, 8}, DType::kF32, rng);
  Tensor o_3_heads = testing::poisoned({c.T(), 3, 8}, DType::kF32);
  Tensor bad_page = testing::int32_tensor({1, 99, -1, 0, -1, -1});
  Tensor short_table = testing::int32_tensor({1, 0});
  Tensor negative_past = testing::int32_tensor({-1, 0});
  Tensor bad_cu = testing::int32_tensor({0, 3, 7});
  Tensor gate_short = testing::random_uniform({c.T(), 4, 7}, DType::kF32, rng);
  const TensorView table_2d = in.page_table.view();
  const PagedAttentionParams good = params(c, in, o);
  struct ErrorCase {
    const char* name;
    std::function<void(PagedAttentionParams&)> change;
    const char* error;
  };
  const ErrorCase cases[] = {
      {"page_dtypes", [&](PagedAttentionParams& p) { p.k_pages = k_bf16; },
       "paged_attention: v_pages has dtype f32, expected bf16"},
      {"d_qk", [&](PagedAttentionParams& p) { p.q = q_wide; },
       "paged_attention: q has d_qk = 9, the keys d_k = 8, expected equal"},
      {"rope_d_qk", [&](PagedAttentionParams& p) { p.k_rope_pages = rope; },
       "paged_attention: q has d_qk = 8, the keys d_k = 8 + d_rope = 2, expected equal"},
      {"gqa_ratio",
       [&](PagedAttentionParams& p) {
         p.q = q_3_heads;
         p.o = o_3_heads;
       },
       "HQ = 3 query heads and HKV = 2 kv heads"},
      {"gate_shape", [&](PagedAttentionParams& p) { p.gate = gate_short; },
       "paged_attention: gate has shape [6, 4, 7], expected [6, 4, 8] (T, HQ, d_v)"},
      {"page_id",
       [&](PagedAttentionParams& p) {
         p.index.page_table = TensorView(bad_page.view().raw(), DType::kI32, {2, 3});
       },
       "paged_attention: page_table[0, 1] is 99, outside [0, 4)"},
      {"table_short",
       [&](PagedAttentionParams& p) {
         p.index.page_table = TensorView(short_table.view().raw(), DType::kI32, {2, 1});
       },
       "paged_attention: sequence 0 has 5 positions, its page table 1 pages of 4 rows"},
      {"negative_past", [&](PagedAttentionParams& p) { p.index.past = negative_past; },
       "paged_attention: past[0] is -1, expected >= 0"},
      {"cu_end", [&](PagedAttentionParams& p) { p.index.cu_seqlens = bad_cu; },
       "paged_attention: cu_seqlens[B] is 7"},
      {"table_rows",
       [&](PagedAttentionParams& p) { p.index.page_table = table_2d.narrow(0, 0, 1); },
       "paged_attention: page_table has shape"},
      {"o_aliases_q", [&](PagedAttentionParams& p) { p.o = p.q; },
       "paged_attention: o aliases an input"},
      {"scale_nan",
       [&](PagedAttentionParams& p) { p.scale = std::numeric_limits<float>::quiet_NaN(); },
       "paged_attention: scale is nan"},
      {"missing_v", [&](PagedAttentionParams& p) { p.v_pages = {}; },
       "paged_attention: v_pages is missing"},
      {"decode_splits", [&](PagedAttentionParams& p) { p.decode_splits = -1; },
       "paged_attention: decode_splits is -1, expected 0 (auto) to 1024"},
      {"decode_splits_many", [&](PagedAttentionParams& p) { p.decode_splits = 1025; },
       "paged_attention: decode_splits is 1025, expected 0 (auto) to 1024"},
  };
  for (const ErrorCase& e : cases) {
    SCOPED_TRACE(e.name);
    PagedAttentionParams p = good;
    e.change(p);
    EXPECT_ERROR_CONTAINS(paged_attention(p), e.error);
  }
  EXPECT_OK(paged_attention(good));
}

}  // namespace
}  // namespace hyla::kernels
