// Loading a model's chat template and rendering chat requests with it (see chat_template.h).
#include "serve/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/json_file.h"

namespace hyla::serve {

const char* const kDefaultChatTemplate =
    "{%- for message in messages %}"
    "{{- message.role | capitalize ~ ': ' ~ message.content ~ '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- 'Assistant:' }}{%- endif %}";

namespace {

namespace fs = std::filesystem;

Result<std::string> read_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return Status(ErrorCode::kIo, str_cat(path.string(), ": cannot be read"));
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) return Status(ErrorCode::kIo, str_cat(path.string(), ": read error"));
  return text.str();
}

Result<nlohmann::ordered_json> parse_json_object(const std::string& text, const std::string& what) {
  HYLA_RETURN_IF_ERROR(model::check_json_depth(text, what));
  nlohmann::ordered_json json = nlohmann::ordered_json::parse(text, nullptr, false);
  if (json.is_discarded()) return invalid_argument(what, ": not valid JSON");
  if (!json.is_object())
    return invalid_argument(what, ": expected a JSON object, found ", json.type_name());
  return json;
}

// tokenizer_config.json's "chat_template": a string, or [{"name": ..., "template": ...}, ...].
Result<std::string> template_from_config(const nlohmann::ordered_json& value,
                                         const std::string& what) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    std::string names;
    for (const auto& entry : value) {
      if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
          !entry.contains("template") || !entry["template"].is_string())
        return invalid_argument(what, ": 'chat_template' entries must be {\"name\": string, ",
                                "\"template\": string}");
      if (entry["name"] == "default") return entry["template"].get<std::string>();
      names += str_cat(names.empty() ? "" : ", ", entry["name"].get<std::string>());
    }
    return invalid_argument(
        what, ": 'chat_template' lists no template named 'default' (it has: ", names, ")");
  }
  return invalid_argument(what,
                          ": 'chat_template' must be a string or a list of named "
                          "templates, not ",
                          value.type_name());
}

}  // namespace

Result<ChatTemplate> load_chat_template(const std::string& dir, bool default_if_missing) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return Status(ErrorCode::kNotFound,
                  str_cat("--model ", dir, ": the model folder does not exist"));
  ChatTemplate chat;
  std::string source;
  bool found = false;

  const fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  if (fs::exists(config_path, ec)) {
    HYLA_ASSIGN_OR_RETURN(const std::string text, read_text(config_path));
    const std::string what = config_path.string();
    HYLA_ASSIGN_OR_RETURN(const nlohmann::ordered_json config, parse_json_object(text, what));
    for (const char* name : {"bos_token", "eos_token"}) {
      if (!config.contains(name)) continue;
      const auto& token = config[name];
      if (token.is_string()) chat.special_tokens[name] = token;
      if (token.is_object() && token.contains("content") && token["content"].is_string())
        chat.special_tokens[name] = token["content"];
    }
    if (config.contains("chat_template") && !config["chat_template"].is_null()) {
      HYLA_ASSIGN_OR_RETURN(source, template_from_config(config["chat_template"], what));
      chat.origin = str_cat(what, " (chat_template)");
      found = true;
    }
  }
  const fs::path jinja_path = fs::path(dir) / "chat_template.jinja";
  if (fs::exists(jinja_path, ec)) {  // transformers saves it apart; it wins over the config's
    HYLA_ASSIGN_OR_RETURN(source, read_text(jinja_path));
    chat.origin = jinja_path.string();
    found = true;
  }
  if (!found) {
    if (!default_if_missing)
      return Status(ErrorCode::kNotFound,
                    str_cat("--model ", dir,
                            ": no chat template (neither tokenizer_config.json's "
                            "'chat_template' nor chat_template.jinja)"));
    source = kDefaultChatTemplate;
    chat.origin = "the default template for models without one";
  }
  Result<JinjaTemplate> parsed = JinjaTemplate::parse(std::move(source));
  if (!parsed.ok())
    return Status(parsed.status().code(), str_cat(chat.origin, ": ", parsed.status().message()));
  chat.jinja = std::move(parsed.value());
  return chat;
}

Result<std::string> render_chat(const ChatTemplate& chat, const nlohmann::ordered_json& request) {
  if (!request.is_object())
    return invalid_argument("the chat request must be a JSON object, not ", request.type_name());
  if (!request.contains("messages"))
    return invalid_argument(
        "the chat request has no 'messages' (expected an array of "
        "{\"role\", \"content\"} objects)");
  const auto& messages = request["messages"];
  if (!messages.is_array())
    return invalid_argument("the chat request's 'messages' must be an array, not ",
                            messages.type_name());
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].is_object())
      return invalid_argument("messages[", i, "] must be an object, not ", messages[i].type_name());
    if (!messages[i].contains("role") || !messages[i]["role"].is_string())
      return invalid_argument("messages[", i, "] has no string 'role'");
  }
  if (request.contains("tools") && !request["tools"].is_array() && !request["tools"].is_null())
    return invalid_argument("the chat request's 'tools' must be an array, not ",
                            request["tools"].type_name());
  if (request.contains("add_generation_prompt") && !request["add_generation_prompt"].is_boolean())
    return invalid_argument("the chat request's 'add_generation_prompt' must be true or false");

  // transformers: special tokens first, the caller's keys over them; tools None when not given.
  nlohmann::ordered_json variables = chat.special_tokens;
  variables["tools"] = nullptr;
  variables["add_generation_prompt"] = true;
  for (const auto& [key, value] : request.items()) variables[key] = value;
  Result<std::string> prompt = chat.jinja.render(variables);
  if (!prompt.ok())
    return Status(prompt.status().code(), str_cat(chat.origin, ": ", prompt.status().message()));
  return prompt;
}

}  // namespace hyla::serve
