// `hyla chat`: a conversation in the terminal with a model, through its chat template and the
// runtime engine directly (no server).
//   hyla chat [--model DIR] [--device auto|cpu|cuda] [--system TEXT] [--max-tokens N]
//             [--temperature T] [--top-p P] [--seed S]
// Each line read is one user message; the whole conversation is rendered again through the chat
// template for every turn and the reply is streamed token by token until a stop token (as `hyla
// serve` stops) or --max-tokens. Commands: /reset (forget the conversation, keep --system), /exit
// (or end of input). On a terminal it prompts with "> "; from a pipe it writes "> " and the line
// read, so the output reads as a transcript. Replies go to stdout; loading, per-reply speed and
// errors to stderr.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace hyla::cli {

struct ChatOptions {
  std::string model_dir;  ///< empty: default_model_dir()
  std::string device = "auto";
  std::string system;        ///< a system message at the start of every conversation; "": none
  int64_t max_tokens = 512;  ///< per reply
  float temperature = 0.7f;  ///< 0: greedy
  float top_p = 0.95f;       ///< 1: off
  int64_t seed = 0;          ///< reply n (from 0) draws with seed + n
};

/// Runs the conversation until /exit or the end of `in`. Returns the exit code: 0, or 1 when the
/// model, tokenizer or chat template does not load (or the build has no tokenizer). A turn that
/// fails (the conversation outgrew the context) is reported and dropped; the chat goes on.
int run_chat(const ChatOptions& options, std::FILE* in = stdin, std::FILE* out = stdout,
             std::FILE* err = stderr);

}  // namespace hyla::cli
