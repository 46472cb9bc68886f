// kv_page_write and kv_page_gather (CPU bodies): every new token's k / v row lands in its page row
// (f32 exact, bf16 rounded to nearest even) and every other page row keeps what it held; a gather
// returns each sequence's rows in position order, then zeros; a write then a gather round-trips.
// Shuffled pages, several sequences, page sizes 1 / 16 / 64; argument errors, among them two
// tokens writing one page row.
#include "kernels/kv_pages.h"

#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kernels/paged_kv_cases.h"
#include "kernels/strided_views.h"  // bitwise_equal
#include "testing.h"

namespace hyla::kernels {
namespace {

using testing::PagedCase;

const PagedCase kCases[] = {
    {{0}, {5}, 16, 1, 2, 32, 32},
    {{3, 0, 40}, {1, 17, 1}, 1, 1, 2, 8, 24, 0, DType::kBF16},
    {{63, 1, 0}, {2, 64, 0}, 64, 1, 4, 64, 32},
    {{15, 16}, {1, 33}, 16, 1, 1, 40, 40, 0, DType::kBF16},
};

/// Rows [T, H, d] f32 and where each goes: (page, row) per token.
struct Placement {
  std::vector<int64_t> page, row;
};
Placement placement(const PagedCase& c, const Tensor& table) {
  Placement p;
  const int64_t width = table.size(1);
  for (int64_t b = 0; b < c.B(); ++b)
    for (int64_t i = 0; i < c.new_tokens[size_t(b)]; ++i) {
      const int64_t pos = c.past[size_t(b)] + i;
      p.page.push_back(table.host<int32_t>()[b * width + pos / c.page_size]);
      p.row.push_back(pos % c.page_size);
    }
  return p;
}

/// Every page row is `want` where a token was written (rows rounded to the pages' dtype), else
/// bitwise what `before` held.
void expect_written(const Tensor& pages, const Tensor& before, const Tensor& rows,
                    const Placement& at) {
  const int64_t H = pages.size(2), d = pages.size(3), ps = pages.size(1);
  std::vector<char> touched(static_cast<size_t>(pages.size(0) * ps), 0);
  for (size_t t = 0; t < at.page.size(); ++t) {
    touched[size_t(at.page[t] * ps + at.row[t])] = 1;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < d; ++i) {
        const float src = rows.host<float>()[(int64_t(t) * H + h) * d + i];
        const double want =
            pages.dtype() == DType::kF32 ? double(src) : double(bf16_to_f32(f32_to_bf16(src)));
        ASSERT_EQ(testing::page_value(pages, at.page[t], at.row[t], h, i), want)
            << "token " << t << " h " << h << " i " << i;
      }
  }
  const int64_t row_bytes = H * d * dtype_size(pages.dtype());
  for (int64_t r = 0; r < pages.size(0) * ps; ++r)
    if (!touched[size_t(r)]) {
      ASSERT_EQ(std::memcmp(static_cast<const char*>(pages.view().raw()) + r * row_bytes,
                            static_cast<const char*>(before.view().raw()) + r * row_bytes,
                            size_t(row_bytes)),
                0)
          << "page row " << r << " was not written by any token but changed";
    }
}

TEST(KvPageWriteTest, EveryTokenLandsInItsPageRowAndNothingElseChanges) {
  int seed = 0;
  for (const PagedCase& c : kCases) {
    for (bool with_v : {false, true}) {
      SCOPED_TRACE(c.name() + (with_v ? "_v" : ""));
      std::mt19937 rng(++seed);
      testing::PagedInputs in = testing::make_paged_inputs(c, rng);
      const Tensor k_before = in.k_pages.clone(), v_before = in.v_pages.clone();
      Tensor k = testing::random_uniform({c.T(), c.HKV, c.d_k}, DType::kF32, rng, -3.0f, 3.0f);
      Tensor v = testing::random_uniform({c.T(), c.HKV, c.d_v}, DType::kF32, rng, -3.0f, 3.0f);
      ASSERT_OK(kv_page_write({.k = k,
                               .k_pages = in.k_pages,
                               .v = with_v ? v.view() : TensorView(),
                               .v_pages = with_v ? in.v_pages.view() : TensorView(),
                               .index = in.index()}));
      const Placement at = placement(c, in.page_table);
      expect_written(in.k_pages, k_before, k, at);
      if (with_v)
        expect_written(in.v_pages, v_before, v, at);
      else
        EXPECT_TRUE(testing::bitwise_equal(in.v_pages, v_before));
    }
  }
}

TEST(KvPageWriteTest, StridedRows) {
  // k rows are a column narrow of a wider buffer (the model's projection)
  const PagedCase c = {{2, 0}, {3, 4}, 4, 1, 2, 8, 8};
  std::mt19937 rng(3);
  testing::PagedInputs in = testing::make_paged_inputs(c, rng);
  const Tensor before = in.k_pages.clone();
  Tensor wide = testing::random_uniform({c.T(), c.HKV, 13}, DType::kF32, rng);
  ASSERT_OK(kv_page_write(
      {.k = wide.view().narrow(2, 5, 8), .k_pages = in.k_pages, .index = in.index()}));
  Tensor dense = testing::contiguous_f32(wide.view().narrow(2, 5, 8));
  expect_written(in.k_pages, before, dense, placement(c, in.page_table));
}

TEST(KvPageGatherTest, SequencesRowsInPositionOrderThenZeros) {
  int seed = 50;
  for (const PagedCase& c : kCases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    const testing::PagedInputs in = testing::make_paged_inputs(c, rng);
    int64_t R = 1;
    for (int64_t b = 0; b < c.B(); ++b)
      R = std::max<int64_t>(R, c.past[size_t(b)] + c.new_tokens[size_t(b)]);
    R += 2;  // two padding rows for every sequence
    Tensor out = testing::poisoned({c.B(), R, c.HKV, c.d_v}, DType::kF32);
    ASSERT_OK(kv_page_gather({.pages = in.v_pages, .index = in.index(), .out = out}));
    const int64_t width = in.page_table.size(1);
    for (int64_t b = 0; b < c.B(); ++b) {
      const int64_t len = c.past[size_t(b)] + c.new_tokens[size_t(b)];
      for (int64_t r = 0; r < R; ++r)
        for (int64_t h = 0; h < c.HKV; ++h)
          for (int64_t i = 0; i < c.d_v; ++i) {
            const float got = out.host<float>()[((b * R + r) * c.HKV + h) * c.d_v + i];
            const double want =
                r < len
                    ? testing::page_value(
                          in.v_pages, in.page_table.host<int32_t>()[b * width + r / c.page_size],
                          r % c.page_size, h, i)
                    : 0.0;
            ASSERT_EQ(double(got), want) << "b " << b << " r " << r << " h " << h << " i " << i;
          }
    }
  }
}

TEST(KvPagesTest, WriteThenGatherRoundTrips) {
  const PagedCase c = {{0, 5}, {9, 2}, 4, 1, 3, 16, 16};
  std::mt19937 rng(77);
  testing::PagedInputs in = testing::make_paged_inputs(c, rng);
  Tensor k = testing::random_uniform({c.T(), c.HKV, c.d_k}, DType::kF32, rng);
  ASSERT_OK(kv_page_write({.k = k, .k_pages = in.k_pages, .index = in.index()}));
  Tensor out = testing::poisoned({c.B(), 9, c.HKV, c.d_k}, DType::kF32);
  ASSERT_OK(kv_page_gather({.pages = in.k_pages, .index = in.index(), .out = out}));
  // sequence 0 is all new (rows 0..8); sequence 1's new rows are positions 5, 6
  EXPECT_TRUE(testing::bitwise_equal(out.view().select(0), k.view().slice(0, 9)));
  EXPECT_TRUE(testing::bitwise_equal(out.view().select(1).slice(5, 7), k.view().slice(9, 11)));
}

TEST(KvPagesTest, RejectsBadArguments) {
  const PagedCase c = {{2, 0}, {3, 3}, 4, 1, 2, 8, 8};  // sequence 0: 2 pages, 1: 1 (table [2, 3])
  std::mt19937 rng(5);
  testing::PagedInputs in = testing::make_paged_inputs(c, rng);
  Tensor k = testing::random_uniform({c.T(), 2, 8}, DType::kF32, rng);
  Tensor k_bf16 = testing::random_uniform({c.T(), 2, 8}, DType::kBF16, rng);
  Tensor v_pages_bf16 = testing::random_uniform({in.num_pages, 4, 2, 8}, DType::kBF16, rng);
  Tensor shared = in.page_table.clone();
  shared.host<int32_t>()[3] = shared.host<int32_t>()[0];  // sequence 1 writes rows of 0's page
  Tensor out_short = testing::poisoned({2, 4, 2, 8}, DType::kF32);
  const KvPageWriteParams good = {.k = k, .k_pages = in.k_pages, .index = in.index()};
  struct WriteError {
    const char* name;
    std::function<void(KvPageWriteParams&)> change;
    const char* error;
  };
  const WriteError cases[] = {
      {"k_dtype", [&](KvPageWriteParams& p) { p.k = k_bf16; },
       "kv_page_write: k has dtype bf16, expected f32"},
      {"v_alone", [&](KvPageWriteParams& p) { p.v = k; },
       "kv_page_write: v and v_pages go together (v given, v_pages absent)"},
      {"v_dtype",
       [&](KvPageWriteParams& p) {
         p.v = k;
         p.v_pages = v_pages_bf16;
       },
       "kv_page_write: v_pages has dtype bf16, expected f32"},
      {"same_pages",
       [&](KvPageWriteParams& p) {
         p.v = k;
         p.v_pages = p.k_pages;
       },
       "kv_page_write: v_pages and k_pages are the same memory"},
      {"shared_row", [&](KvPageWriteParams& p) { p.index.page_table = shared; },
       "kv_page_write: two new tokens write row "},
  };
  for (const WriteError& e : cases) {
    SCOPED_TRACE(e.name);
    KvPageWriteParams p = good;
    e.change(p);
    EXPECT_ERROR_CONTAINS(kv_page_write(p), e.error);
  }
  EXPECT_ERROR_CONTAINS(
      kv_page_gather({.pages = in.k_pages, .index = in.index(), .out = out_short}),
      "kv_page_gather: sequence 0 has 5 rows, out holds R = 4 per sequence");
  EXPECT_OK(kv_page_write(good));
}

}  // namespace
}  // namespace hyla::kernels
