// `hyla bench --workload speculative` (see bench_spec.h).
#include "cli/bench_spec.h"

#include <chrono>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "core/op_times.h"
#include "runtime/engine.h"

namespace hyla::cli {

namespace {

using Clock = std::chrono::steady_clock;
using Tokens = std::vector<int32_t>;

constexpr uint32_t kSeed = 11;
constexpr int64_t kPatternTokens = 32, kRepeats = 8, kDraftTokens = 4;

struct Setup {
  const char* name;
  bool speculate;
  model::VerifyMode mode;
  bool adaptive = true;
  /// Each request predicts its output (SamplingParams::predicted_tokens): the plain row's, so
  /// every draft stands (OpenAI's predicted outputs; the verify step's best case).
  bool predicted = false;
};

constexpr Setup kSetups[] = {
    {"off", false, model::VerifyMode::kReplay},
    {"ngram, replay", true, model::VerifyMode::kReplay},
    {"ngram, replay, fixed K", true, model::VerifyMode::kReplay, false},
    {"ngram, step states", true, model::VerifyMode::kStepStates},
    {"predicted output, step states", true, model::VerifyMode::kStepStates, true, true},
};

struct Figures {
  int64_t decode_tokens = 0;
  double decode_seconds = 0;
  runtime::EngineStats stats;
  std::vector<Tokens> outputs;  ///< per request, in order
};

/// B prompts of `kind`: repetitive (a random stretch repeated) or random ids.
std::vector<Tokens> prompts(const std::string& kind, int64_t B, int64_t vocab) {
  std::mt19937 rng(kSeed);
  std::uniform_int_distribution<int32_t> id(0, int32_t(vocab - 1));
  std::vector<Tokens> out;
  for (int64_t b = 0; b < B; ++b) {
    Tokens p;
    if (kind == "repetitive") {
      Tokens pattern(static_cast<size_t>(kPatternTokens));
      for (int32_t& t : pattern) t = id(rng);
      for (int64_t r = 0; r < kRepeats; ++r) p.insert(p.end(), pattern.begin(), pattern.end());
    } else {
      p.resize(size_t(kPatternTokens * kRepeats));
      for (int32_t& t : p) t = id(rng);
    }
    out.push_back(std::move(p));
  }
  return out;
}

Result<Figures> run(const model::Model& model, Device device, const BenchOptions& o,
                    const Setup& setup, const std::vector<Tokens>& batch,
                    const std::vector<Tokens>& predictions, OpTimes* times = nullptr) {
  runtime::EngineOptions options;
  options.device = device;
  options.max_batch_tokens = o.step_tokens;
  options.allow_long_context = true;
  options.max_running = int64_t(batch.size());
  if (setup.speculate) {
    options.speculative.drafter = runtime::SpeculativeOptions::Drafter::kNgram;
    options.speculative.draft_tokens = kDraftTokens;
    options.speculative.mode = setup.mode;
    options.speculative.adaptive = setup.adaptive;
  }
  std::vector<int64_t> tokens(batch.size(),
                              int64_t(batch.front().size()) + o.new_tokens + kDraftTokens);
  HYLA_ASSIGN_OR_RETURN(const runtime::MemorySizing sizing,
                        runtime::size_engine_memory(model.config(), options, tokens));
  options.memory_budget_bytes = sizing.budget_bytes;
  options.state_ratio = sizing.state_ratio;
  HYLA_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Engine> engine,
                        runtime::Engine::create(model, options));
  runtime::SamplingParams params;
  params.max_new_tokens = o.new_tokens;
  for (size_t b = 0; b < batch.size(); ++b) {
    if (setup.predicted && b < predictions.size()) params.predicted_tokens = predictions[b];
    HYLA_RETURN_IF_ERROR(engine->add_request(batch[b], params).status());
  }
  Figures f;
  f.outputs.resize(batch.size());
  std::vector<int64_t> seen(batch.size(), 0);
  std::optional<Clock::time_point> first;
  const OpTimes::Activate profiling(times);
  while (!engine->idle()) {
    for (const runtime::TokenEvent& e : engine->step()) {
      if (e.reason == runtime::FinishReason::kError) return internal_error(e.error);
      if (e.token < 0) continue;
      f.outputs[size_t(e.request)].push_back(e.token);
      if (!first) first = Clock::now();
      if (seen[size_t(e.request)]++ > 0) ++f.decode_tokens;
    }
  }
  f.decode_seconds = std::chrono::duration<double>(Clock::now() - *first).count();
  f.stats = engine->stats();
  if (times) times->collect();
  return f;
}

}  // namespace

