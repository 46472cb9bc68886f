// Causal attention over a KV cache against a float64 reference: prefill (past = 0, T = 1, 7, 33),
// chunked prefill and decode (past > 0), GQA 1:1 and 4:1, d_qk != d_v (MLA), explicit scale,
// strided views; cache rows past past + T hold NaN and must not be read; a prefill split into
// chunks and decode steps gives the rows of one long prefill; argument errors.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
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

struct Dims {
  int64_t HQ, HKV, d_qk, d_v;
};

/// o[t, h] = sum_j softmax_j(scale <q[t, h], k[j, h_kv]>) v[j, h_kv], j in [0, past + t], in
/// float64. q is [T, HQ, d_qk], k [>= past + T, HKV, d_qk], v [>= past + T, HKV, d_v], row-major.
std::vector<double> attention_reference(const std::vector<double>& q, const std::vector<double>& k,
                                        const std::vector<double>& v, int64_t T, int64_t past,
                                        const Dims& n, double scale) {
  std::vector<double> o(size_t(T * n.HQ * n.d_v));
  const int64_t group = n.HQ / n.HKV;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < n.HQ; ++h) {
      const int64_t h_kv = h / group, len = past + t + 1;
      const double* q_row = q.data() + (t * n.HQ + h) * n.d_qk;
      std::vector<double> score(static_cast<size_t>(len));
      for (int64_t j = 0; j < len; ++j) {
        const double* k_row = k.data() + (j * n.HKV + h_kv) * n.d_qk;
        double dot = 0;
        for (int64_t i = 0; i < n.d_qk; ++i) dot += q_row[i] * k_row[i];
        score[size_t(j)] = scale * dot;
      }
      const double max_score = *std::max_element(score.begin(), score.end());
      double sum = 0;
      for (double& s : score) sum += (s = std::exp(s - max_score));
      double* o_row = o.data() + (t * n.HQ + h) * n.d_v;
      for (int64_t j = 0; j < len; ++j) {
        const double* v_row = v.data() + (j * n.HKV + h_kv) * n.d_v;
        for (int64_t i = 0; i < n.d_v; ++i) o_row[i] += score[size_t(j)] / sum * v_row[i];
      }
    }
  }
  return o;
}

constexpr Tolerance kOutputTolerance = {
    .atol = 2e-6,
    .rtol = 1e-5,
    .why =
        "fp32 dots of d_qk <= 64 N(0, 1) terms (|s| <= ~10, ~1e-6 relative), expf within a "
        "few ulp, and a sum of <= 150 weighted |v| <= ~4 rows"};

/// Copies rows [0, rows) of a contiguous [rows_total, heads, dim] f32 host tensor into rows
/// [0, rows) of `cache` (any strides, last dim contiguous).
void write_rows(const Tensor& src, const TensorView& cache, int64_t rows) {
  const int64_t heads = src.size(1), dim = src.size(2);
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t h = 0; h < heads; ++h)
      std::copy_n(src.data<float>() + (j * heads + h) * dim, dim,
                  static_cast<float*>(cache.raw()) + j * cache.stride(0) + h * cache.stride(1));
}

struct AttentionCase {
  int64_t T, past;
  Dims dims;
  float scale = 0.0f;
  bool strided = false;  // q = first half of [T, HQ, 2 d_qk]; caches and o padded, misaligned

  std::string name() const {
    return str_cat("T", T, "_past", past, "_HQ", dims.HQ, "_HKV", dims.HKV, "_dqk", dims.d_qk,
                   "_dv", dims.d_v, scale > 0.0f ? str_cat("_scale", scale) : "",
                   strided ? "_strided" : "");
  }
};

