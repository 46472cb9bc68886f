// `hyla template [--model DIR]`: a chat request's fields as one JSON object on stdin ->
// the prompt its chat template renders, on stdout (for debugging templates). DIR defaults to the
// embedded demo model, which gets serve::kDefaultChatTemplate when it has no template.
#pragma once

#include <cstdio>
#include <string>

namespace hyla::cli {

/// Returns the exit code: 0, or 1 with the message on `err` (no model folder or template, a
/// malformed tokenizer_config.json, bad JSON on stdin, a request without messages, a template
/// error with its line and column).
int run_template(const std::string& model_dir, std::FILE* in = stdin, std::FILE* out = stdout,
                 std::FILE* err = stderr);

}  // namespace hyla::cli
