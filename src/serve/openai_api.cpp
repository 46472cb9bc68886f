// OpenAI request parsing and response shapes (see openai_api.h).
#include "serve/openai_api.h"

#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <random>

#include "core/error.h"
#include "model/json_file.h"

namespace hyla::serve {

using ordered_json = nlohmann::ordered_json;

namespace {

constexpr size_t kMaxStopStrings = 4;  // as OpenAI
constexpr int64_t kMaxTokensLimit = int64_t{1} << 24;
constexpr int64_t kMaxCompletionLogprobs = 5;  // as OpenAI's /v1/completions

bool fail(ApiError& error, std::string param, std::string message) {
  error.status = 400;
  error.param = std::move(param);
  error.message = std::move(message);
  return false;
}

/// The JSON type's name, for "expected ..., got <type>" messages.
std::string type_name(const ordered_json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_boolean()) return "a boolean";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

/// A present, non-null field.
const ordered_json* field(const ordered_json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

bool read_number(const ordered_json& body, const char* name, double lo, double hi, bool lo_open,
                 std::optional<double>& out, ApiError& error) {
  const ordered_json* v = field(body, name);
  if (v == nullptr) return true;
  if (!v->is_number())
    return fail(error, name, str_cat("'", name, "' must be a number, got ", type_name(*v)));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo))
    return fail(error, name,
                str_cat("'", name, "' is ", v->dump(), ", expected a number in ",
                        lo_open ? "(" : "[", lo, ", ", hi, "]"));
  out = x;
  return true;
}

bool read_integer(const ordered_json& body, const char* name, int64_t lo, int64_t hi,
                  std::optional<int64_t>& out, ApiError& error) {
  const ordered_json* v = field(body, name);
  if (v == nullptr) return true;
  // 5.0 is accepted as 5 (JSON has one number type); 5.5 is not.
  int64_t x = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX))
      return fail(
          error, name,
          str_cat("'", name, "' is ", v->dump(), ", expected an integer in [", lo, ", ", hi, "]"));
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
             std::floor(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9e18) {
    x = int64_t(v->get<double>());
  } else {
    return fail(error, name, str_cat("'", name, "' must be an integer, got ", type_name(*v)));
  }
  if (x < lo || x > hi)
    return fail(error, name,
                str_cat("'", name, "' is ", x, ", expected an integer in [", lo, ", ", hi, "]"));
  out = x;
  return true;
}

bool read_bool(const ordered_json& body, const char* name, bool& out, ApiError& error) {
  const ordered_json* v = field(body, name);
  if (v == nullptr) return true;
  if (!v->is_boolean())
    return fail(error, name, str_cat("'", name, "' must be a boolean, got ", type_name(*v)));
  out = v->get<bool>();
  return true;
}

/// Chat content may be a string or a list of {"type": "text", "text": ...} parts; templates of
/// text models expect a string, so the parts are joined.
bool normalize_messages(ordered_json& messages, ApiError& error) {
  if (!messages.is_array())
    return fail(error, "messages",
                str_cat("'messages' must be an array of objects, got ", type_name(messages)));
  if (messages.empty()) return fail(error, "messages", "'messages' must not be empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    ordered_json& m = messages[i];
    const std::string where = str_cat("messages[", i, "]");
    if (!m.is_object())
      return fail(error, where, str_cat("'", where, "' must be an object, got ", type_name(m)));
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return fail(error, where + ".role", str_cat("'", where, ".role' must be a string"));
    auto content = m.find("content");
    if (content == m.end() || content->is_null() || content->is_string()) continue;
    if (!content->is_array())
      return fail(error, where + ".content",
                  str_cat("'", where, ".content' must be a string or an array of text parts, got ",
                          type_name(*content)));
    std::string joined;
    for (size_t p = 0; p < content->size(); ++p) {
      const ordered_json& part = (*content)[p];
      const std::string part_where = str_cat(where, ".content[", p, "]");
      if (!part.is_object() || part.value("type", ordered_json()) != "text" ||
          !part.contains("text") || !part["text"].is_string())
        return fail(error, part_where,
                    str_cat("'", part_where,
                            "' must be {\"type\": \"text\", \"text\": string} (only text is "
                            "supported)"));
      joined += part["text"].get<std::string>();
    }
    *content = joined;
  }
  return true;
}

uint64_t random_seed() {
  static std::mutex mutex;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mutex);
  return rng();
}

}  // namespace