const AttentionCase kCases[] = {
    {1, 0, {4, 4, 32, 32}},
    {7, 0, {4, 4, 32, 32}},
    {33, 0, {8, 2, 64, 64}},           // GQA 4:1
    {7, 0, {4, 4, 48, 32}},            // MLA: d_qk = qk_nope + qk_rope = 48, d_v = 32
    {33, 0, {4, 1, 48, 32}, 0, true},  // GQA 4:1, MLA dims, strided
    {1, 40, {4, 4, 32, 32}},           // decode
    {1, 100, {8, 2, 64, 64}, 0, true},
    {1, 63, {4, 4, 48, 32}, 0.3f},
    {5, 17, {6, 3, 16, 24}, 0, true},  // chunked prefill, GQA 2:1, d_v > d_qk
    {0, 9, {4, 2, 32, 32}},            // no new tokens
};

TEST(AttentionTest, MatchesFloat64Reference) {
  int seed = 0;
  for (const AttentionCase& c : kCases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    const Dims& n = c.dims;
    const int64_t valid = c.past + c.T, S = valid + 3;
    const int64_t q_pad = c.strided ? n.d_qk : 0;  // the gate half of a fused q | gate row
    const int64_t cache_pad = c.strided ? 5 : 0, cache_offset = c.strided ? 1 : 0;
    const int64_t o_pad = c.strided ? 2 : 0, o_offset = c.strided ? 3 : 0;
    const std::vector<int64_t> q_shape = {c.T, n.HQ, n.d_qk}, o_shape = {c.T, n.HQ, n.d_v};
    const std::vector<int64_t> k_shape = {S, n.HKV, n.d_qk}, v_shape = {S, n.HKV, n.d_v};

    Tensor q_storage =
        testing::random_normal({padded_numel(q_shape, q_pad, 0)}, DType::kF32, rng, 0.0f, 1.5f);
    const TensorView q = padded_view(q_storage, q_shape, q_pad, 0);
    Tensor k_values = testing::random_normal({valid, n.HKV, n.d_qk}, DType::kF32, rng);
    Tensor v_values = testing::random_normal({valid, n.HKV, n.d_v}, DType::kF32, rng);
    // cache rows [valid, S) stay NaN: reading them would poison the output
    Tensor k_storage =
        testing::poisoned({padded_numel(k_shape, cache_pad, cache_offset)}, DType::kF32);
    Tensor v_storage =
        testing::poisoned({padded_numel(v_shape, cache_pad, cache_offset)}, DType::kF32);
    const TensorView k_cache = padded_view(k_storage, k_shape, cache_pad, cache_offset);
    const TensorView v_cache = padded_view(v_storage, v_shape, cache_pad, cache_offset);
    write_rows(k_values, k_cache, valid);
    write_rows(v_values, v_cache, valid);
    Tensor o_storage = testing::poisoned({padded_numel(o_shape, o_pad, o_offset)}, DType::kF32);
    const TensorView o = padded_view(o_storage, o_shape, o_pad, o_offset);

    const double scale = c.scale > 0.0f ? double(c.scale) : 1.0 / std::sqrt(double(n.d_qk));
    const std::vector<double> want =
        attention_reference(testing::to_f64(q), testing::to_f64(k_values),
                            testing::to_f64(v_values), c.T, c.past, n, scale);
    ASSERT_OK(attention({.q = q,
                         .k_cache = k_cache,
                         .v_cache = v_cache,
                         .past = c.past,
                         .scale = c.scale,
                         .o = o}));
    EXPECT_CLOSE(o, want, kOutputTolerance);
    EXPECT_TRUE(testing::untouched_outside(o_storage, o));
  }
}

