// config_json.h: typed reads with ranges. Every wrong form of an integer field (float, string,
// bool, out of int64, out of range) is an error naming the field, the value and what is allowed.
#include "model/config_json.h"

#include <gtest/gtest.h>

#include "testing.h"

namespace hyla::model {
namespace {

using nlohmann::json;

/// The ConfigFieldError of `read` as a Status (ok when it does not throw).
template <typename Read>
Status guarded(Read&& read) {
  return config_field_guard("config.json", [&]() -> Status {
    read();
    return ok_status();
  });
}

TEST(ConfigJsonTest, IntegersInRangeRead) {
  const json j = json::parse(R"({"a": 4, "b": 4.0, "c": 1e3, "d": null, "e": -2})");
  EXPECT_EQ(config_int(j, "a", {1, 8}), 4);
  EXPECT_EQ(config_int(j, "b", {1, 8}), 4);  // integral floats read as integers
  EXPECT_EQ(config_int(j, "c", {0, 1000}), 1000);
  EXPECT_EQ(config_int(j, "d", 7, {1, 8}), 7);  // null = absent
  EXPECT_EQ(config_int(j, "missing", 7, {1, 8}), 7);
  EXPECT_EQ(config_int(j, "e", {-2, -2}), -2);
}

TEST(ConfigJsonTest, WrongIntegersNameFieldValueAndRange) {
  const json j = json::parse(
      R"({"zero": 0, "neg": -3, "big": 1000000000, "float": 4.5, "huge_float": 1e300,
          "str": "128", "bool": true, "list": [1], "u64": 18446744073709551615})");
  const IntRange r{1, 4096};
  EXPECT_ERROR_CONTAINS(guarded([&] { config_int(j, "zero", r); }),
                        "config.json: field 'zero' is 0, expected an integer in [1, 4096]");
  EXPECT_ERROR_CONTAINS(guarded([&] { config_int(j, "neg", 1, r); }),
                        "config.json: field 'neg' is -3, expected an integer in [1, 4096]");
  EXPECT_ERROR_CONTAINS(guarded([&] { config_int(j, "big", r); }),
                        "field 'big' is 1000000000, expected an integer in [1, 4096]");
  EXPECT_ERROR_CONTAINS(guarded([&] { config_int(j, "float", r); }),
                        "field 'float' must be an integer, got 4.5");
  EXPECT_ERROR_CONTAINS(guarded([&] { config_int(j, "huge_float", r); }),
                        "field 'huge_float' must be an integer, got 1e+300");
  EXPECT_ERROR_CONTAINS(guarded([&] { config_int(j, "str", r); }),
                        "field 'str' must be an integer, got \"128\"");
  EXPECT_ERROR_CONTAINS(guarded([&] { config_int(j, "bool", r); }),
                        "field 'bool' must be an integer, got true");
  EXPECT_ERROR_CONTAINS(guarded([&] { config_int(j, "list", r); }),
                        "field 'list' must be an integer, got [1]");
  EXPECT_ERROR_CONTAINS(guarded([&] { config_int(j, "u64", r); }),
                        "field 'u64' must be an integer, got 18446744073709551615");
  EXPECT_ERROR_CONTAINS(guarded([&] { config_int(j, "absent", r); }),
                        "missing required field 'absent'");
}

TEST(ConfigJsonTest, ListsCheckEveryElement) {
  const json j = json::parse(R"({"layers": [0, 3, 9], "bad": [0, "x"]})");
  EXPECT_EQ(config_int_list(j, "layers", {}, {0, 9}), (std::vector<int64_t>{0, 3, 9}));
  EXPECT_ERROR_CONTAINS(guarded([&] {
                          config_int_list(j, "layers", {}, {0, 3});
                        }),
                        "field 'layers' is 9, expected an integer in [0, 3]");
  EXPECT_ERROR_CONTAINS(guarded([&] {
                          config_int_list(j, "bad", {}, {0, 3});
                        }),
                        "field 'bad' must be an integer, got \"x\"");
}

TEST(ConfigJsonTest, NumbersMustBeFinite) {
  const json j = {{"eps", std::numeric_limits<double>::infinity()}, {"ok", 1e-5}, {"s", "1"}};
  EXPECT_DOUBLE_EQ(config_number(j, "ok", 0.0), 1e-5);
  EXPECT_ERROR_CONTAINS(guarded([&] { config_number(j, "eps", 0.0); }),
                        "field 'eps' must be a finite number, got inf");
  EXPECT_ERROR_CONTAINS(guarded([&] { config_number(j, "s", 0.0); }),
                        "field 's' must be a finite number, got \"1\"");
}

// A huge mistyped value is quoted in a bounded excerpt.
TEST(ConfigJsonTest, MistypedValuesAreQuotedBriefly) {
  json list = json::array();
  for (int i = 0; i < 100000; ++i) list.push_back(i);
  const json j = {{"n", list}};
  const Status s = guarded([&] { config_int(j, "n", {1, 2}); });
  EXPECT_ERROR_CONTAINS(s, "field 'n' must be an integer, got [0,1,2,");
  EXPECT_LT(s.message().size(), 200u);
}

}  // namespace
}  // namespace hyla::model
