// The OpenAI API's request and response shapes for /v1/chat/completions and /v1/completions:
// a request body -> a GenerationRequest (prompt ids, sampling, stop strings, streaming) or an
// ApiError naming the field; generated text -> the response objects and stream chunks.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
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
  runtime::SamplingParams params;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  std::string model;  ///< the name answered in responses
};

/// Reads a request body. Errors (status 400) name the field: bad JSON, wrong types, values out of
/// range, features not supported yet (logprobs, n > 1, echo, suffix).
bool parse_generation_request(Endpoint endpoint, std::string_view body, const ApiContext& context,
                              GenerationRequest& out, ApiError& error);

/// A non-streamed response: chat.completion or text_completion.
std::string completion_body(const GenerationRequest& request, const std::string& id,
                            int64_t created, const std::string& text,
                            const std::string& finish_reason, int64_t completion_tokens);
/// One streamed chunk (chat.completion.chunk or text_completion): `text` as the delta (with the
/// role on the first chat chunk), `finish_reason` empty -> null. With include_usage every chunk
/// carries "usage": null.
nlohmann::json stream_chunk(const GenerationRequest& request, const std::string& id,
                            int64_t created, const std::string& text, bool first,
                            const std::string& finish_reason);
/// The last chunk of include_usage: no choices, the usage.
nlohmann::json usage_chunk(const GenerationRequest& request, const std::string& id, int64_t created,
                           int64_t completion_tokens);
/// "data: <json>\n\n"
std::string sse_event(const nlohmann::json& value);
/// JSON text; invalid UTF-8 (never produced by StreamingDecoder) would be replaced, not thrown.
std::string dump_json(const nlohmann::json& value);

}  // namespace hyla::serve
