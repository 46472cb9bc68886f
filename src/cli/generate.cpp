// `hyla generate` (see generate.h). Ids mode: load_model -> Model::to(--device) -> Engine::create
// (memory plan to stderr)
// -> one request per prompt -> step until idle -> one line of ids per prompt, or one JSON object.
// Text mode: tokenizer + model (moved to --device) + engine (one progress line) -> encode the
// prompt -> one request, its tokens streamed through StreamingDecoder as they come -> tokens/s.
#include "cli/generate.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "cli/device.h"
#include "cli/io.h"
#include "cli/speculative.h"
#include "core/error.h"
#include "model/architecture.h"
#include "model/json_file.h"
#include "runtime/engine.h"
#include "runtime/engine_sizing.h"
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
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return Status(ErrorCode::kNotFound, str_cat("model folder ", dir, " does not exist", hint));
  if (!fs::exists(fs::path(dir) / "config.json", ec))
    return Status(ErrorCode::kNotFound, str_cat("model folder ", dir, " has no config.json", hint));
  return ok_status();
}

int fail(std::FILE* err, const std::string& message) {
  std::fprintf(err, "hyla generate: %s\n", message.c_str());
  return 1;
}

/// fail() after the unfinished progress line of text mode ("loading ...: tokenizer, weights").
int fail_after_progress(std::FILE* err, const std::string& message) {
  std::fputc('\n', err);
  return fail(err, message);
}

runtime::SamplingParams sampling(const GenerateOptions& o, bool text_mode) {
  runtime::SamplingParams p;
  p.max_new_tokens = o.max_new_tokens.value_or(text_mode ? 128 : 16);
  p.temperature = o.temperature.value_or(text_mode ? 0.8f : 0.0f);
  p.top_k = o.top_k;
  p.top_p = o.top_p.value_or(text_mode ? 0.95f : 1.0f);
  p.seed = uint64_t(o.seed);
  return p;
}

/// The engine's options on `device` for `prompts` (token counts) run at `max_new_tokens`: the
/// budget given, or one sized for every prompt at once with room for the snapshots the prefix
/// cache keeps of them (runtime::size_engine; at most 3/4 of the device's available memory; a
/// note says so when that caps it), the context limit and its override.
/// With --speculative draft:DIR the draft model is loaded into `draft`.
Result<runtime::EngineOptions> engine_options(const GenerateOptions& options,
                                              const model::ModelConfig& config, Device device,
                                              const std::vector<int64_t>& prompt_tokens,
                                              int64_t max_new_tokens, std::FILE* err,
                                              std::unique_ptr<model::Model>* draft) {
  runtime::EngineOptions engine;
  engine.device = device;
  HYLA_ASSIGN_OR_RETURN(engine.tensor_parallel,
                        tensor_parallel_options(options.tensor_parallel, device));
  engine.allow_long_context = options.allow_long_context;
  engine.prefix_cache.enabled = options.prefix_cache == "on";
  engine.prefix_cache.host_bytes = options.prefix_cache_host_mib << 20;
  engine.prefix_cache.device_tier_bytes = options.prefix_cache_device_mib << 20;
  engine.prefix_cache.int8_snapshots = options.prefix_cache_int8 == "on";
  engine.speculative.draft_tokens = options.draft_tokens;
  engine.speculative.mode =
      options.spec_mode == "states" ? model::VerifyMode::kStepStates : model::VerifyMode::kReplay;
  {
    std::vector<int64_t> tokens;
    for (const int64_t n : prompt_tokens) tokens.push_back(n + max_new_tokens);
    HYLA_ASSIGN_OR_RETURN(const SpeculativeFlag flag, parse_speculative_flag(options.speculative));
    HYLA_RETURN_IF_ERROR(apply_speculative_flag(flag, tokens, &engine, draft));
  }
  if (options.budget_mib) {
    engine.memory_budget_bytes = *options.budget_mib << 20;
    return engine;
  }
  std::vector<int64_t> tokens;
  for (int64_t n : prompt_tokens) tokens.push_back(n + max_new_tokens);
  HYLA_ASSIGN_OR_RETURN(const runtime::EngineSizing sizing,
                        runtime::size_engine(config, engine, tokens));
  engine.memory_budget_bytes = sizing.budget_bytes;
  engine.state_ratio = sizing.state_ratio;
  engine.max_running = sizing.max_running;
  Result<AvailableMemory> available = available_memory(device);
  // Ranks on the host share it: each gets its part of the 3/4.
  const int sharing = device.is_cpu() ? options.tensor_parallel : 1;
  if (available.ok() && sizing.budget_bytes > available->bytes / 4 * 3 / sharing) {
    engine.memory_budget_bytes = available->bytes / 4 * 3 / sharing;
    std::fprintf(err,
                 "hyla generate: note: running every prompt at once needs %s%s, more than 3/4 "
                 "of the %s%s: the budget is %s and prompts wait for each other "
                 "(--budget-mib sets it)\n",
                 runtime::format_bytes(sizing.budget_bytes).c_str(), sharing > 1 ? " per rank" : "",
                 available->description.c_str(),
                 sharing > 1 ? str_cat(" shared by ", sharing, " ranks").c_str() : "",
                 runtime::format_bytes(engine.memory_budget_bytes).c_str());
  }
  return engine;
}

