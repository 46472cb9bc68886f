// `hyla chat` (see chat.h): tokenizer + chat template + model (on --device) + one engine sized for
// one conversation of the whole context; per turn: messages -> template -> ids -> engine ->
// StreamingDecoder -> stdout.
#include "cli/chat.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "cli/device.h"
#include "cli/generate.h"
#include "core/error.h"
#ifdef HYLA_WITH_PCRE2
#include <nlohmann/json.hpp>

#include "cli/chat_model.h"
#include "model/architecture.h"
#include "runtime/engine.h"
#include "runtime/engine_sizing.h"
#include "serve/chat_template.h"
#include "serve/tokenizer.h"
#endif

namespace hyla::cli {

namespace {

int fail(std::FILE* err, const std::string& message) {
  std::fprintf(err, "hyla chat: %s\n", message.c_str());
  return 1;
}

#ifdef HYLA_WITH_PCRE2
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using ordered_json = nlohmann::ordered_json;

/// One line of `in` without its line end; false at the end of input with nothing read.
bool read_line(std::FILE* in, std::string& line) {
  line.clear();
  int c = 0;
  while ((c = std::fgetc(in)) != EOF && c != '\n') line += char(c);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return c != EOF || !line.empty();
}

/// What one reply did, for the stderr line and the history.
struct Reply {
  std::string text;
  int64_t tokens = 0;
  runtime::FinishReason reason = runtime::FinishReason::kNone;
  std::string error;
};

/// Generates one reply to `prompt`, streaming its text to `out`.
Reply generate_reply(runtime::Engine& engine, const serve::Tokenizer& tokenizer,
                     std::vector<int32_t> prompt, const runtime::SamplingParams& params,
                     std::FILE* out) {
  Reply reply;
  Result<runtime::RequestId> id = engine.add_request(std::move(prompt), params);
  if (!id.ok()) {
    reply.reason = runtime::FinishReason::kError;
    reply.error = id.status().message();
    return reply;
  }
  serve::StreamingDecoder decoder(tokenizer);
  auto show = [&](const std::string& piece) {
    reply.text += piece;
    std::fputs(piece.c_str(), out);
    std::fflush(out);
  };
  while (!engine.idle()) {
    for (const runtime::TokenEvent& e : engine.step()) {
      if (e.finished) reply.reason = e.reason;
      if (e.reason == runtime::FinishReason::kError) reply.error = e.error;
      if (e.token < 0) continue;
      ++reply.tokens;
      if (e.reason == runtime::FinishReason::kStopToken) continue;  // the end mark: not shown
      show(decoder.push(e.token));
    }
  }
  show(decoder.finish());
  return reply;
}

int chat(const ChatOptions& options, std::FILE* in, std::FILE* out, std::FILE* err) {
  const std::string dir = options.model_dir.empty() ? default_model_dir() : options.model_dir;
  if (!fs::exists(fs::path(dir) / "config.json"))
    return fail(err, str_cat("model folder ", dir, " has no config.json"));
  if (!fs::exists(fs::path(dir) / "tokenizer.json"))
    return fail(err, str_cat("model folder ", dir, " has no tokenizer.json"));
  const Result<Device> device = resolve_device(options.device);
  if (!device.ok()) return fail(err, device.status().message());

  const auto load_start = Clock::now();
  Result<serve::Tokenizer> tokenizer = serve::Tokenizer::load(dir + "/tokenizer.json");
  if (!tokenizer.ok()) return fail(err, tokenizer.status().message());
  Result<serve::ChatTemplate> chat_template = load_model_chat_template(dir, options.model_dir);
  if (!chat_template.ok()) return fail(err, chat_template.status().message());
  Result<std::unique_ptr<model::Model>> model = model::load_model(dir);
  if (!model.ok()) return fail(err, model.status().message());
  model = model_on(std::move(model).value(), device.value());
  if (!model.ok()) return fail(err, model.status().message());
  const model::ModelConfig& config = model.value()->config();
  if (tokenizer->vocab_size() > config.vocab_size)
    return fail(err, str_cat("the tokenizer has ", tokenizer->vocab_size(),
                             " tokens, more than the model's vocabulary of ", config.vocab_size));

  // One conversation at a time, which may grow to the whole context.
  const int64_t context = config.max_context > 0 ? config.max_context : 4096;
  runtime::EngineOptions engine_options;
  engine_options.device = device.value();
  // With room for the prefix cache's snapshots of it (runtime::size_engine): each turn resumes
  // from the conversation so far and computes only its new tokens.
  engine_options.prefix_cache.enabled = true;
  engine_options.max_running = 1;
  Result<runtime::EngineSizing> sizing = runtime::size_engine(config, engine_options, {context});
  if (!sizing.ok()) return fail(err, sizing.status().message());
  engine_options.memory_budget_bytes = sizing->budget_bytes;
  engine_options.state_ratio = sizing->state_ratio;
  engine_options.max_running = sizing->max_running;
  Result<std::unique_ptr<runtime::Engine>> engine =
      runtime::Engine::create(*model.value(), engine_options);
  if (!engine.ok()) return fail(err, engine.status().message());

  runtime::SamplingParams params;
  params.temperature = options.temperature;
  params.top_p = options.top_p;
  params.max_new_tokens = options.max_tokens;
  params.stop_token_ids = chat_stop_tokens(*tokenizer, dir, config.vocab_size);
  if (Status s = runtime::validate(params, config.vocab_size); !s.ok())
    return fail(err, s.message());

  const bool terminal = isatty(fileno(in)) != 0;
  std::fprintf(err, "hyla chat: %s on %s, ready in %.2f s; /reset forgets, /exit (or EOF) ends\n",
               dir.c_str(), device_name(device.value()).c_str(),
               std::chrono::duration<double>(Clock::now() - load_start).count());

  ordered_json start = ordered_json::array();
  if (!options.system.empty()) start.push_back({{"role", "system"}, {"content", options.system}});
  ordered_json messages = start;
  int64_t turn = 0;
  std::string line;
  for (;;) {
    std::fputs("> ", out);
    std::fflush(out);
    if (!read_line(in, line)) {
      std::fputs("\n", out);
      break;
    }
    if (!terminal) std::fprintf(out, "%s\n", line.c_str());
    std::fflush(out);
    if (line == "/exit") break;
    if (line == "/reset") {
      messages = start;
      std::fputs("[conversation reset]\n\n", out);
      continue;
    }
    if (line.empty()) continue;

    messages.push_back({{"role", "user"}, {"content", line}});
    Result<std::string> rendered = serve::render_chat(
        *chat_template, ordered_json{{"messages", messages}, {"add_generation_prompt", true}});
    Result<std::vector<int32_t>> prompt = rendered.ok()
                                              ? tokenizer->try_encode(*rendered)
                                              : Result<std::vector<int32_t>>(rendered.status());
    std::string problem;
    if (!prompt.ok()) {
      problem = prompt.status().message();
    } else if (int64_t(prompt->size()) + options.max_tokens > context) {
      problem = str_cat("the conversation is ", prompt->size(), " tokens; with --max-tokens ",
                        options.max_tokens, " that exceeds the model's context of ", context,
                        " tokens (/reset starts over)");
    }
    if (!problem.empty()) {
      messages.erase(messages.size() - 1);
      std::fprintf(err, "hyla chat: %s\n", problem.c_str());
      continue;
    }
    runtime::SamplingParams turn_params = params;
    turn_params.seed = uint64_t(options.seed) + uint64_t(turn++);
    const auto reply_start = Clock::now();
    const Reply reply =
        generate_reply(*engine.value(), *tokenizer, std::move(prompt).value(), turn_params, out);
    std::fputs("\n\n", out);
    std::fflush(out);
    const double seconds = std::chrono::duration<double>(Clock::now() - reply_start).count();
    if (reply.reason == runtime::FinishReason::kError) {
      messages.erase(messages.size() - 1);
      std::fprintf(err, "hyla chat: the reply failed: %s\n", reply.error.c_str());
      continue;
    }
    std::fprintf(err, "[%lld tokens in %.2f s, %.1f tokens/s; stopped by %s]\n",
                 static_cast<long long>(reply.tokens), seconds,
                 seconds > 0 ? double(reply.tokens) / seconds : 0.0,
                 runtime::finish_reason_name(reply.reason));
    messages.push_back({{"role", "assistant"}, {"content", reply.text}});
  }
  return 0;
}
#endif

}  // namespace

int run_chat(const ChatOptions& options, std::FILE* in, std::FILE* out, std::FILE* err) {
#ifdef HYLA_WITH_PCRE2
  try {
    return chat(options, in, out, err);
  } catch (const std::exception& e) {
    return fail(err, e.what());
  }
#else
  (void)options;
  (void)in;
  (void)out;
  return fail(err,
              "this hyla was built without the tokenizer (it needs libpcre2-dev + libicu-dev: "
              "install them, e.g. with tools/install_deps.sh, and rebuild)");
#endif
}

}  // namespace hyla::cli