Status run_speculative_workload(const model::Model& model, Device device,
                                const BenchOptions& options,
                                const std::optional<std::string>& commit, std::FILE* out,
                                nlohmann::json& results) {
  std::fprintf(out,
               "speculative workload: greedy, %lld new tokens, %lld drafts per step, prompts of "
               "%lld tokens\n\n| prompts | B | speculation | decode tok/s | speed-up | accepted "
               "| tokens per verify | commit bytes per sequence |\n|---|---:|---|---:|---:|---:|"
               "---:|---:|\n",
               static_cast<long long>(options.new_tokens), static_cast<long long>(kDraftTokens),
               static_cast<long long>(kPatternTokens * kRepeats));
  std::fflush(out);
  for (const std::string kind : {"repetitive", "random"}) {
    for (const int64_t B : options.batch) {
      const std::vector<Tokens> batch = prompts(kind, B, model.config().vocab_size);
      double base = 0;
      std::vector<Tokens> plain;  // the plain row's outputs: the predicted row's predictions
      for (const Setup& setup : kSetups) {
        HYLA_ASSIGN_OR_RETURN(const Figures f, run(model, device, options, setup, batch, plain));
        if (!setup.speculate) plain = f.outputs;
        const runtime::EngineStats& s = f.stats;
        const double tps = double(f.decode_tokens) / f.decode_seconds;
        if (!setup.speculate) base = tps;
        const double rate = s.spec.draft_tokens > 0
                                ? double(s.spec.accepted_tokens) / double(s.spec.draft_tokens)
                                : 0;
        const double per_verify =
            s.spec.sequences > 0 ? double(s.spec.emitted_tokens) / double(s.spec.sequences) : 0;
        const double record = s.spec.record_sequences > 0
                                  ? double(s.spec.record_bytes) / double(s.spec.record_sequences)
                                  : 0;
        std::fprintf(out, "| %s | %lld | %s | %.1f | %.2f | %.3f | %.2f | %.0f |\n", kind.c_str(),
                     static_cast<long long>(B), setup.name, tps, tps / base, rate, per_verify,
                     record);
        std::fflush(out);
        nlohmann::json row = {{"name", "speculative_" + kind},
                              {"device", device_name(device)},
                              {"batch", B},
                              {"speculation", setup.name},
                              {"decode_tokens_per_s", tps},
                              {"speedup", tps / base},
                              {"acceptance_rate", rate},
                              {"tokens_per_verify", per_verify},
                              {"commit_bytes_per_sequence", record}};
        if (commit) row["commit"] = *commit;
        results.push_back(row);
      }
    }
  }
  if (!options.profile) return ok_status();
  // --profile: where a token's time goes, per op (CUDA graphs off in every row, as profiling
  // needs), for the repetitive prompts at the first --batch.
  const std::vector<Tokens> batch =
      prompts("repetitive", options.batch.front(), model.config().vocab_size);
  std::vector<OpTimes> times(std::size(kSetups));
  std::vector<int64_t> tokens(std::size(kSetups));
  std::vector<Tokens> plain;
  for (size_t i = 0; i < std::size(kSetups); ++i) {
    HYLA_ASSIGN_OR_RETURN(const Figures f,
                          run(model, device, options, kSetups[i], batch, plain, &times[i]));
    if (!kSetups[i].speculate) plain = f.outputs;
    tokens[i] = f.stats.tokens_generated;
  }
  std::fprintf(out,
               "\nprofile (repetitive, B %lld): microseconds per generated token, by op\n\n| op |",
               static_cast<long long>(options.batch.front()));
  for (const Setup& s : kSetups) std::fprintf(out, " %s us | calls |", s.name);
  std::fprintf(out, "\n|---|");
  for (size_t i = 0; i < std::size(kSetups); ++i) std::fprintf(out, "---:|---:|");
  std::fprintf(out, "\n");
  std::map<std::string, bool> names;
  for (const OpTimes& t : times)
    for (const auto& [name, entry] : t.entries()) names[name] = true;
  for (const auto& [name, unused] : names) {
    std::fprintf(out, "| %s |", name.c_str());
    for (size_t i = 0; i < times.size(); ++i) {
      const auto it = times[i].entries().find(name);
      const OpTimes::Entry e = it == times[i].entries().end() ? OpTimes::Entry{} : it->second;
      std::fprintf(out, " %.1f | %lld |", 1e6 * e.seconds / double(std::max<int64_t>(tokens[i], 1)),
                   static_cast<long long>(e.calls));
    }
    std::fprintf(out, "\n");
  }
  return ok_status();
}

}  // namespace hyla::cli