/// The prefix cache's figures for --json (all zero when it is off).
nlohmann::json cache_json(const runtime::Engine& engine) {
  const runtime::EngineStats s = engine.stats();
  return {{"enabled", engine.options().prefix_cache.enabled},
          {"lookups", s.cache.lookups},
          {"hits", s.cache.hits},
          {"cached_tokens", s.cache.cached_tokens},
          {"prompt_tokens_computed", s.prompt_tokens},
          {"snapshots_taken", s.cache.snapshots_taken},
          {"evictions", s.cache.evictions},
          {"snapshots", s.cache.snapshots},
          {"snapshot_bytes", s.cache.snapshot_bytes},
          {"host_snapshots", s.cache.host_snapshots},
          {"host_bytes", s.cache.host_bytes},
          {"host_hits", s.cache.host_hits},
          {"device_tier_snapshots", s.cache.device_tier_snapshots},
          {"device_tier_bytes", s.cache.device_tier_bytes},
          {"device_tier_hits", s.cache.device_tier_hits}};
}

/// Speculative decoding's figures for --json (null when it is off): verify steps, drafts, the
/// acceptance rate (accepted / drafted) and the mean tokens a verified sequence emitted
/// (accepted + 1), the commit record's bytes per sequence.
nlohmann::json speculative_json(const runtime::Engine& engine) {
  const runtime::EngineOptions& o = engine.options();
  if (o.speculative.drafter == runtime::SpeculativeOptions::Drafter::kNone) return nullptr;
  const runtime::EngineStats s = engine.stats();
  const auto ratio = [](int64_t a, int64_t b) { return b > 0 ? double(a) / double(b) : 0.0; };
  using Drafter = runtime::SpeculativeOptions::Drafter;
  return {{"drafter", o.speculative.drafter == Drafter::kNgram ? "ngram"
                      : o.speculative.drafter == Drafter::kMtp ? "mtp"
                                                               : "draft model"},
          {"draft_tokens", o.speculative.draft_tokens},
          {"mode", o.speculative.mode == model::VerifyMode::kReplay ? "replay" : "states"},
          {"verify_steps", s.spec.steps},
          {"verified_sequences", s.spec.sequences},
          {"drafted", s.spec.draft_tokens},
          {"accepted", s.spec.accepted_tokens},
          {"acceptance_rate", ratio(s.spec.accepted_tokens, s.spec.draft_tokens)},
          {"mean_accepted_length", ratio(s.spec.emitted_tokens, s.spec.sequences)},
          {"record_bytes_per_sequence", ratio(s.spec.record_bytes, s.spec.record_sequences)}};
}

/// "; speculative: 120 of 200 drafts accepted, 2.4 tokens per verify" (empty when off or unused).
std::string speculative_line(const runtime::Engine& engine) {
  const runtime::EngineStats s = engine.stats();
  if (s.spec.sequences == 0) return {};
  char mean[32];
  std::snprintf(mean, sizeof mean, "%.2f",
                double(s.spec.emitted_tokens) / double(s.spec.sequences));
  return str_cat("; speculative: ", s.spec.accepted_tokens, " of ", s.spec.draft_tokens,
                 " drafts accepted, ", mean, " tokens per verified sequence");
}

