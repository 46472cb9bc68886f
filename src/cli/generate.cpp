// `hyla generate` (see generate.h): load_model -> Engine::create (memory plan to stderr) -> one
// request per prompt -> step until idle -> one line of ids per prompt, or one JSON object.
#include "cli/generate.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>

#include "core/error.h"
#include "model/architecture.h"
#include "runtime/engine.h"

namespace hyla::cli {

namespace {

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

}  // namespace

int run_generate(const GenerateOptions& options, std::FILE* out, std::FILE* err) {
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < options.prompt_ids.size(); ++i) {
    Result<std::vector<int32_t>> ids = parse_ids(options.prompt_ids[i]);
    if (!ids.ok()) {
      std::fprintf(err, "hyla generate: --prompt-ids #%zu: %s\n", i + 1,
                   ids.status().message().c_str());
      return 1;
    }
    prompts.push_back(std::move(ids).value());
  }
  if (prompts.empty()) {
    std::fprintf(err, "hyla generate: no prompt (give --prompt-ids at least once)\n");
    return 1;
  }

  Result<std::unique_ptr<model::Model>> model = model::load_model(options.model_dir);
  if (!model.ok()) {
    std::fprintf(err, "hyla generate: %s\n", model.status().message().c_str());
    return 1;
  }
  for (const std::string& warning : model.value()->config().warnings)
    std::fprintf(err, "hyla generate: warning: %s\n", warning.c_str());
  runtime::EngineOptions engine_options;
  engine_options.memory_budget_bytes = options.budget_mib << 20;
  Result<std::unique_ptr<runtime::Engine>> engine =
      runtime::Engine::create(*model.value(), engine_options);
  if (!engine.ok()) {
    std::fprintf(err, "hyla generate: %s\n", engine.status().message().c_str());
    return 1;
  }
  std::fprintf(err, "memory plan: %s\n", engine.value()->plan().summary().c_str());

  runtime::SamplingParams params;
  params.max_new_tokens = options.max_new_tokens;
  params.temperature = options.temperature;
  params.top_k = options.top_k;
  params.top_p = options.top_p;
  params.seed = options.seed;
  std::map<runtime::RequestId, size_t> index;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Result<runtime::RequestId> id = engine.value()->add_request(prompts[i], params);
    if (!id.ok()) {
      std::fprintf(err, "hyla generate: prompt %zu: %s\n", i + 1, id.status().message().c_str());
      return 1;
    }
    index[id.value()] = i;
  }

  std::vector<std::vector<int32_t>> tokens(prompts.size());
  const auto start = std::chrono::steady_clock::now();
  while (!engine.value()->idle()) {
    for (const runtime::TokenEvent& e : engine.value()->step()) {
      if (e.reason == runtime::FinishReason::kError) {
        std::fprintf(err, "hyla generate: prompt %zu failed: %s\n", index.at(e.request) + 1,
                     e.error.c_str());
        return 1;
      }
      if (e.token >= 0) tokens[index.at(e.request)].push_back(e.token);
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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

}  // namespace hyla::cli
