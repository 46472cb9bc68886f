// Grouped expert projection (CPU body) against a float64 reference: every output within the
// fp32 summation bound, rows outside every expert's block and row padding left untouched; equal
// bit for bit to one kernels::linear per expert (the numbers a mixture of experts gave before);
// f32 and bf16 weights, empty experts, a skewed routing, strided x / y. Argument errors.
#include "kernels/moe_grouped_linear.h"

#include <cmath>
#include <random>
#include <vector>

#include "kernels/linear.h"
#include "moe_grouped_linear_cases.h"
#include "strided_views.h"
#include "testing.h"

namespace hyla::kernels {
namespace {

using testing::GroupedCase;
using testing::padded_numel;
using testing::padded_view;

const GroupedCase kCases[] = {
    {.E = 1, .K = 1, .Nout = 1},
    {.E = 7,
     .K = 33,
     .Nout = 17,
     .rows = 3,
     .weight_dtype = DType::kF32,
     .lead = 2,
     .tail = 3,
     .pad = 3,
     .offset = 1},
    {.E = 16, .K = 64, .Nout = 40, .rows = 10, .skewed = true},
    {.E = 4, .K = 130, .Nout = 9, .rows = 1, .tail = 1},
    {.E = 9, .K = 20, .Nout = 70, .rows = 6, .weight_dtype = DType::kF32, .skewed = true, .pad = 2},
};

struct GroupedInputs {
  std::vector<int32_t> offsets;
  Tensor x_storage, weight, y_storage;
  TensorView x, y;
  int64_t N;
};

GroupedInputs random_inputs(const GroupedCase& c, std::mt19937& rng) {
  GroupedInputs in;
  in.offsets = testing::random_offsets(c, rng);
  in.N = in.offsets.back() + c.tail;
  in.x_storage =
      testing::random_uniform({padded_numel({in.N, c.K}, c.pad, c.offset)}, DType::kF32, rng);
  in.x = padded_view(in.x_storage, {in.N, c.K}, c.pad, c.offset);
  in.weight = testing::random_uniform({c.E, c.Nout, c.K}, c.weight_dtype, rng);
  in.y_storage = testing::poisoned({padded_numel({in.N, c.Nout}, c.pad, c.offset)}, DType::kF32);
  in.y = padded_view(in.y_storage, {in.N, c.Nout}, c.pad, c.offset);
  return in;
}

TEST(MoeGroupedLinearTest, MatchesFloat64Reference) {
  int seed = 0;
  for (const GroupedCase& c : kCases) {
    ++seed;
    SCOPED_TRACE(c.name() + str_cat("_seed", seed));
    std::mt19937 rng(seed);
    GroupedInputs in = random_inputs(c, rng);
    const Tensor offsets = testing::int32_tensor(in.offsets);
    ASSERT_OK(
        moe_grouped_linear({.x = in.x, .weight = in.weight, .expert_offsets = offsets, .y = in.y}));

    const std::vector<double> xs = testing::to_f64(in.x), ws = testing::to_f64(in.weight),
                              ys = testing::to_f64(in.y);
    const std::vector<double> scale = testing::product_scales(in.x, in.weight, in.offsets).abs_sum;
    // fp32 sums of K products (FMA or not, any order): |error| <= K 2^-24 sum_k |x w|
    const double bound = double(c.K) * std::ldexp(1.0, -24);
    int failures = 0;
    for (int64_t e = 0; e < c.E; ++e)
      for (int64_t p = in.offsets[size_t(e)]; p < in.offsets[size_t(e) + 1]; ++p)
        for (int64_t n = 0; n < c.Nout; ++n) {
          double want = 0;
          for (int64_t k = 0; k < c.K; ++k)
            want += xs[size_t(p * c.K + k)] * ws[size_t((e * c.Nout + n) * c.K + k)];
          const double got = ys[size_t(p * c.Nout + n)];
          const double tol = bound * scale[size_t(p * c.Nout + n)] + 1e-30;
          if (!(std::abs(got - want) <= tol) && ++failures <= 5)
            ADD_FAILURE() << "y[p=" << p << ", n=" << n << "] (expert " << e << ") = " << got
                          << ", want " << want << ", tolerance " << tol;
        }
    EXPECT_EQ(failures, 0);
    // rows outside [offsets[0], offsets[E]) and the row padding keep their poison
    EXPECT_TRUE(testing::untouched_outside(in.y_storage,
                                           in.y.slice(in.offsets.front(), in.offsets.back())));
  }
}

TEST(MoeGroupedLinearTest, EqualsOneLinearPerExpert) {
  int seed = 100;
  for (const GroupedCase& c : kCases) {
    ++seed;
    SCOPED_TRACE(c.name() + str_cat("_seed", seed));
    std::mt19937 rng(seed);
    GroupedInputs in = random_inputs(c, rng);
    ASSERT_OK(moe_grouped_linear({.x = in.x,
                                  .weight = in.weight,
                                  .expert_offsets = testing::int32_tensor(in.offsets),
                                  .y = in.y}));
    Tensor want = testing::poisoned({in.N, c.Nout}, DType::kF32);
    for (int64_t e = 0; e < c.E; ++e) {
      const int64_t begin = in.offsets[size_t(e)], end = in.offsets[size_t(e) + 1];
      if (begin == end) continue;
      ASSERT_OK(linear({.x = in.x.slice(begin, end),
                        .weight = in.weight.view().select(e),
                        .y = want.view().slice(begin, end)}));
    }
    const int64_t first = in.offsets.front(), last = in.offsets.back();
    EXPECT_TRUE(testing::bitwise_equal(in.y.slice(first, last), want.view().slice(first, last)));
  }
}

TEST(MoeGroupedLinearTest, RejectsBadArguments) {
  std::mt19937 rng(7);
  const int64_t E = 3, N = 5, K = 8, Nout = 4;
  const Tensor x = testing::random_uniform({N, K}, DType::kF32, rng);
  const Tensor w = testing::random_uniform({E, Nout, K}, DType::kBF16, rng);
  const Tensor y = Tensor::empty({N, Nout}, DType::kF32);
  const Tensor offsets = testing::int32_tensor({0, 2, 2, 5});
  const MoeGroupedLinearParams good{.x = x, .weight = w, .expert_offsets = offsets, .y = y};
  EXPECT_OK(moe_grouped_linear(good));

  auto with = [&](auto change) {
    MoeGroupedLinearParams p = good;
    change(p);
    return moe_grouped_linear(p);
  };
  const Tensor decreasing = testing::int32_tensor({0, 3, 2, 5});
  EXPECT_ERROR_CONTAINS(with([&](auto& p) { p.expert_offsets = decreasing; }), "expert 1");
  const Tensor past_end = testing::int32_tensor({0, 2, 2, 6});
  EXPECT_ERROR_CONTAINS(with([&](auto& p) { p.expert_offsets = past_end; }), "<= N = 5");
  const Tensor negative = testing::int32_tensor({-1, 2, 2, 5});
  EXPECT_ERROR_CONTAINS(with([&](auto& p) { p.expert_offsets = negative; }), "expert 0");
  const Tensor short_offsets = testing::int32_tensor({0, 2, 5});
  EXPECT_ERROR_CONTAINS(with([&](auto& p) { p.expert_offsets = short_offsets; }), "expert_offsets");
  const Tensor w_wrong_k = Tensor::empty({E, Nout, K + 1}, DType::kBF16);
  EXPECT_ERROR_CONTAINS(with([&](auto& p) { p.weight = w_wrong_k; }), "weight");
  const Tensor y_wrong = Tensor::empty({N, Nout + 1}, DType::kF32);
  EXPECT_ERROR_CONTAINS(with([&](auto& p) { p.y = y_wrong; }), "y");
  const Tensor x_bf16 = Tensor::empty({N, K}, DType::kBF16);
  EXPECT_ERROR_CONTAINS(with([&](auto& p) { p.x = x_bf16; }), "x");
  const Tensor w_f16 = Tensor::empty({E, Nout, K}, DType::kF16);
  EXPECT_ERROR_CONTAINS(with([&](auto& p) { p.weight = w_f16; }), "weight");
  // each expert's block must be contiguous: every other row of a wider weight is not
  const Tensor w_wide = Tensor::empty({E, 2 * Nout, K}, DType::kBF16);
  const TensorView w_rows =
      TensorView(w_wide.view().raw(), DType::kBF16, 3, std::vector<int64_t>{E, Nout, K}.data(),
                 std::vector<int64_t>{2 * Nout * K, 2 * K, 1}.data());
  EXPECT_ERROR_CONTAINS(with([&](auto& p) { p.weight = w_rows; }), "contiguous");
  // y sharing x's memory
  const Tensor shared = Tensor::empty({N, K}, DType::kF32);
  const TensorView y_in_x = shared.view().narrow(1, 0, Nout);
  EXPECT_ERROR_CONTAINS(with([&](auto& p) {
                          p.x = shared;
                          p.y = y_in_x;
                        }),
                        "shares memory");
}

}  // namespace
}  // namespace hyla::kernels
