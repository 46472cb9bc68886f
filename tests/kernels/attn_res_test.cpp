// Attention-Residual mixture against a float64 reference of the Block AttnRes formula: n = 0 .. 8
// candidates' snapshots, blocks as the first n rows of a wider bank (the model's use), strided
// partial sums and outputs, bf16 score vectors, large scores (softmax overflow), the score's scale
// invariance; argument errors.
#include "kernels/attn_res.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "strided_views.h"
#include "testing.h"

namespace hyla::kernels {
namespace {

using testing::padded_numel;
using testing::padded_view;
using testing::Tolerance;

struct Mixture {
  std::vector<double> y;      ///< [T, d]
  std::vector<double> probs;  ///< [T, n + 1]
};

/// float64: rows = [blocks[t, 0..n-1], partial[t]];
/// score_j = (rows_j / sqrt(mean(rows_j^2) + eps)) . cw;  p = softmax(score);  y = sum_j p_j
/// rows_j. blocks [T, n, d], partial [T, d], cw [d], all row-major.
Mixture attn_res_reference(const std::vector<double>& blocks, const std::vector<double>& partial,
                           const std::vector<double>& cw, int64_t T, int64_t n, int64_t d,
                           double eps) {
  Mixture out{std::vector<double>(size_t(T * d)), std::vector<double>(size_t(T * (n + 1)))};
  for (int64_t t = 0; t < T; ++t) {
    auto row = [&](int64_t j) {
      return j < n ? &blocks[size_t((t * n + j) * d)] : &partial[size_t(t * d)];
    };
    std::vector<double> score(size_t(n + 1));
    for (int64_t j = 0; j <= n; ++j) {
      double sum_sq = 0, dot = 0;
      for (int64_t i = 0; i < d; ++i) sum_sq += row(j)[i] * row(j)[i];
      const double inv_rms = 1.0 / std::sqrt(sum_sq / double(d) + eps);
      for (int64_t i = 0; i < d; ++i) dot += row(j)[i] * inv_rms * cw[size_t(i)];
      score[size_t(j)] = dot;
    }
    const double top = *std::max_element(score.begin(), score.end());
    double total = 0;
    for (double& s : score) total += (s = std::exp(s - top));
    for (int64_t j = 0; j <= n; ++j) {
      const double p = score[size_t(j)] / total;
      out.probs[size_t(t * (n + 1) + j)] = p;
      for (int64_t i = 0; i < d; ++i) out.y[size_t(t * d + i)] += p * row(j)[i];
    }
  }
  return out;
}

// y is a convex combination of O(1..10) rows: fp32 accumulation over d <= 7168 for the scores
// (relative ~1e-6 each, so p moves by ~1e-6 relative per unit of score) plus n + 1 products per
// element. 1e-5 relative / 1e-5 absolute is ~10x that; a wrong norm, a missing eps or scores
// over the normed instead of the raw rows move y by >= 1e-3.
constexpr Tolerance kMixTolerance = {
    .atol = 1e-5, .rtol = 1e-5, .why = "fp32 dot products over d, softmax, n + 1 products"};
constexpr Tolerance kProbTolerance = {
    .atol = 1e-6, .rtol = 1e-5, .why = "fp32 scores over d, expf, one division"};

struct AttnResCase {
  int64_t T, n, d;
  int64_t bank = 0;  ///< blocks are the first n of `bank` rows per token (0: exactly n)
  bool strided = false;
  DType cw_dtype = DType::kF32;
  float score_scale = 1.0f;  ///< cw magnitude: large values test the softmax's max subtraction

