// `hyla generate` (see generate.h). Ids mode: load_model -> Engine::create (memory plan to stderr)
// -> one request per prompt -> step until idle -> one line of ids per prompt, or one JSON object.
// Text mode: tokenizer + model + engine (one progress line) -> encode the prompt -> one request,
// its tokens streamed through StreamingDecoder as they come -> tokens/s.
#include "cli/generate.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "core/error.h"
#include "model/architecture.h"
#include "model/json_file.h"
#include "runtime/engine.h"
#ifdef HYLA_WITH_PCRE2
#include "serve/tokenizer.h"
#endif

namespace hyla::cli {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// "1 2 3" or "1,2,3" -> {1, 2, 3}. Errors: no id, or a word that is not a non-negative integer
/// that fits int32 (the vocabulary check comes later, with the model's size).
Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t at = 0;
  while (at < text.size()) {
    if (text[at] == ' ' || text[at] == ',' || text[at] == '\t') {
      ++at;
      continue;
    }
    size_t end = at;
    while (end < text.size() && text[end] != ' ' && text[end] != ',' && text[end] != '\t') ++end;
    const std::string word = text.substr(at, end - at);
    char* stop = nullptr;
    const long long value = std::strtoll(word.c_str(), &stop, 10);
    if (word.empty() || *stop != '\0' || word[0] == '-' || word[0] == '+' || value > INT32_MAX)
      return invalid_argument("'", word, "' is not a token id (a non-negative integer)");
    ids.push_back(int32_t(value));
    at = end;
  }
  if (ids.empty()) return invalid_argument("no token ids in '", text, "'");
  return ids;
}

/// The folder must hold a config.json; the message says what to do when it does not.
Status check_model_dir(const std::string& dir, bool is_default) {
  const std::string hint =
      is_default ? " (the embedded demo model is made by tools/demo/train.py, see models/README.md;"
                   " or give --model DIR)"
                 : "";
  if (!fs::is_directory(dir))
    return Status(ErrorCode::kNotFound, str_cat("model folder ", dir, " does not exist", hint));
  if (!fs::exists(fs::path(dir) / "config.json"))
    return Status(ErrorCode::kNotFound, str_cat("model folder ", dir, " has no config.json", hint));
  return ok_status();
}

int fail(std::FILE* err, const std::string& message) {
  std::fprintf(err, "hyla generate: %s\n", message.c_str());
  return 1;
}

runtime::SamplingParams sampling(const GenerateOptions& o, bool text_mode) {
  runtime::SamplingParams p;
  p.max_new_tokens = o.max_new_tokens.value_or(text_mode ? 128 : 16);
  p.temperature = o.temperature.value_or(text_mode ? 0.8f : 0.0f);
  p.top_k = o.top_k;
  p.top_p = o.top_p.value_or(text_mode ? 0.95f : 1.0f);
  p.seed = o.seed;
  return p;
}

int run_ids(const GenerateOptions& options, const std::string& model_dir, std::FILE* out,
            std::FILE* err) {
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < options.prompt_ids.size(); ++i) {
    Result<std::vector<int32_t>> ids = parse_ids(options.prompt_ids[i]);
    if (!ids.ok()) return fail(err, str_cat("--prompt-ids #", i + 1, ": ", ids.status().message()));
    prompts.push_back(std::move(ids).value());
  }

  Result<std::unique_ptr<model::Model>> model = model::load_model(model_dir);
  if (!model.ok()) return fail(err, model.status().message());
  for (const std::string& warning : model.value()->config().warnings)
    std::fprintf(err, "hyla generate: warning: %s\n", warning.c_str());
  runtime::EngineOptions engine_options;
  engine_options.memory_budget_bytes = options.budget_mib << 20;
  Result<std::unique_ptr<runtime::Engine>> engine =
      runtime::Engine::create(*model.value(), engine_options);
  if (!engine.ok()) return fail(err, engine.status().message());
  std::fprintf(err, "memory plan: %s\n", engine.value()->plan().summary().c_str());

  const runtime::SamplingParams params = sampling(options, /*text_mode=*/false);
  std::map<runtime::RequestId, size_t> index;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Result<runtime::RequestId> id = engine.value()->add_request(prompts[i], params);
    if (!id.ok()) return fail(err, str_cat("prompt ", i + 1, ": ", id.status().message()));
    index[id.value()] = i;
  }

  std::vector<std::vector<int32_t>> tokens(prompts.size());
  const auto start = Clock::now();
  while (!engine.value()->idle()) {
    for (const runtime::TokenEvent& e : engine.value()->step()) {
      if (e.reason == runtime::FinishReason::kError)
        return fail(err, str_cat("prompt ", index.at(e.request) + 1, " failed: ", e.error));
      if (e.token >= 0) tokens[index.at(e.request)].push_back(e.token);
    }
  }
  const double seconds = seconds_since(start);
  const runtime::EngineStats stats = engine.value()->stats();
  const double tokens_per_s = seconds > 0 ? double(stats.tokens_generated) / seconds : 0.0;

  if (options.json) {
    nlohmann::json requests = nlohmann::json::array();
    for (size_t i = 0; i < prompts.size(); ++i)
      requests.push_back({{"prompt", prompts[i]}, {"tokens", tokens[i]}});
    const nlohmann::json doc = {{"requests", requests}, {"tokens_per_s", tokens_per_s}};
    std::fprintf(out, "%s\n", doc.dump().c_str());
  } else {
    for (const std::vector<int32_t>& ids : tokens) {
      std::string line;
      for (size_t t = 0; t < ids.size(); ++t) line += str_cat(t > 0 ? " " : "", ids[t]);
      std::fprintf(out, "%s\n", line.c_str());
    }
  }
  std::fprintf(err, "%lld tokens in %.3f s (%lld prompt tokens, %lld steps): %.1f tokens/s\n",
               static_cast<long long>(stats.tokens_generated), seconds,
               static_cast<long long>(stats.prompt_tokens), static_cast<long long>(stats.steps),
               tokens_per_s);
  return 0;
}

