// The OpenAI API's request and response shapes for /v1/chat/completions and /v1/completions:
// a request body -> a GenerationRequest (prompt ids, sampling, stop strings, streaming) or an
// ApiError naming the field; generated text -> the response objects and stream chunks.
//
// Log-probabilities (chat: "logprobs": true, "top_logprobs": 0..20; completions: "logprobs":
// 0..5) come from the engine (runtime/sampling.h says of which distribution) and are reported
// per token whose text reaches the client:
//   - a token's entry goes out with the chunk (or response) that delivers the last byte of its
//     text; a token that ends inside a character waits for the token that completes it;
//   - a stop token (<|im_end|>, eos) is never shown and has no entry;
//   - a stop string cuts the text: tokens whose text starts before the cut have entries (the one
//     the cut passes through included, so the returned text is a prefix of their concatenated
//     text), tokens wholly at or after the cut have none; without a cut the tokens' concatenated
//     bytes are exactly the returned text;
//   - a token's string is its own bytes as UTF-8 with invalid sequences as U+FFFD (a token that is
//     part of a character); "bytes" (chat) holds its exact bytes;
//   - a log-probability of -inf (a token the model gives no probability) is written -9999.0, as
//     OpenAI does, since JSON has no infinity.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/sampling.h"
#include "serve/chat_template.h"
#include "serve/tokenizer.h"

namespace hyla::serve {

/// An OpenAI-style error: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  ///< the field at fault; empty -> null
  std::string type = "invalid_request_error";
  std::string code;  ///< empty -> null
};
std::string error_body(const ApiError& error);

enum class Endpoint { kChat, kCompletions };

/// What the server knows when it reads a request.
struct ApiContext {
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat = nullptr;
  std::vector<int32_t> stop_token_ids;  ///< end of text (never shown)
  int64_t vocab_size = 0;
  int64_t max_context = 0;         ///< prompt + max_tokens at most; 0 = no limit
  int64_t default_max_tokens = 0;  ///< when the request gives none
  std::string model_name;
};

struct GenerationRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::vector<int32_t> prompt;
  /// params.logprobs / top_logprobs: the request's logprobs (completions: logprobs N -> true, N).
  runtime::SamplingParams params;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  std::string model;  ///< the name answered in responses
};

/// Reads a request body. Errors name the field: status 400 for bad JSON, wrong types, values out
/// of range, features not supported yet (n > 1, echo, suffix); 404 (code "model_not_found") for a
/// "model" other than the served one (an absent model means the served one).
bool parse_generation_request(Endpoint endpoint, std::string_view body, const ApiContext& context,
                              GenerationRequest& out, ApiError& error);

/// One shown token and its log-probabilities (as the engine's TokenEvent gave them).
struct TokenLogprobEntry {
  int32_t token = -1;
  double logprob = 0.0;
  std::vector<runtime::TokenLogprob> top;
  int64_t text_offset = 0;  ///< where its text starts in the returned text, in code points
};

/// Matches generated tokens to the text delivered to the client (the rules at the top of this
/// file). Per token shown: push() right after StreamingDecoder::push; flush() after
/// StreamingDecoder::finish; take() with each piece of text delivered (StopStrings' output).
class LogprobTracker {
 public:
  /// `decoded`: what the decoder returned for this token; `holding`: StreamingDecoder::holding()
  /// after it.
  void push(TokenLogprobEntry entry, std::string_view decoded, bool holding);
  /// What StreamingDecoder::finish returned: every pushed token's text is decoded now.
  void flush(std::string_view decoded);
  /// `text` was delivered after what was delivered before; `cut`: a stop string ends the text
  /// right after it. Returns the entries of the tokens this delivery completes, in order.
  std::vector<TokenLogprobEntry> take(std::string_view text, bool cut);

 private:
  struct Pending {
    TokenLogprobEntry entry;
    int64_t start;  ///< decoded bytes before its text
    int64_t end;    ///< decoded bytes after its text; -1 while the decoder holds part of it
  };
  std::deque<Pending> pending_;
  int64_t decoded_ = 0;    // bytes the decoder has returned
  std::string delivered_;  // the text delivered so far
  // Code points in delivered_[0, cursor_): token starts only grow, so text_offset is counted once.
  size_t cursor_ = 0;
  int64_t cursor_points_ = 0;
};

/// choices[i].logprobs for `entries`: chat {"content": [...], "refusal": null}; completions
/// {"tokens", "token_logprobs", "top_logprobs", "text_offset"}. Null when the request did not ask
/// for logprobs.
nlohmann::json logprobs_json(const GenerationRequest& request, const Tokenizer& tokenizer,
                             std::span<const TokenLogprobEntry> entries);

/// A request's token counts for "usage": generated, and the prompt's tokens the prefix cache gave
/// (usage.prompt_tokens_details.cached_tokens).
struct UsageCounts {
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

/// A non-streamed response: chat.completion or text_completion; `logprobs` from logprobs_json.
std::string completion_body(const GenerationRequest& request, const std::string& id,
                            int64_t created, const std::string& text,
                            const std::string& finish_reason, const UsageCounts& counts,
                            const nlohmann::json& logprobs = nullptr);
/// One streamed chunk (chat.completion.chunk or text_completion): `text` as the delta (with the
/// role on the first chat chunk), `finish_reason` empty -> null, `logprobs` those of the tokens
/// this chunk delivers (null: none). With include_usage every chunk carries "usage": null.
nlohmann::json stream_chunk(const GenerationRequest& request, const std::string& id,
                            int64_t created, const std::string& text, bool first,
                            const std::string& finish_reason,
                            const nlohmann::json& logprobs = nullptr);
/// The last chunk of include_usage: no choices, the usage.
nlohmann::json usage_chunk(const GenerationRequest& request, const std::string& id, int64_t created,
                           const UsageCounts& counts);
/// "data: <json>\n\n"
std::string sse_event(const nlohmann::json& value);
/// JSON text; invalid UTF-8 (never produced by StreamingDecoder) would be replaced, not thrown.
std::string dump_json(const nlohmann::json& value);

}  // namespace hyla::serve
