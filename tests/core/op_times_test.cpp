// OpTimes: an op records only while an OpTimes is active on its thread, a nested op counts once
// (in the outermost), calls and time add up per op name, add() merges two runs.
#include "core/op_times.h"

#include <gtest/gtest.h>

#include <thread>

namespace hyla {
namespace {

void outer_op() {
  const OpScope scope("outer", Device::cpu(), {});
  const OpScope inner("inner", Device::cpu(), {});  // nested: not recorded
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

TEST(OpTimesTest, RecordsOutermostOpsWhileActive) {
  OpTimes times;
  outer_op();  // nothing active
  {
    const OpTimes::Activate recording(&times);
    outer_op();
    outer_op();
  }
  outer_op();  // no longer active
  times.collect();
  ASSERT_EQ(times.entries().size(), 1u);
  const OpTimes::Entry& e = times.entries().at("outer");
  EXPECT_EQ(e.calls, 2);
  EXPECT_GE(e.seconds, 0.004);  // two sleeps of 2 ms, on the host clock

  OpTimes more;
  {
    const OpTimes::Activate recording(&more);
    outer_op();
  }
  more.collect();
  times.add(more);
  EXPECT_EQ(times.entries().at("outer").calls, 3);
  times.clear();
  EXPECT_TRUE(times.entries().empty());
}

}  // namespace
}  // namespace hyla
