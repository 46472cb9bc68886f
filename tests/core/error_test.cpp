// error.h: Status, Result<T>, str_cat, HYLA_RETURN_IF_ERROR and HYLA_CHECK.
#include "core/error.h"

#include <memory>
#include <string>
#include <utility>

#include "testing.h"

namespace hyla {
namespace {

TEST(ErrorTest, StrCatStreamsEveryArgument) {
  EXPECT_EQ(str_cat("q: expected ", 3, " dims, got ", 2.5, ' ', std::string("x")),
            "q: expected 3 dims, got 2.5 x");
  EXPECT_EQ(str_cat(), "");
  EXPECT_EQ(str_cat(int64_t{-7}, "/", 42u), "-7/42");
}

TEST(ErrorTest, DefaultStatusIsOk) {
  const Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.to_string(), "ok");
  EXPECT_TRUE(ok_status().ok());
}

TEST(ErrorTest, ErrorHelpersSetCodeAndMessage) {
  const Status a = invalid_argument("op: x is ", 3, ", expected 4");
  EXPECT_FALSE(a.ok());
  EXPECT_EQ(a.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(a.message(), "op: x is 3, expected 4");
  EXPECT_EQ(a.to_string(), "op: x is 3, expected 4");
  EXPECT_EQ(out_of_range("i = ", 9).code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(unsupported("d_k = ", 96).code(), ErrorCode::kUnsupported);
  EXPECT_EQ(internal_error("bug").code(), ErrorCode::kInternal);
  EXPECT_EQ(Status(ErrorCode::kIo, "read failed").message(), "read failed");
}

TEST(ErrorTest, ResultHoldsAValue) {
  Result<std::string> r = std::string("hello");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.status().ok());
  EXPECT_EQ(r.value(), "hello");
  EXPECT_EQ(*r, "hello");
  EXPECT_EQ(r->size(), 5u);
  r.value() += "!";
  EXPECT_EQ(*r, "hello!");
  const Result<std::string>& cr = r;
  EXPECT_EQ(cr.value(), "hello!");
  std::string moved = std::move(r).value();
  EXPECT_EQ(moved, "hello!");
}

TEST(ErrorTest, ResultHoldsAnError) {
  Result<int> r = out_of_range("slot ", 12, " is outside [0, 8)");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(r.status().message(), "slot 12 is outside [0, 8)");
}

TEST(ErrorTest, ResultOfAMoveOnlyType) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 5);
}

Status fails_at(int step, int* reached) {
  for (int i = 0; i < 3; ++i) {
    HYLA_RETURN_IF_ERROR(i == step ? invalid_argument("step ", i) : ok_status());
    *reached = i;
  }
  return ok_status();
}

TEST(ErrorTest, ReturnIfErrorStopsAtTheFirstError) {
  int reached = -1;
  const Status s = fails_at(1, &reached);
  EXPECT_EQ(s.message(), "step 1");
  EXPECT_EQ(reached, 0);
  reached = -1;
  EXPECT_OK(fails_at(-1, &reached));
  EXPECT_EQ(reached, 2);
}

TEST(ErrorDeathTest, CheckAbortsWithFileLineConditionAndValues) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int got = 3;
  EXPECT_DEATH(HYLA_CHECK(got == 4, "got ", got, ", expected 4"),
               "error_test.cpp:[0-9]+: HYLA_CHECK\\(got == 4\\) failed: got 3, expected 4");
  EXPECT_DEATH(HYLA_CHECK(got < 0), "HYLA_CHECK\\(got < 0\\) failed");
  HYLA_CHECK(got == 3, "never printed");  // a passing check does nothing
}

}  // namespace
}  // namespace hyla