#ifdef HYLA_WITH_PCRE2
/// Token ids that end a text generation: the tokenizer's <|endoftext|> and config.json's
/// eos_token_id (a number or a list), those inside the model's vocabulary.
std::vector<int32_t> stop_tokens(const serve::Tokenizer& tokenizer, const std::string& model_dir,
                                 int64_t vocab_size) {
  std::set<int32_t> ids;
  if (const std::optional<int32_t> id = tokenizer.token_id("<|endoftext|>")) ids.insert(*id);
  Result<nlohmann::json> config = model::read_json_file(model_dir + "/config.json");
  if (config.ok() && config->is_object() && config->contains("eos_token_id")) {
    const nlohmann::json& eos = (*config)["eos_token_id"];
    if (eos.is_number_integer()) ids.insert(eos.get<int32_t>());
    if (eos.is_array())
      for (const nlohmann::json& e : eos)
        if (e.is_number_integer()) ids.insert(e.get<int32_t>());
  }
  std::vector<int32_t> out;
  for (int32_t id : ids)
    if (id >= 0 && id < vocab_size) out.push_back(id);
  return out;
}

int run_text(const GenerateOptions& options, const std::string& model_dir, std::FILE* out,
             std::FILE* err) {
  const std::string tokenizer_path =
      options.tokenizer_path.empty() ? model_dir + "/tokenizer.json" : options.tokenizer_path;
  if (!fs::exists(tokenizer_path))
    return fail(err, str_cat(tokenizer_path,
                             " does not exist: a text prompt needs the model's tokenizer "
                             "(or give --tokenizer FILE, or token ids with --prompt-ids)"));

  // One progress line while loading: each stage is named as it starts.
  const auto load_start = Clock::now();
  std::fprintf(err, "loading %s: tokenizer", model_dir.c_str());
  std::fflush(err);
  Result<serve::Tokenizer> tokenizer = serve::Tokenizer::load(tokenizer_path);
  if (!tokenizer.ok()) return fail(err, str_cat("\n", tokenizer.status().message()));
  std::fprintf(err, ", weights");
  std::fflush(err);
  Result<std::unique_ptr<model::Model>> model = model::load_model(model_dir);
  if (!model.ok()) return fail(err, str_cat("\n", model.status().message()));
  const model::ModelConfig& config = model.value()->config();
  std::fprintf(err, " (%s, %lld layers)", config.model_type.c_str(),
               static_cast<long long>(config.num_layers));
  for (const std::string& warning : config.warnings)
    std::fprintf(err, "\nhyla generate: warning: %s", warning.c_str());
  if (tokenizer->vocab_size() > config.vocab_size)
    return fail(err, str_cat("\nthe tokenizer has ", tokenizer->vocab_size(),
                             " tokens, more than the model's vocabulary of ", config.vocab_size));
  std::fprintf(err, ", engine");
  std::fflush(err);
  runtime::EngineOptions engine_options;
  engine_options.memory_budget_bytes = options.budget_mib << 20;
  Result<std::unique_ptr<runtime::Engine>> engine =
      runtime::Engine::create(*model.value(), engine_options);
  if (!engine.ok()) return fail(err, str_cat("\n", engine.status().message()));
  std::fprintf(err, ": ready in %.2f s\n", seconds_since(load_start));

  const std::vector<int32_t> prompt = tokenizer->encode(options.prompt_text);
  if (prompt.empty()) return fail(err, "the prompt is empty");
  runtime::SamplingParams params = sampling(options, /*text_mode=*/true);
  if (!options.ignore_eos)
    params.stop_token_ids = stop_tokens(*tokenizer, model_dir, config.vocab_size);
  Result<runtime::RequestId> id = engine.value()->add_request(prompt, params);
  if (!id.ok()) return fail(err, id.status().message());

  if (!options.json) {
    std::fputs(options.prompt_text.c_str(), out);
    std::fflush(out);
  }
  serve::StreamingDecoder decoder(*tokenizer);
  std::vector<int32_t> tokens;
  std::string text;
  runtime::FinishReason reason = runtime::FinishReason::kNone;
  const auto start = Clock::now();
  double first_token_s = 0;
  while (!engine.value()->idle()) {
    for (const runtime::TokenEvent& e : engine.value()->step()) {
      if (e.reason == runtime::FinishReason::kError) return fail(err, e.error);
      if (e.finished) reason = e.reason;
      if (e.token < 0) continue;
      if (tokens.empty()) first_token_s = seconds_since(start);
      tokens.push_back(e.token);
      if (e.reason == runtime::FinishReason::kStopToken) continue;  // the end mark: not shown
      const std::string piece = decoder.push(e.token);
      text += piece;
      if (!options.json) {
        std::fputs(piece.c_str(), out);
        std::fflush(out);
      }
    }
  }
  const std::string rest = decoder.finish();
  text += rest;
  const double seconds = seconds_since(start);
  if (options.json) {
    const nlohmann::json doc = {{"prompt", options.prompt_text},
                                {"prompt_ids", prompt},
                                {"tokens", tokens},
                                {"text", text},
                                {"finish", runtime::finish_reason_name(reason)}};
    std::fprintf(out, "%s\n", doc.dump().c_str());
  } else {
    std::fprintf(out, "%s\n", rest.c_str());
  }
  std::fflush(out);  // the text ends before the speed line on a shared terminal
  // Decode speed: the tokens after the first, over the time after the first (the first token's
  // time is the prompt's prefill).
  const double decode_s = seconds - first_token_s;
  const double tokens_per_s =
      tokens.size() > 1 && decode_s > 0 ? double(tokens.size() - 1) / decode_s : 0.0;
  std::fprintf(err,
               "%zu tokens in %.2f s (prompt: %zu tokens, first token after %.2f s): %.1f "
               "tokens/s; stopped by %s\n",
               tokens.size(), seconds, prompt.size(), first_token_s, tokens_per_s,
               runtime::finish_reason_name(reason));
  return 0;
}
#endif

}  // namespace

