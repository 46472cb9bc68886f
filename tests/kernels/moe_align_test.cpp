// MoE slot sort (moe_align) against a reference built expert by expert, slot by slot: offsets,
// the permutation and its inverse, exactly; empty experts, repeated ids, T = 0, strided ids.
// The row gather (moe_permute): every row is its token's, bitwise; f32 and bf16; strided x;
// slots outside the range give zero rows. Argument errors of both.
#include "kernels/moe_align.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "strided_views.h"
#include "testing.h"

namespace hyla::kernels {
namespace {

using testing::padded_numel;
using testing::padded_view;

struct Alignment {
  std::vector<int32_t> offsets, sorted_slots, slot_positions;
};

/// For each expert in order, its slots in index order.
Alignment moe_align_reference(const std::vector<int32_t>& ids, int64_t E) {
  Alignment a;
  a.slot_positions.assign(ids.size(), -1);
  a.offsets.push_back(0);
  for (int64_t e = 0; e < E; ++e) {
    for (size_t slot = 0; slot < ids.size(); ++slot) {
      if (ids[slot] != e) continue;
      a.slot_positions[slot] = int32_t(a.sorted_slots.size());
      a.sorted_slots.push_back(int32_t(slot));
    }
    a.offsets.push_back(int32_t(a.sorted_slots.size()));
  }
  return a;
}

std::vector<int32_t> i32_of(const TensorView& t) {
  std::vector<int32_t> out;
  for (double v : testing::to_f64(t)) out.push_back(int32_t(v));
  return out;
}

/// [T, K] ids: distinct experts per token (as moe_route gives) unless `repeats`, drawn from the
/// first `used` experts so the others stay empty.
std::vector<int32_t> random_ids(int64_t T, int64_t K, int64_t used, bool repeats,
                                std::mt19937& rng) {
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> experts(static_cast<size_t>(used));
    for (int64_t e = 0; e < used; ++e) experts[size_t(e)] = int32_t(e);
    std::shuffle(experts.begin(), experts.end(), rng);
    for (int64_t k = 0; k < K; ++k)
      ids.push_back(repeats ? int32_t(rng() % uint32_t(used)) : experts[size_t(k)]);
  }
  return ids;
}

struct AlignCase {
  int64_t T, K, E, used;
  bool repeats = false, strided = false;
  std::string name() const {
    return str_cat("T", T, "_K", K, "_E", E, "_used", used, repeats ? "_repeats" : "",
                   strided ? "_strided" : "");
  }
};

const AlignCase kAlignCases[] = {
    {0, 2, 4, 4},
    {1, 1, 1, 1},
    {5, 2, 4, 4},
    {7, 3, 16, 5},
    {33, 8, 64, 64, false, true},
    {100, 4, 37, 20, true},
    {70, 1, 3, 3, false, true},
};

/// ids [T, K] as a (possibly strided) host view over `storage`.
TensorView ids_view(const std::vector<int32_t>& ids, int64_t T, int64_t K, bool strided,
                    Tensor* storage) {
  const int64_t pad = strided ? 3 : 0, offset = strided ? 1 : 0;
  *storage = testing::poisoned({padded_numel({T, K}, pad, offset)}, DType::kI32);
  const TensorView view = padded_view(*storage, {T, K}, pad, offset);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k)
      view.host<int32_t>()[t * view.stride(0) + k] = ids[size_t(t * K + k)];
  return view;
}

TEST(MoeAlignTest, MatchesReference) {
  int seed = 0;
  for (const AlignCase& c : kAlignCases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    const std::vector<int32_t> ids = random_ids(c.T, c.K, c.used, c.repeats, rng);
    Tensor ids_storage;
    const TensorView topk_ids = ids_view(ids, c.T, c.K, c.strided, &ids_storage);
    Tensor offsets = testing::poisoned({c.E + 1}, DType::kI32);
    Tensor sorted_slots = testing::poisoned({c.T * c.K}, DType::kI32);
    Tensor slot_positions = testing::poisoned({c.T, c.K}, DType::kI32);
    ASSERT_OK(moe_align({.topk_ids = topk_ids,
                         .num_experts = c.E,
                         .expert_offsets = offsets,
                         .sorted_slots = sorted_slots,
                         .slot_positions = slot_positions}));
    const Alignment want = moe_align_reference(ids, c.E);
    EXPECT_EQ(i32_of(offsets), want.offsets);
    EXPECT_EQ(i32_of(sorted_slots), want.sorted_slots);
    EXPECT_EQ(i32_of(slot_positions), want.slot_positions);
  }
}

