// Chat templates: where load_chat_template finds them (tokenizer_config.json as a string or a
// named list, chat_template.jinja first, the default for the demo model), the variables
// render_chat passes (special tokens, tools, add_generation_prompt, the request's own keys) and
// its errors on malformed requests.
#include "serve/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace hyla::serve {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

class ChatTemplateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() /
        ("hyla_chat_template_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  fs::path dir_;
};

const Json kHello = Json::parse(R"({"messages": [{"role": "user", "content": "Hi"}]})");

TEST_F(ChatTemplateTest, ConfigTemplateSeesSpecialTokensAndRequestKeys) {
  write("tokenizer_config.json", R"({
    "bos_token": "<s>", "eos_token": {"content": "</s>", "lstrip": false}, "pad_token": null,
    "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{{ eos_token }}|{{ tools is none }}|{{ add_generation_prompt }}|{{ enable_thinking }}|{{ pad_token is defined }}"})");
  Result<ChatTemplate> chat = load_chat_template(dir_.string(), false);
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  EXPECT_EQ(chat->origin, (dir_ / "tokenizer_config.json").string() + " (chat_template)");
  Json request = kHello;
  request["enable_thinking"] = false;
  Result<std::string> prompt = render_chat(chat.value(), request);
  ASSERT_TRUE(prompt.ok()) << prompt.status().message();
  EXPECT_EQ(prompt.value(), "<s>[user:Hi]</s>|true|true|false|false");
  request["add_generation_prompt"] = false;
  request["bos_token"] = "<B>";  // the request's keys win, as in transformers
  request["tools"] = Json::array();
  prompt = render_chat(chat.value(), request);
  ASSERT_TRUE(prompt.ok()) << prompt.status().message();
  EXPECT_EQ(prompt.value(), "<B>[user:Hi]</s>|false|false|false|false");
}

TEST_F(ChatTemplateTest, NamedTemplateListTakesDefault) {
  write("tokenizer_config.json", R"({"chat_template": [
    {"name": "tool_use", "template": "tools"}, {"name": "default", "template": "plain"}]})");
  Result<ChatTemplate> chat = load_chat_template(dir_.string(), false);
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  EXPECT_EQ(render_chat(chat.value(), kHello).value(), "plain");

  write("tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  chat = load_chat_template(dir_.string(), false);
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(chat.status().message(), (dir_ / "tokenizer_config.json").string() +
                                         ": 'chat_template' lists no template named 'default' "
                                         "(it has: rag)");
}

TEST_F(ChatTemplateTest, ChatTemplateJinjaWinsOverTheConfig) {
  write("tokenizer_config.json", R"({"chat_template": "config", "eos_token": "E"})");
  write("chat_template.jinja", "file {{ eos_token }}\n");
  Result<ChatTemplate> chat = load_chat_template(dir_.string(), false);
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  EXPECT_EQ(render_chat(chat.value(), kHello).value(), "file E");
}

TEST_F(ChatTemplateTest, MissingTemplateIsAnErrorUnlessTheDefaultIsAsked) {
  write("tokenizer_config.json", R"({"eos_token": "E"})");
  Result<ChatTemplate> chat = load_chat_template(dir_.string(), false);
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(chat.status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(chat.status().message(),
            "--model " + dir_.string() +
                ": no chat template (neither tokenizer_config.json's 'chat_template' nor "
                "chat_template.jinja)");
  chat = load_chat_template(dir_.string(), true);
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  Json request = Json::parse(R"({"messages": [{"role": "system", "content": "Be nice."},
    {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "Bye"}]})");
  EXPECT_EQ(render_chat(chat.value(), request).value(),
            "System: Be nice.\nUser: Hi\nAssistant: Hello.\nUser: Bye\nAssistant:");
  request["add_generation_prompt"] = false;
  EXPECT_EQ(render_chat(chat.value(), request).value(),
            "System: Be nice.\nUser: Hi\nAssistant: Hello.\nUser: Bye\n");
}

TEST_F(ChatTemplateTest, DemoModelGetsTheDefault) {
  const std::string demo = std::string(HYLA_MODELS_DIR) + "/hyla-demo";
  if (!fs::exists(demo + "/tokenizer_config.json")) GTEST_SKIP() << "no " << demo;
  Result<ChatTemplate> chat = load_chat_template(demo, true);
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  EXPECT_EQ(render_chat(chat.value(), kHello).value(), "User: Hi\nAssistant:");
}

TEST_F(ChatTemplateTest, BadFoldersAndConfigsAreErrors) {
  Result<ChatTemplate> chat = load_chat_template((dir_ / "nope").string(), true);
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(chat.status().message(),
            "--model " + (dir_ / "nope").string() + ": the model folder does not exist");
  write("tokenizer_config.json", "{\"chat_template\": ");
  chat = load_chat_template(dir_.string(), true);
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(chat.status().message(),
            (dir_ / "tokenizer_config.json").string() + ": not valid JSON");
  write("tokenizer_config.json", R"({"chat_template": 3})");
  chat = load_chat_template(dir_.string(), true);
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(chat.status().message(),
            (dir_ / "tokenizer_config.json").string() +
                ": 'chat_template' must be a string or a list of named templates, not number");
  write("tokenizer_config.json", R"({"chat_template": "{% if x %}"})");
  chat = load_chat_template(dir_.string(), true);
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(chat.status().message(),
            (dir_ / "tokenizer_config.json").string() +
                " (chat_template): line 1, column 4: {% if %} is never closed: the template "
                "ends before {% elif or else or endif %}");
}

TEST_F(ChatTemplateTest, MalformedRequestsAreNamed) {
  write("chat_template.jinja",
        "{% for m in messages %}{% if m.role == 'bad' %}{{ raise_exception('bad role') }}"
        "{% endif %}{% endfor %}");
  Result<ChatTemplate> chat = load_chat_template(dir_.string(), false);
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  const std::pair<const char*, std::string> cases[] = {
      {"[]", "the chat request must be a JSON object, not array"},
      {"{}",
       "the chat request has no 'messages' (expected an array of {\"role\", \"content\"} "
       "objects)"},
      {R"({"messages": "hi"})", "the chat request's 'messages' must be an array, not string"},
      {R"({"messages": [1]})", "messages[0] must be an object, not number"},
      {R"({"messages": [{"role": "user"}, {"content": "x"}]})", "messages[1] has no string 'role'"},
      {R"({"messages": [], "tools": {}})",
       "the chat request's 'tools' must be an array, not object"},
      {R"({"messages": [], "add_generation_prompt": 1})",
       "the chat request's 'add_generation_prompt' must be true or false"},
      {R"({"messages": [{"role": "bad"}]})",
       (dir_ / "chat_template.jinja").string() +
           ": line 1, column 51: the template raised an error: bad role"},
  };
  for (const auto& [request, message] : cases) {
    SCOPED_TRACE(request);
    Result<std::string> prompt = render_chat(chat.value(), Json::parse(request));
    ASSERT_FALSE(prompt.ok());
    EXPECT_EQ(prompt.status().message(), message);
  }
}

}  // namespace
}  // namespace hyla::serve