  std::string name() const {
    return str_cat("T", T, "_n", n, "_d", d, bank ? str_cat("_bank", bank) : "",
                   strided ? "_strided" : "", cw_dtype == DType::kBF16 ? "_cwbf16" : "",
                   score_scale != 1.0f ? str_cat("_scale", score_scale) : "");
  }
};

const AttnResCase kCases[] = {
    {1, 0, 8},                                  // the first layer: the partial sum alone
    {5, 0, 37, 0, true},                        // n = 0 on strided views
    {1, 1, 1},                                  // d = 1
    {7, 1, 128},                                //
    {37, 2, 128, 3},                            // the tiny K3: 3 snapshots in the bank, 2 written
    {3, 3, 7168, 8},                            // K3's width, 3 of 8 written
    {65, 8, 96, 8, true},                       // a full bank, strided
    {9, 4, 33, 6, false, DType::kBF16},         // bf16 score vector
    {6, 5, 64, 0, false, DType::kF32, 500.0f},  // scores ~1e3: exp would overflow without max
    {0, 2, 16},                                 // no tokens
};

TEST(AttnResTest, MatchesFloat64Reference) {
  int seed = 0;
  for (const AttnResCase& c : kCases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(uint32_t(++seed));
    const int64_t bank_rows = c.bank > 0 ? c.bank : std::max<int64_t>(c.n, 1);
    const int64_t pad = c.strided ? 5 : 0, offset = c.strided ? 3 : 0;
    // Rows of different scales (a snapshot's magnitude grows over blocks): per-row factors 0.1..10
    Tensor bank_storage = testing::random_normal({padded_numel({c.T, bank_rows, c.d}, pad, offset)},
                                                 DType::kF32, rng);
    const TensorView bank = padded_view(bank_storage, {c.T, bank_rows, c.d}, pad, offset);
    std::uniform_real_distribution<float> log_scale(-2.3f, 2.3f);
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t j = 0; j < bank_rows; ++j) {
        const float factor = std::exp(log_scale(rng));
        float* row = bank.data<float>() + t * bank.stride(0) + j * bank.stride(1);
        for (int64_t i = 0; i < c.d; ++i) row[i] *= factor;
      }
    Tensor partial_storage =
        testing::random_normal({padded_numel({c.T, c.d}, pad, offset)}, DType::kF32, rng);
    const TensorView partial = padded_view(partial_storage, {c.T, c.d}, pad, offset);
    const Tensor cw = testing::random_normal({c.d}, c.cw_dtype, rng, 0.0f,
                                             c.score_scale * 1.5f / std::sqrt(float(c.d)));
    const TensorView blocks = c.n > 0 ? bank.narrow(1, 0, c.n) : TensorView();

    std::vector<double> blocks64;
    if (c.n > 0) blocks64 = testing::to_f64(blocks);
    const Mixture want = attn_res_reference(blocks64, testing::to_f64(partial), testing::to_f64(cw),
                                            c.T, c.n, c.d, 1e-5);

    Tensor y_storage = testing::poisoned({padded_numel({c.T, c.d}, pad, offset)}, DType::kF32);
    const TensorView y = padded_view(y_storage, {c.T, c.d}, pad, offset);
    Tensor probs = testing::poisoned({c.T, c.n + 1}, DType::kF32);
    ASSERT_OK(attn_res(
        {.blocks = blocks, .partial = partial, .cw = cw, .eps = 1e-5f, .y = y, .probs = probs}));
    EXPECT_CLOSE(y, want.y, kMixTolerance);
    EXPECT_CLOSE(probs, want.probs, kProbTolerance);
    EXPECT_TRUE(testing::untouched_outside(y_storage, y));

    // Without probs the mixture is the same, bit for bit.
    Tensor y2 = testing::poisoned({c.T, c.d}, DType::kF32);
    ASSERT_OK(attn_res({.blocks = blocks, .partial = partial, .cw = cw, .eps = 1e-5f, .y = y2}));
    EXPECT_TRUE(testing::bitwise_equal(y2, y));
  }
}

TEST(AttnResTest, PartialAloneIsCopiedExactly) {
  // n = 0 (layer 0's attention input): softmax over one candidate is exactly 1.
  std::mt19937 rng(3);
  Tensor partial = testing::random_normal({4, 24}, DType::kF32, rng, 0.0f, 100.0f);
  Tensor cw = testing::random_normal({24}, DType::kF32, rng);
  Tensor y = testing::poisoned({4, 24}, DType::kF32);
  ASSERT_OK(attn_res({.blocks = {}, .partial = partial, .cw = cw, .eps = 1e-5f, .y = y}));
  EXPECT_TRUE(testing::bitwise_equal(y, partial));
}

TEST(AttnResTest, ScoreIgnoresARowsScale) {
  // The score normalises each row: scaling a snapshot by 1000 keeps its weight (up to eps), while
  // the mixture takes the raw, scaled row.
  std::mt19937 rng(4);
  const int64_t T = 3, n = 2, d = 64;
  Tensor blocks = testing::random_normal({T, n, d}, DType::kF32, rng);
  Tensor scaled = blocks.clone();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < d; ++i) scaled.data<float>()[(t * n + 1) * d + i] *= 1000.0f;
  Tensor partial = testing::random_normal({T, d}, DType::kF32, rng);
  Tensor cw = testing::random_normal({d}, DType::kF32, rng, 0.0f, 0.2f);
  Tensor y = Tensor::empty({T, d}, DType::kF32), y_scaled = Tensor::empty({T, d}, DType::kF32);
  Tensor p = Tensor::empty({T, n + 1}, DType::kF32),
         p_scaled = Tensor::empty({T, n + 1}, DType::kF32);
  ASSERT_OK(
      attn_res({.blocks = blocks, .partial = partial, .cw = cw, .eps = 1e-5f, .y = y, .probs = p}));
  ASSERT_OK(attn_res({.blocks = scaled,
                      .partial = partial,
                      .cw = cw,
                      .eps = 1e-5f,
                      .y = y_scaled,
                      .probs = p_scaled}));
  EXPECT_CLOSE(
      p_scaled, testing::to_f64(p),
      {.atol = 1e-5, .rtol = 0, .why = "eps 1e-5 against mean(x^2) ~1 moves the score 5e-6"});
  double largest = 0;
  for (double v : testing::to_f64(y_scaled)) largest = std::max(largest, std::abs(v));
  EXPECT_GT(largest, 10.0) << "the mixture must use the raw (scaled) rows";
}

