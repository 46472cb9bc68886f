// json_file.h: the nesting-depth check (brackets in strings, keys on the path to the deep value),
// bounded parser messages, and json_excerpt's bounded rendering of any value.
#include "model/json_file.h"

#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <string>

#include "test_files.h"
#include "testing.h"

namespace hyla::model {
namespace {

using hyla::testing::TempDir;
using nlohmann::json;

std::string nested_array(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(JsonDepthTest, AcceptsTheLimitAndRejectsOneMore) {
  EXPECT_OK(check_json_depth(nested_array(kMaxJsonDepth), "x.json"));
  EXPECT_ERROR_CONTAINS(check_json_depth(nested_array(kMaxJsonDepth + 1), "x.json"),
                        "x.json: the value nests arrays or objects deeper than 64 levels (at byte "
                        "64); expected at most 64");
}

TEST(JsonDepthTest, NamesTheKeysLeadingToTheDeepValue) {
  const std::string text =
      R"({"a": 1, "text_config": {"b": [], "num_hidden_layers": )" + nested_array(100000) + "}}";
  const Status s = check_json_depth(text, "config.json");
  EXPECT_ERROR_CONTAINS(s,
                        "config.json: field 'text_config.num_hidden_layers' nests arrays or "
                        "objects deeper than 64 levels");
  EXPECT_LT(s.message().size(), 300u);
}

TEST(JsonDepthTest, BracketsInStringsDoNotCount) {
  // 100 '[' inside a string (with an escaped quote before them) and a key holding '{'.
  const std::string text = R"({"k\"{": ")" + std::string(100, '[') + R"(", "v": [[1]]})";
  EXPECT_OK(check_json_depth(text, "x.json"));
  Result<json> parsed = parse_json(text, "x.json");
  ASSERT_OK(parsed.status());
  EXPECT_EQ((*parsed)["v"][0][0], 1);
}

TEST(JsonDepthTest, MalformedTextIsLeftToTheParser) {
  for (const char* text : {"]]]", "[\"unterminated", "{\"a\": [1, 2}", ""}) {
    SCOPED_TRACE(text);
    EXPECT_OK(check_json_depth(text, "x.json"));
    EXPECT_ERROR_CONTAINS(parse_json(text, "x.json").status(), "x.json: invalid JSON: ");
  }
}

// A 100,000-deep config.json: an error naming the file and the field, not a stack overflow.
TEST(JsonFileTest, DeepFileIsRefusedByName) {
  TempDir dir;
  std::ofstream(dir.file("config.json")) << R"({"vocab_size": )" << nested_array(100000) << "}";
  EXPECT_ERROR_CONTAINS(read_json_file(dir.file("config.json")).status(),
                        dir.file("config.json") +
                            ": field 'vocab_size' nests arrays or objects deeper than 64 levels");
}

// nlohmann quotes the whole last token; for an unterminated 1 MB string the message stays short.
TEST(JsonFileTest, ParserMessagesAreBounded) {
  const std::string text = "{\"a\": \"" + std::string(1 << 20, 'x');
  const Status s = parse_json(text, "big.json").status();
  EXPECT_ERROR_CONTAINS(s, "big.json: invalid JSON: [json.exception.parse_error.101]");
  EXPECT_LT(s.message().size(), 400u);
}

TEST(JsonExcerptTest, ShortValuesPrintInFull) {
  EXPECT_EQ(json_excerpt(json(4)), "4");
  EXPECT_EQ(json_excerpt(json(-4)), "-4");
  EXPECT_EQ(json_excerpt(json(4.5)), "4.5");
  EXPECT_EQ(json_excerpt(json("128")), "\"128\"");
  EXPECT_EQ(json_excerpt(json(nullptr)), "null");
  EXPECT_EQ(json_excerpt(json::parse(R"({"a": [1, true], "b": {}})")), R"({"a":[1,true],"b":{}})");
  EXPECT_EQ(json_excerpt(json(std::numeric_limits<double>::infinity())), "inf");
}

TEST(JsonExcerptTest, LongAndDeepValuesAreCut) {
  json deep = json::array();
  for (int level = 0; level < 60; ++level) deep = json::array({deep});
  EXPECT_EQ(json_excerpt(deep), "[[[[[...]]]]]");
  json wide = json::array();
  for (int i = 0; i < 100000; ++i) wide.push_back(i);
  const std::string cut = json_excerpt(wide);
  EXPECT_EQ(cut.size(), 83u);
  EXPECT_EQ(cut.substr(0, 7), "[0,1,2,");
  EXPECT_EQ(cut.substr(80), "...");
  EXPECT_EQ(json_excerpt(json(std::string(1000, 'y')), 20).size(), 23u);
  // A cut through a multi-byte character, and invalid UTF-8, still render without throwing.
  EXPECT_EQ(json_excerpt(json("\xc3\xa9\xc3\xa9"), 3), "\"\xc3\xa9...");
  EXPECT_NO_THROW(json_excerpt(json(std::string("\xff\xfe"))));
}

TEST(JsonExcerptTest, TextExcerptCutsOnCharacterBoundaries) {
  EXPECT_EQ(text_excerpt("short"), "short");
  EXPECT_EQ(text_excerpt(std::string(200, 'n'), 10), "nnnnnnnnnn...");
  EXPECT_EQ(text_excerpt("a\xc3\xa9", 2), "a...");
}

}  // namespace
}  // namespace hyla::model
