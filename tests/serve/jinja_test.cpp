// The Jinja engine on small templates: every feature case and every error case of
// jinja_cases.json (expected text and exact messages, with line and column), plus number
// printing and JSON input order. The features' expected text is @huggingface/jinja's output
// (checked again by jinja_reference_test.cpp when the reference is fetched), except the cases
// marked "hf": false, whose "why" says how Jinja2 (whose behaviour they follow) differs.
#include "serve/jinja.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "serve/jinja_value.h"

namespace hyla::serve {
namespace {

using Json = nlohmann::ordered_json;

Json load_cases() {
  std::ifstream file(HYLA_JINJA_CASES);
  std::stringstream text;
  text << file.rdbuf();
  return Json::parse(text.str());
}

Result<std::string> render(const std::string& source, const Json& variables) {
  HYLA_ASSIGN_OR_RETURN(JinjaTemplate t, JinjaTemplate::parse(source));
  return t.render(variables);
}

TEST(Jinja, FeatureCasesRenderTheirExpectedText) {
  const Json cases = load_cases();
  ASSERT_GE(cases["features"].size(), 40u);
  for (const Json& c : cases["features"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    ASSERT_TRUE(c.contains("expected")) << "the case has no expected text";
    Result<std::string> out = render(c["template"], c.value("variables", Json::object()));
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(out.value(), c["expected"].get<std::string>());
  }
}

TEST(Jinja, ErrorCasesFailWithTheirMessage) {
  const Json cases = load_cases();
  ASSERT_GE(cases["errors"].size(), 20u);
  for (const Json& c : cases["errors"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    Result<std::string> out = render(c["template"], c.value("variables", Json::object()));
    ASSERT_FALSE(out.ok()) << "rendered: " << out.value();
    EXPECT_EQ(out.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(out.status().message(), c["error"].get<std::string>());
  }
}

TEST(Jinja, ParsedTemplateRendersManyTimes) {
  Result<JinjaTemplate> t = JinjaTemplate::parse("{% set ns = namespace(n=0) %}{{ x }}");
  ASSERT_TRUE(t.ok()) << t.status().message();
  for (int i = 0; i < 3; ++i) {
    Result<std::string> out = t->render(Json{{"x", i}});
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(out.value(), std::to_string(i));
  }
  Result<std::string> bad = t->render(Json::array());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "the template's variables must be a JSON object, not array");
}

TEST(Jinja, NumbersPrintAsJavaScriptDoes) {
  using jinja::js_number;
  EXPECT_EQ(js_number(0.1), "0.1");
  EXPECT_EQ(js_number(-2.5), "-2.5");
  EXPECT_EQ(js_number(100), "100");
  EXPECT_EQ(js_number(1e21), "1e+21");
  EXPECT_EQ(js_number(1.5e21), "1.5e+21");
  EXPECT_EQ(js_number(123456789012345680000.0), "123456789012345680000");
  EXPECT_EQ(js_number(1e-7), "1e-7");
  EXPECT_EQ(js_number(1.25e-7), "1.25e-7");
  EXPECT_EQ(js_number(0.000001), "0.000001");
  EXPECT_EQ(js_number(5e-324), "5e-324");
  EXPECT_EQ(js_number(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(js_number(0.30000000000000004), "0.30000000000000004");
}

TEST(Jinja, JsonObjectsListArrayIndexKeysFirst) {
  // JSON.parse's order, which @huggingface/jinja iterates: "0".."4294967294" ascending first.
  const Json input = Json::parse(R"({"b": 1, "10": 2, "a": 3, "2": 4, "02": 5, "-1": 6})");
  const jinja::Value v = jinja::Value::from_json(input);
  std::string keys;
  for (const auto& [key, value] : v.entries().entries()) keys += key + ",";
  EXPECT_EQ(keys, "2,10,b,a,02,-1,");
  // Integral floats are ints (one number type in JavaScript); others stay floats.
  EXPECT_EQ(jinja::Value::from_json(Json::parse("2.0")).kind(), jinja::Value::Kind::kInt);
  EXPECT_EQ(jinja::Value::from_json(Json::parse("2.5")).kind(), jinja::Value::Kind::kFloat);
}

TEST(Jinja, EveryCaseNameIsUnique) {
  const Json cases = load_cases();
  std::set<std::string> names;
  for (const char* group : {"features", "errors"})
    for (const Json& c : cases[group])
      EXPECT_TRUE(names.insert(c["name"].get<std::string>()).second) << c["name"];
}

}  // namespace
}  // namespace hyla::serve
