// parallel.h: parallel_for runs every index exactly once, at any size, when nested, in many short
// regions back to back (a worker waking late must not run an item of the next region), and when
// two threads call it at once.
#include "core/parallel.h"

#include <atomic>
#include <cstdint>
#include <thread>
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
  set_num_threads(
      0);  // back to the default: one per core (or $HYLA_NUM_THREADS / $OMP_NUM_THREADS)
  EXPECT_GE(num_threads(), 1);
  set_num_threads(before);
  EXPECT_EQ(num_threads(), before);
}

TEST(ParallelTest, ManyShortRegionsBackToBack) {
  // More threads than this machine's cores, so workers are descheduled mid-region and wake into
  // later ones: each region's items must still run exactly once, and only in that region.
  const int before = num_threads();
  set_num_threads(available_cores() + 2);
  std::vector<std::atomic<int>> counts(8);
  for (int region = 0; region < 20000; ++region) {
    const int64_t n = 2 + region % 7;
    parallel_for(n, [&](int64_t i) { counts[size_t(i)].fetch_add(1, std::memory_order_relaxed); });
    for (int64_t i = 0; i < 8; ++i) {
      ASSERT_EQ(counts[size_t(i)].exchange(0), i < n ? 1 : 0)
          << "region " << region << " item " << i;
    }
  }
  set_num_threads(before);
}

TEST(ParallelTest, TwoCallingThreadsAtOnce) {
  // The pool runs one region at a time; a second caller runs its loop itself.
  std::atomic<int> other_bad{0};
  std::thread other([&] {
    for (int r = 0; r < 100; ++r)
      if (visit_counts(5000) != std::vector<int>(5000, 1)) other_bad.fetch_add(1);
  });
  for (int r = 0; r < 100; ++r) ASSERT_EQ(visit_counts(5000), std::vector<int>(5000, 1));
  other.join();
  EXPECT_EQ(other_bad.load(), 0);
}

TEST(ParallelTest, SummaryNamesThreadsAndBlasKernels) {
  const std::string summary = threading_summary();
  EXPECT_NE(summary.find(std::to_string(num_threads()) + " threads"), std::string::npos) << summary;
  EXPECT_NE(summary.find("OpenBLAS kernels: "), std::string::npos) << summary;
}

}  // namespace
}  // namespace hyla
