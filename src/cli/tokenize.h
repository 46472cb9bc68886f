// `hyla tokenize --tokenizer PATH`: UTF-8 text on stdin -> one JSON array of ids on stdout.
// `hyla detokenize --tokenizer PATH`: such an array on stdin -> the text on stdout.
// Built only with PCRE2 (HYLA_WITH_PCRE2), like the tokenizer itself.
#pragma once

#include <string>

namespace hyla::cli {

/// Both return the process exit code (1 on a bad tokenizer.json or bad input).
int run_tokenize(const std::string& tokenizer_path);
int run_detokenize(const std::string& tokenizer_path);

}  // namespace hyla::cli
