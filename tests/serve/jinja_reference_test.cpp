// Our renderings against @huggingface/jinja's (npm, the reference engine of transformers.js),
// byte for byte: the Qwen3 chat template (and any template shipped in models/ or tests/data/) on
// every conversation of jinja_cases.json, and each feature case. The reference lives in
// $HYLA_JINJA_REF, written by tools/jinja_reference.sh; without it (unset, or npm unreachable)
// these tests skip and say why.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "serve/chat_template.h"
#include "serve/jinja.h"

namespace hyla::serve {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

std::string read_file(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

Json load_cases() { return Json::parse(read_file(HYLA_JINJA_CASES)); }

// The reference folder, or why there is none (the test then skips with that reason).
std::string reference_dir(std::string& why_not) {
  const char* dir = std::getenv("HYLA_JINJA_REF");
  if (dir == nullptr || dir[0] == '\0') {
    why_not =
        "HYLA_JINJA_REF is not set: run tools/jinja_reference.sh DIR and set it (or CMake's "
        "HYLA_JINJA_REF) to compare with @huggingface/jinja";
    return "";
  }
  const fs::path unavailable = fs::path(dir) / "unavailable";
  if (fs::exists(unavailable)) {
    why_not =
        "no @huggingface/jinja reference in " + std::string(dir) + ": " + read_file(unavailable);
    return "";
  }
  return dir;
}

#define HYLA_REFERENCE_DIR_OR_SKIP(var)               \
  std::string why_not;                                \
  const std::string var = reference_dir(why_not);     \
  if (var.empty()) GTEST_SKIP() << why_not;           \
  ASSERT_TRUE(fs::exists(fs::path(var) / "complete")) \
      << var << " holds no finished reference: run tools/jinja_reference.sh " << var

Result<std::string> render(const std::string& source, const Json& variables) {
  HYLA_ASSIGN_OR_RETURN(JinjaTemplate t, JinjaTemplate::parse(source));
  return t.render(variables);
}

TEST(JinjaReference, ChatTemplatesRenderEveryConversationAsHuggingFaceJinja) {
  HYLA_REFERENCE_DIR_OR_SKIP(dir);
  const Json cases = load_cases();
  const Json versions = Json::parse(read_file(fs::path(dir) / "versions.json"));
  ASSERT_TRUE(versions["chat_templates"].contains("qwen3"));
  int compared = 0;
  for (const auto& [name, folder] : versions["chat_templates"].items()) {
    Result<ChatTemplate> chat = load_chat_template(folder.get<std::string>(), false);
    ASSERT_TRUE(chat.ok()) << chat.status().message();
    for (const auto& [conversation, request] : cases["conversations"].items()) {
      SCOPED_TRACE(name + " / " + conversation);
      const fs::path expected = fs::path(dir) / "chat" / name / (conversation + ".txt");
      ASSERT_TRUE(fs::exists(expected)) << expected;
      Result<std::string> prompt = render_chat(chat.value(), request);
      ASSERT_TRUE(prompt.ok()) << prompt.status().message();
      EXPECT_EQ(prompt.value(), read_file(expected));
      ++compared;
    }
  }
  EXPECT_GE(compared, 14);
}

TEST(JinjaReference, FeatureCasesRenderAsHuggingFaceJinja) {
  HYLA_REFERENCE_DIR_OR_SKIP(dir);
  int compared = 0;
  const Json cases = load_cases();
  for (const Json& c : cases["features"]) {
    if (!c.value("hf", true)) continue;
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const fs::path base = fs::path(dir) / "features" / name;
    ASSERT_FALSE(fs::exists(base.string() + ".error"))
        << "@huggingface/jinja fails on it: " << read_file(base.string() + ".error");
    Result<std::string> out = render(c["template"], c.value("variables", Json::object()));
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(out.value(), read_file(base.string() + ".txt"));
    ++compared;
  }
  EXPECT_GE(compared, 40);
}

// The cases marked "hf": false claim @huggingface/jinja differs there: it must (else they belong
// with the others).
TEST(JinjaReference, CasesMarkedAsDifferingDoDiffer) {
  HYLA_REFERENCE_DIR_OR_SKIP(dir);
  const Json cases = load_cases();
  for (const Json& c : cases["features"]) {
    if (c.value("hf", true)) continue;
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    EXPECT_FALSE(c.value("why", "").empty());
    const fs::path base = fs::path(dir) / "features" / name;
    if (fs::exists(base.string() + ".error")) continue;
    EXPECT_NE(read_file(base.string() + ".txt"), c["expected"].get<std::string>());
  }
}

TEST(JinjaReference, ErrorCasesAreErrorsThereToo) {
  HYLA_REFERENCE_DIR_OR_SKIP(dir);
  const Json cases = load_cases();
  for (const Json& c : cases["errors"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const fs::path base = fs::path(dir) / "errors" / name;
    if (c.value("hf_errors", true))
      EXPECT_TRUE(fs::exists(base.string() + ".error"))
          << "@huggingface/jinja renders it: " << read_file(base.string() + ".txt");
    else
      EXPECT_TRUE(fs::exists(base.string() + ".txt")) << "marked hf_errors: false, but HF fails";
  }
}

}  // namespace
}  // namespace hyla::serve