TEST(AttentionTest, ChunksAndDecodeMatchOneLongPrefill) {
  // 43 tokens at once, then as prefill chunks of 1, 7 and 33 tokens and two decode steps over a
  // cache filled up to each step (later rows NaN)
  struct Split {
    int64_t past, T;
  };
  const Split splits[] = {{0, 1}, {1, 7}, {8, 33}, {41, 1}, {42, 1}};
  const int64_t total = 43, S = total + 2;
  int seed = 100;
  for (const Dims& n : {Dims{4, 4, 32, 32}, Dims{8, 2, 64, 64}, Dims{4, 4, 48, 32}}) {
    SCOPED_TRACE(str_cat("HQ", n.HQ, "_HKV", n.HKV, "_dqk", n.d_qk, "_dv", n.d_v));
    std::mt19937 rng(++seed);
    Tensor q = testing::random_normal({total, n.HQ, n.d_qk}, DType::kF32, rng, 0.0f, 1.5f);
    Tensor k = testing::random_normal({total, n.HKV, n.d_qk}, DType::kF32, rng);
    Tensor v = testing::random_normal({total, n.HKV, n.d_v}, DType::kF32, rng);
    Tensor o_full = testing::poisoned({total, n.HQ, n.d_v}, DType::kF32);
    ASSERT_OK(attention({.q = q, .k_cache = k, .v_cache = v, .past = 0, .o = o_full}));
    EXPECT_CLOSE(o_full,
                 attention_reference(testing::to_f64(q), testing::to_f64(k), testing::to_f64(v),
                                     total, 0, n, 1.0 / std::sqrt(double(n.d_qk))),
                 kOutputTolerance);
    // the first token sees only itself: o = v_0 exactly
    EXPECT_TRUE(
        testing::bitwise_equal(o_full.view().select(0).select(0), v.view().select(0).select(0)));

    for (const Split& s : splits) {
      SCOPED_TRACE(str_cat("past", s.past, "_T", s.T));
      Tensor k_cache = testing::poisoned({S, n.HKV, n.d_qk}, DType::kF32);
      Tensor v_cache = testing::poisoned({S, n.HKV, n.d_v}, DType::kF32);
      write_rows(k, k_cache, s.past + s.T);
      write_rows(v, v_cache, s.past + s.T);
      Tensor o = testing::poisoned({s.T, n.HQ, n.d_v}, DType::kF32);
      ASSERT_OK(attention({.q = q.view().slice(s.past, s.past + s.T),
                           .k_cache = k_cache,
                           .v_cache = v_cache,
                           .past = s.past,
                           .o = o}));
      EXPECT_CLOSE(o, testing::to_f64(o_full.view().slice(s.past, s.past + s.T)),
                   {.atol = 1e-6,
                    .rtol = 1e-6,
                    .why = "each (t, h) reads the same q row and cache rows either way; only "
                           "the evaluation order may differ"});
    }
  }
}

TEST(AttentionTest, InPlaceOverQ) {
  // o may be q itself when d_v = d_qk and the strides match
  std::mt19937 rng(9);
  const Dims n = {4, 2, 16, 16};
  const int64_t T = 6;
  Tensor q = testing::random_normal({T, n.HQ, n.d_qk}, DType::kF32, rng);
  Tensor k = testing::random_normal({T, n.HKV, n.d_qk}, DType::kF32, rng);
  Tensor v = testing::random_normal({T, n.HKV, n.d_v}, DType::kF32, rng);
  const std::vector<double> want =
      attention_reference(testing::to_f64(q), testing::to_f64(k), testing::to_f64(v), T, 0, n,
                          1.0 / std::sqrt(double(n.d_qk)));
  ASSERT_OK(attention({.q = q, .k_cache = k, .v_cache = v, .o = q}));
  EXPECT_CLOSE(q, want, kOutputTolerance);
}