std::string dump_json(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string error_body(const ApiError& error) {
  nlohmann::json e = {{"message", error.message}, {"type", error.type}};
  e["param"] = error.param.empty() ? nlohmann::json() : nlohmann::json(error.param);
  e["code"] = error.code.empty() ? nlohmann::json() : nlohmann::json(error.code);
  return dump_json(nlohmann::json{{"error", e}});
}

bool parse_generation_request(Endpoint endpoint, std::string_view text, const ApiContext& context,
                              GenerationRequest& out, ApiError& error) {
  if (Status depth = model::check_json_depth(text, "the request body"); !depth.ok())
    return fail(error, "", depth.message());
  ordered_json body = ordered_json::parse(text, nullptr, false);
  if (body.is_discarded())
    return fail(error, "", "the request body is not valid JSON (expected one JSON object)");
  if (!body.is_object())
    return fail(error, "",
                str_cat("the request body must be a JSON object, got ", type_name(body)));

  out = GenerationRequest();
  out.endpoint = endpoint;
  out.model = context.model_name;
  if (const ordered_json* model = field(body, "model")) {
    if (!model->is_string())
      return fail(error, "model", str_cat("'model' must be a string, got ", type_name(*model)));
    if (model->get<std::string>() != context.model_name) {
      fail(error, "model",
           str_cat("the model '", model->get<std::string>(),
                   "' does not exist: this server serves '", context.model_name, "'"));
      error.status = 404;
      error.code = "model_not_found";
      return false;
    }
  }

  // Log-probabilities: chat takes logprobs (bool) + top_logprobs, completions logprobs (int).
  if (endpoint == Endpoint::kChat) {
    if (!read_bool(body, "logprobs", out.params.logprobs, error)) return false;
    std::optional<int64_t> top;
    if (!read_integer(body, "top_logprobs", 0, runtime::kMaxTopLogprobs, top, error)) return false;
    if (top && !out.params.logprobs)
      return fail(error, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    out.params.top_logprobs = top.value_or(0);
  } else {
    std::optional<int64_t> top;
    if (!read_integer(body, "logprobs", 0, kMaxCompletionLogprobs, top, error)) return false;
    if (field(body, "top_logprobs") != nullptr)
      return fail(error, "top_logprobs",
                  str_cat("'top_logprobs' is a chat field: /v1/completions takes 'logprobs': 0..",
                          kMaxCompletionLogprobs));
    out.params.logprobs = top.has_value();
    out.params.top_logprobs = top.value_or(0);
  }

  // Not supported yet: say so rather than ignore them.
  std::optional<int64_t> n;
  if (!read_integer(body, "n", 1, 128, n, error)) return false;
  if (n && *n != 1) return fail(error, "n", "'n' other than 1 is not supported yet");
  if (endpoint == Endpoint::kCompletions) {
    bool echo = false;
    if (!read_bool(body, "echo", echo, error)) return false;
    if (echo) return fail(error, "echo", "'echo' is not supported yet");
    if (field(body, "suffix") != nullptr)
      return fail(error, "suffix", "'suffix' is not supported yet");
    std::optional<int64_t> best_of;
    if (!read_integer(body, "best_of", 1, 128, best_of, error)) return false;
    if (best_of && *best_of != 1)
      return fail(error, "best_of", "'best_of' other than 1 is not supported yet");
  }

  // The prompt.
  if (endpoint == Endpoint::kChat) {
    const ordered_json* messages = field(body, "messages");
    if (messages == nullptr) return fail(error, "messages", "'messages' is required");
    ordered_json chat_request = ordered_json::object();
    chat_request["messages"] = *messages;
    if (!normalize_messages(chat_request["messages"], error)) return false;
    if (const ordered_json* tools = field(body, "tools")) {
      if (!tools->is_array())
        return fail(error, "tools", str_cat("'tools' must be an array, got ", type_name(*tools)));
      chat_request["tools"] = *tools;
    }
    if (const ordered_json* kwargs = field(body, "chat_template_kwargs")) {
      if (!kwargs->is_object())
        return fail(error, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
      for (auto it = kwargs->begin(); it != kwargs->end(); ++it)
        if (it.key() != "messages" && it.key() != "tools") chat_request[it.key()] = it.value();
    }
    chat_request["add_generation_prompt"] = true;
    Result<std::string> rendered = render_chat(*context.chat, chat_request);
    if (!rendered.ok())
      return fail(
          error, "messages",
          str_cat("the chat template could not render 'messages': ", rendered.status().message()));
    Result<std::vector<int32_t>> ids = context.tokenizer->try_encode(*rendered);
    if (!ids.ok()) return fail(error, "messages", ids.status().message());
    out.prompt = std::move(ids).value();
  } else {
    const ordered_json* prompt = field(body, "prompt");
    if (prompt == nullptr) return fail(error, "prompt", "'prompt' is required");
    const ordered_json* one = prompt;
    if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) one = &(*prompt)[0];
    if (one->is_string()) {
      Result<std::vector<int32_t>> ids = context.tokenizer->try_encode(one->get<std::string>());
      if (!ids.ok()) return fail(error, "prompt", ids.status().message());
      out.prompt = std::move(ids).value();
    } else if (prompt->is_array()) {
      for (size_t i = 0; i < prompt->size(); ++i) {
        const ordered_json& id = (*prompt)[i];
        if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
            id.get<int64_t>() >= context.vocab_size ||
            (id.is_number_unsigned() && id.get<uint64_t>() > uint64_t(INT64_MAX)))
          return fail(error, "prompt",
                      str_cat("'prompt[", i, "]' is ", id.dump(),
                              ": 'prompt' must be a string or an array of token ids in [0, ",
                              context.vocab_size, ")"));
        out.prompt.push_back(int32_t(id.get<int64_t>()));
      }
    } else {
      return fail(
          error, "prompt",
          str_cat("'prompt' must be a string or an array of token ids, got ", type_name(*prompt)));
    }
  }
  if (out.prompt.empty())
    return fail(error, endpoint == Endpoint::kChat ? "messages" : "prompt",
                "the prompt is empty (no tokens)");
  const int64_t prompt_tokens = int64_t(out.prompt.size());
  if (context.max_context > 0 && prompt_tokens >= context.max_context)
    return fail(error, endpoint == Endpoint::kChat ? "messages" : "prompt",
                str_cat("the prompt has ", prompt_tokens, " tokens; the model's context is ",
                        context.max_context, " tokens"));

  // Sampling.
  std::optional<int64_t> max_tokens, max_completion_tokens;
  if (!read_integer(body, "max_tokens", 1, kMaxTokensLimit, max_tokens, error)) return false;
  if (endpoint == Endpoint::kChat && !read_integer(body, "max_completion_tokens", 1,
                                                   kMaxTokensLimit, max_completion_tokens, error))
    return false;
  const char* max_name = max_completion_tokens ? "max_completion_tokens" : "max_tokens";
  int64_t max_new = max_completion_tokens ? *max_completion_tokens
                    : max_tokens          ? *max_tokens
                                          : context.default_max_tokens;
  if (context.max_context > 0 && prompt_tokens + max_new > context.max_context) {
    if (max_completion_tokens || max_tokens)
      return fail(
          error, max_name,
          str_cat("'", max_name, "' is ", max_new, ": with the prompt's ", prompt_tokens,
                  " tokens that exceeds the model's context of ", context.max_context, " tokens"));
    max_new = context.max_context - prompt_tokens;  // the default shrinks to what fits
  }
  out.params.max_new_tokens = max_new;

  std::optional<double> temperature, top_p;
  if (!read_number(body, "temperature", 0.0, 2.0, false, temperature, error)) return false;
  if (!read_number(body, "top_p", 0.0, 1.0, true, top_p, error)) return false;
  std::optional<int64_t> top_k, seed;
  if (!read_integer(body, "top_k", -1, context.vocab_size, top_k, error)) return false;
  if (!read_integer(body, "seed", INT64_MIN, INT64_MAX, seed, error)) return false;
  out.params.temperature = float(temperature.value_or(1.0));
  out.params.top_p = float(top_p.value_or(1.0));
  out.params.top_k = top_k && *top_k > 0 ? *top_k : 0;  // -1 and 0: off
  out.params.seed = seed ? uint64_t(*seed) : random_seed();
  out.params.stop_token_ids = context.stop_token_ids;

  // Predicted outputs: {"type": "content", "content": text or [{"type": "text", "text": ...}]};
  // the text's tokens feed the n-gram drafter (speculation on), and change no token.
  if (const ordered_json* prediction = field(body, "prediction")) {
    const ordered_json* type = prediction->is_object() ? field(*prediction, "type") : nullptr;
    const ordered_json* content = prediction->is_object() ? field(*prediction, "content") : nullptr;
    if (type == nullptr || !type->is_string() || type->get<std::string>() != "content" ||
        content == nullptr)
      return fail(error, "prediction",
                  "'prediction' must be {\"type\": \"content\", \"content\": ...}");
    std::string text;
    if (content->is_string()) {
      text = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t i = 0; i < content->size(); ++i) {
        const ordered_json& part = (*content)[i];
        const ordered_json* part_text = part.is_object() ? field(part, "text") : nullptr;
        if (part_text == nullptr || !part_text->is_string())
          return fail(error, "prediction",
                      str_cat("'prediction.content[", i,
                              "]' must be {\"type\": \"text\", "
                              "\"text\": string}"));
        text += part_text->get<std::string>();
      }
    } else {
      return fail(error, "prediction",
                  str_cat("'prediction.content' must be a string or an array of text parts, got ",
                          type_name(*content)));
    }
    Result<std::vector<int32_t>> ids = context.tokenizer->try_encode(text);
    if (!ids.ok()) return fail(error, "prediction", ids.status().message());
    if (context.max_context > 0 && int64_t(ids->size()) > context.max_context)
      return fail(error, "prediction",
                  str_cat("'prediction' has ", ids->size(),
                          " tokens, more than the model's context of ", context.max_context));
    out.params.predicted_tokens = std::move(ids).value();
  }

  if (const ordered_json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      out.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > kMaxStopStrings)
        return fail(error, "stop",
                    str_cat("'stop' has ", stop->size(), " strings, at most ", kMaxStopStrings));
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string())
          return fail(error, "stop",
                      str_cat("'stop[", i, "]' must be a string, got ", type_name((*stop)[i])));
        out.stop.push_back((*stop)[i].get<std::string>());
      }
    } else {
      return fail(
          error, "stop",
          str_cat("'stop' must be a string or an array of strings, got ", type_name(*stop)));
    }
  }

  if (!read_bool(body, "stream", out.stream, error)) return false;
  if (const ordered_json* options = field(body, "stream_options")) {
    if (!options->is_object())
      return fail(error, "stream_options",
                  str_cat("'stream_options' must be an object, got ", type_name(*options)));
    if (!out.stream)
      return fail(error, "stream_options", "'stream_options' is only allowed with 'stream': true");
    if (auto it = options->find("include_usage"); it != options->end() && !it->is_null()) {
      if (!it->is_boolean())
        return fail(error, "stream_options.include_usage",
                    "'stream_options.include_usage' must be a boolean");
      out.include_usage = it->get<bool>();
    }
  }
  if (Status s = runtime::validate(out.params, context.vocab_size); !s.ok())
    return fail(error, "", s.message());
  return true;
}