std::string default_model_dir() {
  if (const char* env = std::getenv("HYLA_DEMO_MODEL"); env != nullptr && env[0] != '\0')
    return env;
  std::vector<fs::path> candidates;
#ifdef HYLA_SOURCE_DIR
  candidates.push_back(fs::path(HYLA_SOURCE_DIR) / "models" / "hyla-demo");
#endif
  // build/bin/hyla -> <repo>/models/hyla-demo, also when the source dir was moved.
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path() / ".." / ".." / "models" / "hyla-demo");
  for (const fs::path& dir : candidates)
    if (fs::exists(dir / "config.json", ec)) return dir.lexically_normal().string();
  return candidates.empty() ? std::string("models/hyla-demo")
                            : candidates.front().lexically_normal().string();
}

int run_generate(const GenerateOptions& options, std::FILE* out, std::FILE* err) {
  const bool ids_mode = !options.prompt_ids.empty();
  if (ids_mode && !options.prompt_text.empty())
    return fail(err, "give either a prompt text or --prompt-ids, not both");
  if (!ids_mode && options.prompt_text.empty())
    return fail(err, "no prompt: give a text (hyla generate \"Once upon a time\") or --prompt-ids");
  const bool is_default = options.model_dir.empty();
  const std::string model_dir = is_default ? default_model_dir() : options.model_dir;
  if (const Status s = check_model_dir(model_dir, is_default); !s.ok())
    return fail(err, s.message());
  if (ids_mode) return run_ids(options, model_dir, out, err);
#ifdef HYLA_WITH_PCRE2
  return run_text(options, model_dir, out, err);
#else
  return fail(err,
              "this hyla was built without the tokenizer (CMake found no PCRE2 + ICU: install "
              "libpcre2-dev and libicu-dev, e.g. with tools/install_deps.sh, and rebuild), so it "
              "cannot take a text prompt; --prompt-ids still works");
#endif
}

}  // namespace hyla::cli