TEST(AttnResTest, RejectsBadArguments) {
  std::mt19937 rng(5);
  const int64_t T = 3, n = 2, d = 8;
  Tensor blocks = testing::random_normal({T, n, d}, DType::kF32, rng);
  Tensor blocks_wrong_d = testing::random_normal({T, n, d + 1}, DType::kF32, rng);
  Tensor blocks_empty = Tensor::empty({T, 0, d}, DType::kF32);
  Tensor blocks_bf16 = testing::random_normal({T, n, d}, DType::kBF16, rng);
  Tensor partial = testing::random_normal({T, d}, DType::kF32, rng);
  Tensor cw = testing::random_normal({d}, DType::kF32, rng);
  Tensor cw_short = testing::random_normal({d - 1}, DType::kF32, rng);
  Tensor y = testing::poisoned({T, d}, DType::kF32);
  Tensor probs_wrong = testing::poisoned({T, n}, DType::kF32);
  const TensorView y_in_blocks(blocks.view().raw(), DType::kF32, {T, d});
  const AttnResParams good = {.blocks = blocks, .partial = partial, .cw = cw, .eps = 1e-5f, .y = y};

  struct ErrorCase {
    const char* name;
    std::function<void(AttnResParams&)> change;
    const char* error;
  };
  const ErrorCase cases[] = {
      {"missing_partial", [&](AttnResParams& p) { p.partial = {}; },
       "attn_res: partial is missing"},
      {"blocks_d", [&](AttnResParams& p) { p.blocks = blocks_wrong_d; },
       "attn_res: blocks has shape [3, 2, 9], expected [3, *, 8] (T, n, d)"},
      {"blocks_empty", [&](AttnResParams& p) { p.blocks = blocks_empty; },
       "expected n >= 1 (leave blocks undefined for none)"},
      {"blocks_dtype", [&](AttnResParams& p) { p.blocks = blocks_bf16; },
       "attn_res: blocks has dtype bf16, expected f32"},
      {"cw_shape", [&](AttnResParams& p) { p.cw = cw_short; },
       "attn_res: cw has shape [7], expected [8] (d)"},
      {"probs_shape", [&](AttnResParams& p) { p.probs = probs_wrong; },
       "attn_res: probs has shape [3, 2], expected [3, 3] (T, n + 1)"},
      {"y_is_partial", [&](AttnResParams& p) { p.y = partial; },
       "attn_res: y overlaps partial; the mixture is written to its own buffer"},
      {"y_in_blocks", [&](AttnResParams& p) { p.y = y_in_blocks; }, "attn_res: y overlaps blocks"},
      {"eps_zero", [&](AttnResParams& p) { p.eps = 0.0f; },
       "attn_res: eps is 0, expected a finite value > 0"},
      {"missing_y", [&](AttnResParams& p) { p.y = {}; }, "attn_res: y is missing"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    AttnResParams p = good;
    c.change(p);
    EXPECT_ERROR_CONTAINS(attn_res(p), c.error);
  }
  EXPECT_OK(attn_res(good));
}

}  // namespace
}  // namespace hyla::kernels