namespace {

nlohmann::json usage(const GenerationRequest& request, const UsageCounts& counts) {
  const int64_t prompt_tokens = int64_t(request.prompt.size());
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", counts.completion_tokens},
          {"total_tokens", prompt_tokens + counts.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", counts.cached_tokens}}}};
}

nlohmann::json finish_json(const std::string& finish_reason) {
  return finish_reason.empty() ? nlohmann::json() : nlohmann::json(finish_reason);
}

}  // namespace

// ---- log-probabilities ----

namespace {

bool is_continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

/// JSON has no infinity: -inf (no probability at all) is written as OpenAI does.
double json_logprob(double logprob) { return std::isfinite(logprob) ? logprob : -9999.0; }

nlohmann::json byte_list(std::string_view bytes) {
  nlohmann::json out = nlohmann::json::array();
  for (char c : bytes) out.push_back(int(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

void LogprobTracker::push(TokenLogprobEntry entry, std::string_view decoded, bool holding) {
  const int64_t start = decoded_;
  decoded_ += int64_t(decoded.size());
  pending_.push_back({std::move(entry), start, -1});
  if (holding) return;
  for (auto it = pending_.rbegin(); it != pending_.rend() && it->end < 0; ++it) it->end = decoded_;
}

void LogprobTracker::flush(std::string_view decoded) {
  decoded_ += int64_t(decoded.size());
  for (auto it = pending_.rbegin(); it != pending_.rend() && it->end < 0; ++it) it->end = decoded_;
}

std::vector<TokenLogprobEntry> LogprobTracker::take(std::string_view text, bool cut) {
  delivered_ += text;
  const int64_t delivered = int64_t(delivered_.size());
  std::vector<TokenLogprobEntry> out;
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    const bool whole = p.end >= 0 && p.end <= delivered;
    if (!whole && !(cut && p.start < delivered)) break;
    for (; int64_t(cursor_) < p.start && cursor_ < delivered_.size(); ++cursor_)
      if (!is_continuation_byte(delivered_[cursor_])) ++cursor_points_;
    p.entry.text_offset = cursor_points_;
    out.push_back(std::move(p.entry));
    pending_.pop_front();
  }
  if (cut) pending_.clear();  // nothing after the cut is shown
  return out;
}

nlohmann::json logprobs_json(const GenerationRequest& request, const Tokenizer& tokenizer,
                             std::span<const TokenLogprobEntry> entries) {
  if (!request.params.logprobs) return nullptr;
  auto token_text = [&](int32_t id) { return sanitize_utf8(tokenizer.token_bytes(id)); };
  if (request.endpoint == Endpoint::kChat) {
    nlohmann::json content = nlohmann::json::array();
    for (const TokenLogprobEntry& e : entries) {
      nlohmann::json top = nlohmann::json::array();
      for (const runtime::TokenLogprob& t : e.top)
        top.push_back({{"token", token_text(t.token)},
                       {"logprob", json_logprob(t.logprob)},
                       {"bytes", byte_list(tokenizer.token_bytes(t.token))}});
      content.push_back({{"token", token_text(e.token)},
                         {"logprob", json_logprob(e.logprob)},
                         {"bytes", byte_list(tokenizer.token_bytes(e.token))},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  // Completions: top_logprobs maps token text -> logprob; it holds the chosen token too (so up to
  // logprobs + 1 entries, as OpenAI's). Two tokens of the same text (U+FFFD) share one key.
  nlohmann::json tokens = nlohmann::json::array(), token_logprobs = nlohmann::json::array(),
                 top_logprobs = nlohmann::json::array(), text_offset = nlohmann::json::array();
  for (const TokenLogprobEntry& e : entries) {
    tokens.push_back(token_text(e.token));
    token_logprobs.push_back(json_logprob(e.logprob));
    nlohmann::json top = nlohmann::json::object();
    for (const runtime::TokenLogprob& t : e.top) top[token_text(t.token)] = json_logprob(t.logprob);
    top[token_text(e.token)] = json_logprob(e.logprob);
    top_logprobs.push_back(std::move(top));
    text_offset.push_back(e.text_offset);
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(text_offset)}};
}

// ---- responses ----

std::string completion_body(const GenerationRequest& request, const std::string& id,
                            int64_t created, const std::string& text,
                            const std::string& finish_reason, const UsageCounts& counts,
                            const nlohmann::json& logprobs) {
  nlohmann::json choice = {{"index", 0}};
  if (request.endpoint == Endpoint::kChat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_json(finish_reason);
  const bool chat = request.endpoint == Endpoint::kChat;
  return dump_json({{"id", id},
                    {"object", chat ? "chat.completion" : "text_completion"},
                    {"created", created},
                    {"model", request.model},
                    {"choices", nlohmann::json::array({choice})},
                    {"usage", usage(request, counts)}});
}

nlohmann::json stream_chunk(const GenerationRequest& request, const std::string& id,
                            int64_t created, const std::string& text, bool first,
                            const std::string& finish_reason, const nlohmann::json& logprobs) {
  const bool chat = request.endpoint == Endpoint::kChat;
  nlohmann::json choice = {{"index", 0}};
  if (chat) {
    nlohmann::json delta = nlohmann::json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish_reason.empty())) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_json(finish_reason);
  nlohmann::json chunk = {{"id", id},
                          {"object", chat ? "chat.completion.chunk" : "text_completion"},
                          {"created", created},
                          {"model", request.model},
                          {"choices", nlohmann::json::array({choice})}};
  if (request.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

nlohmann::json usage_chunk(const GenerationRequest& request, const std::string& id, int64_t created,
                           const UsageCounts& counts) {
  const bool chat = request.endpoint == Endpoint::kChat;
  return {{"id", id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", request.model},
          {"choices", nlohmann::json::array()},
          {"usage", usage(request, counts)}};
}

std::string sse_event(const nlohmann::json& value) { return "data: " + dump_json(value) + "\n\n"; }

}  // namespace hyla::serve