/// "; prefix cache: 3 hits of 4 lookups, 420 tokens reused" (empty when it is off or unused).
std::string cache_line(const runtime::Engine& engine) {
  const runtime::EngineStats s = engine.stats();
  if (!engine.options().prefix_cache.enabled || s.cache.lookups == 0) return {};
  return str_cat("; prefix cache: ", s.cache.hits, " hits of ", s.cache.lookups, " lookups, ",
                 s.cache.cached_tokens, " tokens reused");
}

/// Times a run step by step: a step that ran prompt tokens is prefill time, one that ran only
/// decode tokens is decode time; tokens/s is decode tokens over decode time, the same in both
/// modes.
class RunTimer {
 public:
  explicit RunTimer(const runtime::Engine& engine) : engine_(engine), start_(Clock::now()) {}

  /// Runs one step and records it.
  std::vector<runtime::TokenEvent> step(runtime::Engine& engine) {
    const int64_t prompt_before = engine.stats().prompt_tokens;
    const auto step_start = Clock::now();
    std::vector<runtime::TokenEvent> events = engine.step();
    const double seconds = seconds_since(step_start);
    int64_t sampled = 0;
    for (const runtime::TokenEvent& e : events) sampled += e.token >= 0 ? 1 : 0;
    if (sampled > 0 && tokens_ == 0) first_token_s_ = seconds_since(start_);
    tokens_ += sampled;
    if (engine.stats().prompt_tokens > prompt_before) {
      prefill_s_ += seconds;
    } else {
      decode_s_ += seconds;
      decode_tokens_ += sampled;
    }
    return events;
  }

  double decode_tokens_per_s() const {
    return decode_s_ > 0 ? double(decode_tokens_) / decode_s_ : 0.0;
  }

  /// "12 tokens in 0.50 s (prompt: 16 tokens in 0.10 s, first token after 0.10 s; decode: 11
  /// tokens in 0.40 s): 27.5 tokens/s"
  std::string line() const {
    char text[320];
    std::snprintf(text, sizeof(text),
                  "%lld tokens in %.2f s (prompt: %lld tokens in %.2f s, first token after %.2f "
                  "s; decode: %lld tokens in %.2f s): %.1f tokens/s",
                  static_cast<long long>(tokens_), seconds_since(start_),
                  static_cast<long long>(engine_.stats().prompt_tokens), prefill_s_, first_token_s_,
                  static_cast<long long>(decode_tokens_), decode_s_, decode_tokens_per_s());
    return text;
  }

  nlohmann::json json() const {
    return {{"tokens", tokens_},
            {"prompt_tokens", engine_.stats().prompt_tokens},
            {"prefill_s", prefill_s_},
            {"first_token_s", first_token_s_},
            {"decode_tokens", decode_tokens_},
            {"decode_s", decode_s_},
            {"tokens_per_s", decode_tokens_per_s()}};
  }

 private:
  const runtime::Engine& engine_;
  Clock::time_point start_;
  double first_token_s_ = 0, prefill_s_ = 0, decode_s_ = 0;
  int64_t tokens_ = 0, decode_tokens_ = 0;
};