TEST(MoeAlignTest, HandBuiltCase) {
  // T = 3, K = 2: token 0 -> {2, 0}, token 1 -> {0, 1}, token 2 -> {2, 3}; E = 5 (expert 4 empty)
  const std::vector<int32_t> ids = {2, 0, 0, 1, 2, 3};
  Tensor storage;
  const TensorView topk_ids = ids_view(ids, 3, 2, false, &storage);
  Tensor offsets = testing::poisoned({6}, DType::kI32);
  Tensor sorted_slots = testing::poisoned({6}, DType::kI32);
  Tensor slot_positions = testing::poisoned({3, 2}, DType::kI32);
  ASSERT_OK(moe_align({.topk_ids = topk_ids,
                       .num_experts = 5,
                       .expert_offsets = offsets,
                       .sorted_slots = sorted_slots,
                       .slot_positions = slot_positions}));
  EXPECT_EQ(i32_of(offsets), (std::vector<int32_t>{0, 2, 3, 5, 6, 6}));
  // expert 0: slots 1, 2; expert 1: slot 3; expert 2: slots 0, 4; expert 3: slot 5
  EXPECT_EQ(i32_of(sorted_slots), (std::vector<int32_t>{1, 2, 3, 0, 4, 5}));
  EXPECT_EQ(i32_of(slot_positions), (std::vector<int32_t>{3, 0, 1, 2, 4, 5}));
}

TEST(MoeAlignTest, RejectsBadArguments) {
  Tensor ids = testing::int32_tensor({0, 1, 2, 3, 1, 0});  // [3, 2] below
  const TensorView topk_ids = ids.view().reshape({3, 2});
  Tensor bad_ids = testing::int32_tensor({0, 1, 2, 4, 1, 0});
  Tensor negative_ids = testing::int32_tensor({0, -1, 2, 3, 1, 0});
  Tensor offsets = testing::poisoned({5}, DType::kI32),
         offsets_short = testing::poisoned({4}, DType::kI32);
  Tensor sorted_slots = testing::poisoned({6}, DType::kI32);
  Tensor slot_positions = testing::poisoned({3, 2}, DType::kI32);
  Tensor slot_positions_f32 = testing::poisoned({3, 2}, DType::kF32);
  const TensorView sorted_on_cuda(sorted_slots.view().raw(), DType::kI32, {6}, Device::cuda(0));
  const MoeAlignParams good = {.topk_ids = topk_ids,
                               .num_experts = 4,
                               .expert_offsets = offsets,
                               .sorted_slots = sorted_slots,
                               .slot_positions = slot_positions};
  EXPECT_OK(moe_align(good));
  MoeAlignParams p = good;
  p.topk_ids = bad_ids.view().reshape({3, 2});
  EXPECT_ERROR_CONTAINS(moe_align(p),
                        "moe_align: topk_ids[1, 1] is 4, expected an expert in [0, E = 4)");
  p = good;
  p.topk_ids = negative_ids.view().reshape({3, 2});
  EXPECT_ERROR_CONTAINS(moe_align(p), "moe_align: topk_ids[0, 1] is -1");
  p = good;
  p.expert_offsets = offsets_short;
  EXPECT_ERROR_CONTAINS(moe_align(p),
                        "moe_align: expert_offsets has shape [4], expected [5] (E + 1)");
  p = good;
  p.num_experts = 0;
  EXPECT_ERROR_CONTAINS(moe_align(p), "moe_align: num_experts is 0, expected >= 1");
  p = good;
  p.slot_positions = slot_positions_f32;
  EXPECT_ERROR_CONTAINS(moe_align(p), "moe_align: slot_positions has dtype f32, expected i32");
  p = good;
  p.sorted_slots = sorted_on_cuda;
  EXPECT_ERROR_CONTAINS(moe_align(p), "moe_align: sorted_slots is on cuda:0, expected cpu");
}

