// A model's chat template (transformers' apply_chat_template): found in the model folder, and a
// chat request's fields rendered through it into the prompt text.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/error.h"
#include "serve/jinja.h"

namespace hyla::serve {

struct ChatTemplate {
  JinjaTemplate jinja;
  std::string origin;  ///< where it came from, for messages ("DIR/chat_template.jinja", ...)
  /// bos_token / eos_token from tokenizer_config.json (those set to a string or {"content": s}).
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
};

/// The plain template a model without one may get (the demo model): "User: text" lines, then
/// "Assistant:" when a generation prompt is asked for.
extern const char* const kDefaultChatTemplate;

/// The chat template of model folder `dir`: DIR/chat_template.jinja when present, else
/// tokenizer_config.json's "chat_template" (a string, or a list of {"name", "template"} whose
/// "default" entry is taken). When the folder has none: kDefaultChatTemplate if
/// `default_if_missing`, else kNotFound naming both places. Errors: unreadable or malformed
/// tokenizer_config.json (the field named), a template that does not parse (line and column).
Result<ChatTemplate> load_chat_template(const std::string& dir, bool default_if_missing);

/// The prompt for a chat request: a JSON object with "messages" (an array of objects, each with a
/// string "role"), optional "tools" (an array; null when absent, as in transformers),
/// "add_generation_prompt" (default true), and any other keys (e.g. "enable_thinking"), which
/// become template variables beside the special tokens. Errors name the bad field, or give the
/// template's line and column.
Result<std::string> render_chat(const ChatTemplate& chat, const nlohmann::ordered_json& request);

}  // namespace hyla::serve