int run_ids(const GenerateOptions& options, const std::string& model_dir, Device device,
            std::FILE* out, std::FILE* err, std::FILE* in) {
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < options.prompt_ids.size(); ++i) {
    std::string text = options.prompt_ids[i];
    if (text == "-") {
      text = read_all(in);
      for (char& c : text)
        if (c == '\n' || c == '\r') c = ' ';
    }
    Result<std::vector<int32_t>> ids = parse_ids(text);
    if (!ids.ok()) return fail(err, str_cat("--prompt-ids #", i + 1, ": ", ids.status().message()));
    prompts.push_back(std::move(ids).value());
  }

  Result<std::unique_ptr<model::Model>> model = model::load_model(model_dir);
  if (!model.ok()) return fail(err, model.status().message());
  for (const std::string& warning : model.value()->config().warnings)
    std::fprintf(err, "hyla generate: warning: %s\n", warning.c_str());
  model = model_on(std::move(model).value(), weights_device(device, options.tensor_parallel));
  if (!model.ok()) return fail(err, model.status().message());
  model.value()->set_linear_backends(
      model::parse_linear_attn_backends(options.linear_attn).value());
  const runtime::SamplingParams params = sampling(options, /*text_mode=*/false);
  std::vector<int64_t> prompt_tokens;
  for (const std::vector<int32_t>& p : prompts) prompt_tokens.push_back(int64_t(p.size()));
  std::unique_ptr<model::Model> draft;  // --speculative draft:DIR
  Result<runtime::EngineOptions> engine_options_ = engine_options(
      options, model.value()->config(), device, prompt_tokens, params.max_new_tokens, err, &draft);
  if (!engine_options_.ok()) return fail(err, engine_options_.status().message());
  Result<std::unique_ptr<runtime::Engine>> engine =
      runtime::Engine::create(*model.value(), engine_options_.value());
  if (!engine.ok())
    return fail(err,
                str_cat(options.budget_mib ? str_cat("--budget-mib ", *options.budget_mib, ": ")
                                           : std::string(),
                        engine.status().message()));
  std::fprintf(err, "memory plan (%s): %s\n", plan_where(device, options.tensor_parallel).c_str(),
               engine.value()->plan().summary().c_str());

  // A refused or failed request is reported and the others go on.
  std::vector<std::string> errors(prompts.size());
  std::vector<runtime::FinishReason> finish(prompts.size(), runtime::FinishReason::kNone);
  std::vector<int64_t> cached(prompts.size(), 0);
  std::map<runtime::RequestId, size_t> index;
  size_t next = 0;  // the next prompt to add
  // Adds the prompts (with --sequential the next one only, once the engine is idle).
  const auto add_prompts = [&] {
    while (next < prompts.size() && (!options.sequential || engine.value()->idle())) {
      const size_t i = next++;
      Result<runtime::RequestId> id = engine.value()->add_request(prompts[i], params);
      if (!id.ok()) {
        errors[i] = id.status().message();
        finish[i] = runtime::FinishReason::kError;
        std::fprintf(err, "hyla generate: prompt %zu refused: %s\n", i + 1, errors[i].c_str());
        continue;
      }
      index[id.value()] = i;
    }
  };
  add_prompts();

  std::vector<std::vector<int32_t>> tokens(prompts.size());
  RunTimer timer(*engine.value());
  while (!engine.value()->idle() || next < prompts.size()) {
    add_prompts();
    for (const runtime::TokenEvent& e : timer.step(*engine.value())) {
      const size_t i = index.at(e.request);
      if (e.token >= 0) tokens[i].push_back(e.token);
      cached[i] = e.cached_tokens;
      if (e.finished) finish[i] = e.reason;
      if (e.reason == runtime::FinishReason::kError) {
        errors[i] = e.error;
        std::fprintf(err, "hyla generate: prompt %zu failed: %s\n", i + 1, e.error.c_str());
      }
    }
  }

  if (options.json) {
    nlohmann::json requests = nlohmann::json::array();
    for (size_t i = 0; i < prompts.size(); ++i) {
      nlohmann::json r = {{"prompt", prompts[i]},
                          {"tokens", tokens[i]},
                          {"finish", runtime::finish_reason_name(finish[i])},
                          {"cached_tokens", cached[i]}};
      if (!errors[i].empty()) r["error"] = errors[i];
      requests.push_back(r);
    }
    nlohmann::json doc = timer.json();
    doc["requests"] = requests;
    doc["prefix_cache"] = cache_json(*engine.value());
    doc["speculative"] = speculative_json(*engine.value());
    std::fprintf(out, "%s\n", doc.dump().c_str());
  } else {
    for (size_t i = 0; i < prompts.size(); ++i) {
      std::string line;
      for (size_t t = 0; t < tokens[i].size(); ++t) line += str_cat(t > 0 ? " " : "", tokens[i][t]);
      std::fprintf(out, "%s\n", line.c_str());  // an empty line for a refused prompt
    }
  }
  std::fflush(out);
  std::map<std::string, int64_t> finishes;
  for (runtime::FinishReason reason : finish) ++finishes[runtime::finish_reason_name(reason)];
  std::string stopped;
  for (const auto& [name, count] : finishes)
    stopped += str_cat(stopped.empty() ? "" : ", ", name, " x", count);
  std::fprintf(err, "%s; %lld steps; stopped by %s%s%s\n", timer.line().c_str(),
               static_cast<long long>(engine.value()->stats().steps), stopped.c_str(),
               cache_line(*engine.value()).c_str(), speculative_line(*engine.value()).c_str());
  const size_t failed = size_t(
      std::count_if(errors.begin(), errors.end(), [](const std::string& e) { return !e.empty(); }));
  if (failed > 0) {
    std::fprintf(err, "hyla generate: %zu of %zu prompts failed (see above)\n", failed,
                 prompts.size());
    return 1;
  }
  return 0;
}