struct PermuteCase {
  int64_t T, K, width;
  DType dtype;
  bool strided = false;
  std::string name() const {
    return str_cat("T", T, "_K", K, "_w", width, "_", dtype_name(dtype), strided ? "_strided" : "");
  }
};

TEST(MoePermuteTest, RowsAreTheirTokens) {
  const PermuteCase cases[] = {{0, 2, 8, DType::kF32},
                               {1, 1, 1, DType::kF32},
                               {9, 3, 33, DType::kF32, true},
                               {20, 4, 130, DType::kBF16},
                               {5, 2, 7, DType::kBF16, true}};
  int seed = 100;
  for (const PermuteCase& c : cases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    const int64_t N = c.T * c.K, pad = c.strided ? 5 : 0, offset = c.strided ? 3 : 0;
    Tensor x_storage =
        testing::random_uniform({padded_numel({c.T, c.width}, pad, offset)}, c.dtype, rng);
    const TensorView x = padded_view(x_storage, {c.T, c.width}, pad, offset);
    // a random permutation of the slots, with one slot replaced by -1 and one by N (zero rows)
    std::vector<int32_t> slots(static_cast<size_t>(N));
    for (int64_t s = 0; s < N; ++s) slots[size_t(s)] = int32_t(s);
    std::shuffle(slots.begin(), slots.end(), rng);
    if (N >= 3) {
      slots[1] = -1;
      slots[2] = int32_t(N);
    }
    Tensor sorted_slots = testing::int32_tensor(slots);
    if (N == 0) sorted_slots = Tensor::empty({0}, DType::kI32);
    Tensor y_storage = testing::poisoned({padded_numel({N, c.width}, pad, 0)}, c.dtype);
    const TensorView y = padded_view(y_storage, {N, c.width}, pad, 0);
    ASSERT_OK(moe_permute({.x = x, .sorted_slots = sorted_slots, .top_k = c.K, .y = y}));
    const std::vector<double> xs = testing::to_f64(x), ys = testing::to_f64(y);
    for (int64_t p = 0; p < N; ++p) {
      const int32_t slot = slots[size_t(p)];
      for (int64_t i = 0; i < c.width; ++i) {
        const double want = slot < 0 || slot >= N ? 0.0 : xs[size_t((slot / c.K) * c.width + i)];
        ASSERT_EQ(ys[size_t(p * c.width + i)], want) << "[p=" << p << ", i=" << i << "]";
      }
    }
    EXPECT_TRUE(testing::untouched_outside(y_storage, y));
  }
}

TEST(MoePermuteTest, RejectsBadArguments) {
  std::mt19937 rng(9);
  Tensor x = testing::random_uniform({3, 4}, DType::kF32, rng);
  Tensor slots = testing::int32_tensor({0, 1, 2, 3, 4, 5});
  Tensor y = testing::poisoned({6, 4}, DType::kF32);
  Tensor y_bf16 = testing::poisoned({6, 4}, DType::kBF16);
  Tensor y_short = testing::poisoned({5, 4}, DType::kF32);
  const MoePermuteParams good = {.x = x, .sorted_slots = slots, .top_k = 2, .y = y};
  EXPECT_OK(moe_permute(good));
  MoePermuteParams p = good;
  p.y = y_bf16;
  EXPECT_ERROR_CONTAINS(moe_permute(p), "moe_permute: y has dtype bf16, expected f32");
  p = good;
  p.y = y_short;
  EXPECT_ERROR_CONTAINS(moe_permute(p),
                        "moe_permute: y has shape [5, 4], expected [6, 4] (N, width)");
  p = good;
  p.top_k = 0;
  EXPECT_ERROR_CONTAINS(moe_permute(p), "moe_permute: top_k is 0, expected >= 1");
}

}  // namespace
}  // namespace hyla::kernels
