// The greedy pick (kernels/argmax.h) is runtime::Sampler's greedy rule, row for row: random rows,
// rows full of ties, NaN / +-inf anywhere (first column included), all -inf, one column; the
// census counts every non-finite value and names the lowest. Bad arguments are refused.
#include "kernels/argmax.h"

#include <cmath>
#include <limits>
#include <random>

#include "runtime/sampling.h"
#include "testing.h"

namespace hyla::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// Rows of V logits: random, then row r gets the special pattern r % 8.
Tensor special_rows(int64_t B, int64_t V, std::mt19937& rng) {
  Tensor logits = testing::random_uniform({B, V}, DType::kF32, rng, -4.0f, 4.0f);
  float* x = logits.host<float>();
  std::uniform_int_distribution<int64_t> column(0, V - 1);
  for (int64_t b = 0; b < B; ++b) {
    float* row = x + b * V;
    switch (b % 8) {
      case 1:  // ties: a few columns share the max
        for (int i = 0; i < 4; ++i) row[column(rng)] = 9.0f;
        break;
      case 2:  // NaN first and scattered
        row[0] = kNaN;
        row[column(rng)] = kNaN;
        break;
      case 3:  // +inf twice: the lower id
        row[column(rng)] = kInf;
        row[column(rng)] = kInf;
        break;
      case 4:  // all -inf
        for (int64_t v = 0; v < V; ++v) row[v] = -kInf;
        break;
      case 5:  // all NaN but one -inf
        for (int64_t v = 0; v < V; ++v) row[v] = kNaN;
        row[column(rng)] = -kInf;
        break;
      case 6:  // all equal: id 0
        for (int64_t v = 0; v < V; ++v) row[v] = 1.5f;
        break;
      default: break;
    }
  }
  return logits;
}

TEST(ArgmaxTest, MatchesSamplerGreedyAndCountsNonFinite) {
  std::mt19937 rng(20261201);
  for (const auto& [B, V] : {std::pair<int64_t, int64_t>{16, 1}, {16, 7}, {24, 1000}, {9, 4099}}) {
    SCOPED_TRACE(str_cat("B", B, "_V", V));
    const Tensor logits = special_rows(B, V, rng);
    Tensor ids = testing::poisoned({B}, DType::kI32), bad = testing::poisoned({B}, DType::kI32),
           first = testing::poisoned({B}, DType::kI32);
    Tensor value = testing::poisoned({B}, DType::kF32);
    ASSERT_OK(argmax({.logits = logits,
                      .ids = ids,
                      .non_finite = bad,
                      .first_bad = first,
                      .first_bad_value = value}));
    runtime::Sampler greedy(runtime::SamplingParams{});
    for (int64_t b = 0; b < B; ++b) {
      const float* row = logits.host<float>() + b * V;
      EXPECT_EQ(ids.host<int32_t>()[b], greedy.sample({row, size_t(V)})) << "row " << b;
      int32_t count = 0, lowest = -1;
      for (int64_t v = 0; v < V; ++v)
        if (!std::isfinite(row[v])) {
          if (lowest < 0) lowest = int32_t(v);
          ++count;
        }
      EXPECT_EQ(bad.host<int32_t>()[b], count) << "row " << b;
      EXPECT_EQ(first.host<int32_t>()[b], lowest) << "row " << b;
      const float want = lowest >= 0 ? row[lowest] : 0.0f, got = value.host<float>()[b];
      EXPECT_TRUE(std::isnan(want) ? std::isnan(got) : got == want) << "row " << b;
    }
  }
}

TEST(ArgmaxTest, RefusesBadArguments) {
  const Tensor logits = Tensor::zeros({2, 5}, DType::kF32);
  Tensor ids = Tensor::zeros({2}, DType::kI32), bad = Tensor::zeros({2}, DType::kI32),
         first = Tensor::zeros({2}, DType::kI32);
  const Tensor wrong_len = Tensor::zeros({3}, DType::kI32),
               f32_ids = Tensor::zeros({2}, DType::kF32),
               no_columns = Tensor::zeros({2, 0}, DType::kF32),
               bf16 = Tensor::zeros({2, 5}, DType::kBF16);
  EXPECT_FALSE(
      argmax({.logits = logits, .ids = wrong_len, .non_finite = bad, .first_bad = first}).ok());
  EXPECT_FALSE(
      argmax({.logits = logits, .ids = f32_ids, .non_finite = bad, .first_bad = first}).ok());
  EXPECT_FALSE(
      argmax({.logits = no_columns, .ids = ids, .non_finite = bad, .first_bad = first}).ok());
  EXPECT_FALSE(argmax({.logits = bf16, .ids = ids, .non_finite = bad, .first_bad = first}).ok());
  const Status missing = argmax({.logits = logits, .ids = ids, .non_finite = bad, .first_bad = {}});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("first_bad"), std::string::npos) << missing.message();
}

}  // namespace
}  // namespace hyla::kernels
