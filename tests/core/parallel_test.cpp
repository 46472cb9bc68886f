// parallel.h: parallel_for runs every index exactly once, at any size and when nested.
#include "core/parallel.h"

#include <atomic>
#include <cstdint>
#include <vector>

#include "testing.h"

namespace hyla {
namespace {

/// How often parallel_for(n) ran each index.
std::vector<int> visit_counts(int64_t n) {
  std::vector<std::atomic<int>> counts(static_cast<size_t>(n));
  parallel_for(n, [&](int64_t i) { counts[size_t(i)].fetch_add(1, std::memory_order_relaxed); });
  std::vector<int> out(static_cast<size_t>(n));
  for (size_t i = 0; i < out.size(); ++i) out[i] = counts[i].load();
  return out;
}

TEST(ParallelTest, EveryIndexExactlyOnce) {
  for (int64_t n : {1, 2, 3, 7, 64, 1000, 100'003}) {
    SCOPED_TRACE(n);
    const std::vector<int> counts = visit_counts(n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(counts[size_t(i)], 1) << "index " << i;
  }
}

TEST(ParallelTest, EmptyAndNegativeRangesRunNothing) {
  int calls = 0;
  parallel_for(0, [&](int64_t) { ++calls; });
  parallel_for(-5, [&](int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ParallelTest, NestedLoopsCoverTheGrid) {
  constexpr int64_t kOuter = 6, kInner = 257;
  std::vector<std::atomic<int>> counts(size_t(kOuter * kInner));
  parallel_for(kOuter, [&](int64_t o) {
    parallel_for(kInner, [&](int64_t i) { counts[size_t(o * kInner + i)].fetch_add(1); });
  });
  for (size_t i = 0; i < counts.size(); ++i) ASSERT_EQ(counts[i].load(), 1) << "cell " << i;
}

TEST(ParallelTest, UnevenWorkStillCoversEveryIndex) {
  // Iteration cost grows with i, as with varlen sequences of very different lengths.
  std::vector<int64_t> sums(300, 0);
  parallel_for(300, [&](int64_t i) {
    int64_t s = 0;
    for (int64_t j = 0; j <= i * 100; ++j) s += j % 7;
    sums[size_t(i)] = s;
  });
  for (int64_t i = 0; i < 300; ++i) {
    int64_t want = 0;
    for (int64_t j = 0; j <= i * 100; ++j) want += j % 7;
    ASSERT_EQ(sums[size_t(i)], want) << "index " << i;
  }
}

TEST(ParallelTest, ThreadCountCanBeSetAndRestored) {
  const int before = num_threads();
  EXPECT_GE(before, 1);
  set_num_threads(3);
  EXPECT_EQ(num_threads(), 3);
  const std::vector<int> counts = visit_counts(1000);
  for (int c : counts) ASSERT_EQ(c, 1);
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  EXPECT_EQ(visit_counts(10), std::vector<int>(10, 1));
  set_num_threads(0);  // back to OpenMP's default: one per processor
  EXPECT_GE(num_threads(), 1);
  set_num_threads(before);
  EXPECT_EQ(num_threads(), before);
}

}  // namespace
}  // namespace hyla