TEST(AttentionTest, RejectsBadArguments) {
  std::mt19937 rng(5);
  const int64_t T = 3, past = 2, S = 6, HQ = 4, HKV = 2, d = 8;
  Tensor q = testing::random_normal({T, HQ, d}, DType::kF32, rng);
  Tensor q_bf16 = testing::random_normal({T, HQ, d}, DType::kBF16, rng);
  Tensor q_3_heads = testing::random_normal({T, 3, d}, DType::kF32, rng);
  Tensor k_cache = testing::random_normal({S, HKV, d}, DType::kF32, rng);
  Tensor k_wide = testing::random_normal({S, HKV, d + 1}, DType::kF32, rng);
  Tensor v_cache = testing::random_normal({S, HKV, d}, DType::kF32, rng);
  Tensor v_one_head = testing::random_normal({S, 1, d}, DType::kF32, rng);
  Tensor o = testing::poisoned({T, HQ, d}, DType::kF32);
  Tensor o_3_heads = testing::poisoned({T, 3, d}, DType::kF32);
  Tensor o_short = testing::poisoned({T - 1, HQ, d}, DType::kF32);
  // every other element of a [S, HKV, 2d] buffer
  Tensor k_double = testing::random_normal({S, HKV, 2 * d}, DType::kF32, rng);
  const int64_t k_shape[] = {S, HKV, d}, every_other[] = {HKV * 2 * d, 2 * d, 2};
  const TensorView k_strided_last(k_double.view().raw(), DType::kF32, 3, k_shape, every_other);
  const TensorView v_on_cuda(v_cache.view().raw(), DType::kF32, {S, HKV, d}, Device::cuda(0));
  const TensorView o_over_k(k_cache.view().raw(), DType::kF32, {T, HQ, d});
  const AttentionParams good = {
      .q = q, .k_cache = k_cache, .v_cache = v_cache, .past = past, .o = o};

  struct ErrorCase {
    const char* name;
    std::function<void(AttentionParams&)> change;
    const char* error;
  };
  const ErrorCase cases[] = {
      {"k_dim", [&](AttentionParams& p) { p.k_cache = k_wide; },
       "attention: k_cache has shape [6, 2, 9], expected [*, *, 8] (S, HKV, d_qk)"},
      {"v_heads", [&](AttentionParams& p) { p.v_cache = v_one_head; },
       "attention: v_cache has shape [6, 1, 8], expected [6, 2, *] (S, HKV, d_v)"},
      {"o_shape", [&](AttentionParams& p) { p.o = o_short; },
       "attention: o has shape [2, 4, 8], expected [3, 4, 8] (T, HQ, d_v)"},
      {"q_dtype", [&](AttentionParams& p) { p.q = q_bf16; },
       "attention: q has dtype bf16, expected f32"},
      {"k_last_dim", [&](AttentionParams& p) { p.k_cache = k_strided_last; },
       "attention: k_cache must have a contiguous last dimension"},
      {"v_device", [&](AttentionParams& p) { p.v_cache = v_on_cuda; },
       "attention: v_cache is on cuda:0, expected cpu"},
      {"gqa_ratio",
       [&](AttentionParams& p) {
         p.q = q_3_heads;
         p.o = o_3_heads;
       },
       "attention: HQ = 3 query heads and HKV = 2 kv heads, expected HKV >= 1 and HQ a positive "
       "multiple of HKV"},
      {"negative_past", [&](AttentionParams& p) { p.past = -1; },
       "attention: past is -1, expected >= 0"},
      {"cache_too_short", [&](AttentionParams& p) { p.past = 4; },
       "attention: k_cache / v_cache hold S = 6 rows, expected >= past + T = 4 + 3 = 7"},
      {"scale_negative", [&](AttentionParams& p) { p.scale = -0.5f; },
       "attention: scale is -0.5, expected a finite value > 0, or 0 for d_qk^-1/2"},
      {"scale_nan", [&](AttentionParams& p) { p.scale = std::numeric_limits<float>::quiet_NaN(); },
       "attention: scale is nan"},
      {"o_aliases_cache", [&](AttentionParams& p) { p.o = o_over_k; },
       "attention: o aliases the KV cache"},
      {"missing_q", [&](AttentionParams& p) { p.q = {}; }, "attention: q is missing"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    AttentionParams p = good;
    c.change(p);
    EXPECT_ERROR_CONTAINS(attention(p), c.error);
  }
  EXPECT_OK(attention(good));
}

}  // namespace
}  // namespace hyla::kernels