#ifdef HYLA_WITH_PCRE2
}  // namespace

void add_config_eos_ids(const std::string& model_dir, std::set<int64_t>& ids) {
  Result<nlohmann::json> config = model::read_json_file(model_dir + "/config.json");
  if (config.ok() && config->is_object() && config->contains("eos_token_id")) {
    const nlohmann::json& eos = (*config)["eos_token_id"];
    if (eos.is_number_integer()) ids.insert(eos.get<int64_t>());
    if (eos.is_array())
      for (const nlohmann::json& e : eos)
        if (e.is_number_integer()) ids.insert(e.get<int64_t>());
  }
}

namespace {

/// Token ids that end a text generation: the tokenizer's <|endoftext|> and config.json's
/// eos_token_id (a number or a list), those inside the model's vocabulary.
std::vector<int32_t> stop_tokens(const serve::Tokenizer& tokenizer, const std::string& model_dir,
                                 int64_t vocab_size) {
  std::set<int64_t> ids;
  if (const std::optional<int32_t> id = tokenizer.token_id("<|endoftext|>")) ids.insert(*id);
  add_config_eos_ids(model_dir, ids);
  std::vector<int32_t> out;
  for (int64_t id : ids)
    if (id >= 0 && id < vocab_size) out.push_back(int32_t(id));
  return out;
}

int run_text(const GenerateOptions& options, const std::string& model_dir, Device device,
             std::FILE* out, std::FILE* err, std::FILE* in) {
  const std::string prompt_text = options.prompt_text == "-" ? read_all(in) : options.prompt_text;
  if (prompt_text.empty()) return fail(err, "the prompt read from stdin is empty");
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
  if (!tokenizer.ok()) return fail_after_progress(err, tokenizer.status().message());
  std::fprintf(err, ", weights");
  std::fflush(err);
  Result<std::unique_ptr<model::Model>> model = model::load_model(model_dir);
  if (!model.ok()) return fail_after_progress(err, model.status().message());
  model = model_on(std::move(model).value(), weights_device(device, options.tensor_parallel));
  if (!model.ok()) return fail_after_progress(err, model.status().message());
  model.value()->set_linear_backends(
      model::parse_linear_attn_backends(options.linear_attn).value());
  const model::ModelConfig& config = model.value()->config();
  std::fprintf(err, " (%s, %lld layers) on %s%s", config.model_type.c_str(),
               static_cast<long long>(config.num_layers), device_name(device).c_str(),
               options.tensor_parallel > 1
                   ? str_cat(", ", options.tensor_parallel, " tensor-parallel ranks").c_str()
                   : "");
  for (const std::string& warning : config.warnings)
    std::fprintf(err, "\nhyla generate: warning: %s", warning.c_str());
  if (tokenizer->vocab_size() > config.vocab_size)
    return fail_after_progress(
        err, str_cat("the tokenizer has ", tokenizer->vocab_size(),
                     " tokens, more than the model's vocabulary of ", config.vocab_size));
  Result<std::vector<int32_t>> encoded = tokenizer->try_encode(prompt_text);
  if (!encoded.ok()) return fail_after_progress(err, encoded.status().message());
  const std::vector<int32_t> prompt = std::move(encoded).value();
  if (prompt.empty()) return fail_after_progress(err, "the prompt is empty");
  runtime::SamplingParams params = sampling(options, /*text_mode=*/true);
  if (!options.ignore_eos)
    params.stop_token_ids = stop_tokens(*tokenizer, model_dir, config.vocab_size);
  std::fprintf(err, ", engine");
  std::fflush(err);
  std::unique_ptr<model::Model> draft;  // --speculative draft:DIR
  Result<runtime::EngineOptions> engine_options_ = engine_options(
      options, config, device, {int64_t(prompt.size())}, params.max_new_tokens, err, &draft);
  if (!engine_options_.ok()) return fail_after_progress(err, engine_options_.status().message());
  Result<std::unique_ptr<runtime::Engine>> engine =
      runtime::Engine::create(*model.value(), engine_options_.value());
  if (!engine.ok())
    return fail_after_progress(
        err, str_cat(options.budget_mib ? str_cat("--budget-mib ", *options.budget_mib, ": ")
                                        : std::string(),
                     engine.status().message()));
  std::fprintf(err, ": ready in %.2f s\n", seconds_since(load_start));

  Result<runtime::RequestId> id = engine.value()->add_request(prompt, params);
  if (!id.ok()) return fail(err, id.status().message());

  if (!options.json) {
    std::fputs(prompt_text.c_str(), out);
    std::fflush(out);
  }
  serve::StreamingDecoder decoder(*tokenizer);
  std::vector<int32_t> tokens;
  std::string text, error;
  runtime::FinishReason reason = runtime::FinishReason::kNone;
  RunTimer timer(*engine.value());
  while (!engine.value()->idle()) {
    for (const runtime::TokenEvent& e : timer.step(*engine.value())) {
      if (e.reason == runtime::FinishReason::kError) error = e.error;
      if (e.finished) reason = e.reason;
      if (e.token < 0) continue;
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
  if (options.json) {
    nlohmann::json doc = timer.json();
    doc["prompt"] = prompt_text;
    doc["prompt_ids"] = prompt;
    doc["tokens"] = tokens;
    doc["text"] = text;
    doc["finish"] = runtime::finish_reason_name(reason);
    doc["speculative"] = speculative_json(*engine.value());
    if (!error.empty()) doc["error"] = error;
    std::fprintf(out, "%s\n",
                 doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fprintf(out, "%s\n", rest.c_str());
  }
  std::fflush(out);  // the text ends before the speed line on a shared terminal
  std::fprintf(err, "%s; stopped by %s%s\n", timer.line().c_str(),
               runtime::finish_reason_name(reason), speculative_line(*engine.value()).c_str());
  if (!error.empty()) return fail(err, str_cat("the generation failed: ", error));
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

Status validate(const GenerateOptions& o) {
  constexpr int64_t kMaxNewTokens = int64_t{1} << 24, kMaxBudgetMib = int64_t{1} << 30;
  if (o.max_new_tokens && (*o.max_new_tokens < 1 || *o.max_new_tokens > kMaxNewTokens))
    return invalid_argument("--max-new-tokens is ", *o.max_new_tokens,
                            ", expected an integer in [1, ", kMaxNewTokens, "]");
  if (o.temperature && !(*o.temperature >= 0.0f && *o.temperature <= 100.0f))
    return invalid_argument("--temperature is ", *o.temperature, ", expected a number in [0, 100]");
  if (o.top_k < 0 || o.top_k > INT32_MAX)
    return invalid_argument("--top-k is ", o.top_k, ", expected an integer in [0, ", INT32_MAX,
                            "] (0 = off)");
  if (o.top_p && !(*o.top_p > 0.0f && *o.top_p <= 1.0f))
    return invalid_argument("--top-p is ", *o.top_p, ", expected a number in (0, 1] (1 = off)");
  if (o.budget_mib && (*o.budget_mib < 1 || *o.budget_mib > kMaxBudgetMib))
    return invalid_argument("--budget-mib is ", *o.budget_mib, ", expected an integer in [1, ",
                            kMaxBudgetMib, "]");
  if (o.seed < 0)
    return invalid_argument("--seed is ", o.seed, ", expected an integer in [0, ", INT64_MAX, "]");
  if (std::find(std::begin(kDeviceNames), std::end(kDeviceNames), o.device) ==
      std::end(kDeviceNames))
    return invalid_argument("--device is '", o.device, "', expected cpu, cuda or auto");
  if (o.prefix_cache_host_mib < 0 || o.prefix_cache_host_mib > kMaxBudgetMib)
    return invalid_argument("--prefix-cache-host-mib is ", o.prefix_cache_host_mib,
                            ", expected an integer in [0, ", kMaxBudgetMib, "]");
  if (o.prefix_cache_device_mib < 0 || o.prefix_cache_device_mib > kMaxBudgetMib)
    return invalid_argument("--prefix-cache-device-mib is ", o.prefix_cache_device_mib,
                            ", expected an integer in [0, ", kMaxBudgetMib, "]");
  if (o.prefix_cache != "on" && o.prefix_cache != "off")
    return invalid_argument("--prefix-cache is '", o.prefix_cache, "', expected on or off");
  HYLA_RETURN_IF_ERROR(parse_speculative_flag(o.speculative).status());
  if (o.draft_tokens < 1 || o.draft_tokens > runtime::kMaxDraftTokens)
    return invalid_argument("--draft-tokens is ", o.draft_tokens, ", expected an integer in [1, ",
                            runtime::kMaxDraftTokens, "]");
  if (o.spec_mode != "replay" && o.spec_mode != "states")
    return invalid_argument("--spec-mode is '", o.spec_mode, "', expected replay or states");
  if (o.prefix_cache_int8 != "on" && o.prefix_cache_int8 != "off")
    return invalid_argument("--prefix-cache-int8 is '", o.prefix_cache_int8,
                            "', expected on or off");
  if (o.prefix_cache_device_mib > 0 && o.prefix_cache_int8 != "on")
    return invalid_argument(
        "--prefix-cache-device-mib holds int8 snapshots only: add "
        "--prefix-cache-int8 on");
  HYLA_RETURN_IF_ERROR(check_tensor_parallel(o.tensor_parallel));
  if (std::count(o.prompt_ids.begin(), o.prompt_ids.end(), "-") > 1)
    return invalid_argument("--prompt-ids -: stdin holds one prompt, given more than once");
  return model::parse_linear_attn_backends(o.linear_attn).status();
}

namespace {

int generate(const GenerateOptions& options, std::FILE* out, std::FILE* err, std::FILE* in) {
  if (const Status s = validate(options); !s.ok()) {
    std::fprintf(err, "hyla generate: %s\n", s.message().c_str());
    return 2;
  }
  const bool ids_mode = !options.prompt_ids.empty();
  if (ids_mode && !options.prompt_text.empty())
    return fail(err, "give either a prompt text or --prompt-ids, not both");
  if (!ids_mode && options.prompt_text.empty())
    return fail(err,
                "no prompt: give a text (hyla generate \"Once upon a time\", or - to read it from "
                "stdin) or --prompt-ids");
  const bool is_default = options.model_dir.empty();
  const std::string model_dir = is_default ? default_model_dir() : options.model_dir;
  if (const Status s = check_model_dir(model_dir, is_default); !s.ok())
    return fail(err, s.message());
  const Result<Device> device = resolve_device(options.device);
  if (!device.ok()) return fail(err, device.status().message());
  if (ids_mode) return run_ids(options, model_dir, device.value(), out, err, in);
#ifdef HYLA_WITH_PCRE2
  return run_text(options, model_dir, device.value(), out, err, in);
#else
  return fail(err,
              "this hyla was built without the tokenizer (CMake found no PCRE2 + ICU: install "
              "libpcre2-dev and libicu-dev, e.g. with tools/install_deps.sh, and rebuild), so it "
              "cannot take a text prompt; --prompt-ids still works");
#endif
}

}  // namespace

int run_generate(const GenerateOptions& options, std::FILE* out, std::FILE* err, std::FILE* in) {
  // Errors travel as Status; this net turns anything still thrown below (the standard library,
  // an allocation) into a message instead of a terminate.
  try {
    return generate(options, out, err, in);
  } catch (const std::bad_alloc&) {
    return fail(err, "out of memory");
  } catch (const std::exception& e) {
    return fail(err, e.what());
  }
}

}  // namespace hyla::cli
