// `hyla tokenize (--tokenizer FILE | --model DIR)`: UTF-8 text on stdin -> one JSON array of ids
// on stdout. `hyla detokenize (--tokenizer FILE | --model DIR)`: such an array on stdin -> the
// text on stdout. --model DIR means DIR/tokenizer.json. Built only with PCRE2 (HYLA_WITH_PCRE2),
// like the tokenizer itself.
#pragma once

#include <cstdio>
#include <string>

#include "core/error.h"

namespace hyla::cli {

/// The tokenizer.json to read: `tokenizer_path`, or `model_dir`/tokenizer.json. Errors: both or
/// neither given, or the file does not exist.
Result<std::string> tokenizer_json_path(const std::string& tokenizer_path,
                                        const std::string& model_dir);

/// Both return the process exit code: 0, 1 on a bad tokenizer.json or bad input (the message on
/// `err`), 2 on bad arguments (neither or both of --tokenizer and --model).
int run_tokenize(const std::string& tokenizer_path, const std::string& model_dir = {},
                 std::FILE* in = stdin, std::FILE* out = stdout, std::FILE* err = stderr);
int run_detokenize(const std::string& tokenizer_path, const std::string& model_dir = {},
                   std::FILE* in = stdin, std::FILE* out = stdout, std::FILE* err = stderr);

}  // namespace hyla::cli
