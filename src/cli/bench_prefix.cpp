// `hyla bench --workload prefix` (see bench_prefix.h).
#include "cli/bench_prefix.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "runtime/engine.h"
#include "runtime/engine_sizing.h"

namespace hyla::cli {

namespace {

using Clock = std::chrono::steady_clock;
using Tokens = std::vector<int32_t>;

constexpr uint32_t kWorkloadSeed = 7;
constexpr int64_t kSystemTokens = 1024, kConversations = 8, kTurns = 4, kUserTokens = 96;
constexpr int64_t kDocuments = 4, kDocumentTokens = 2048, kQuestions = 3, kQuestionTokens = 64;

/// One run's cache settings.
struct Setup {
  const char* name;  ///< the table's label; the JSON row is prefix_workload_<json>
  const char* json;
  bool cache;
  /// A state pool for the running wave and a few snapshots only (the KV pool stays the size of
  /// the others'), so that snapshots must leave the pool.
  bool tight;
  /// Snapshots that leave the pool go to an int8 device tier, sized at a quarter of the bytes the
  /// pool lost (about as many int8 entries as the slots it had).
  bool int8_tier;
};

constexpr Setup kSetups[] = {
    {"off", "cache_off", false, false, false},
    {"on", "cache_on", true, false, false},
    {"on, tight pool", "cache_tight", true, true, false},
    {"on, tight pool + int8 device tier", "cache_tight_int8", true, true, true},
};

/// Spare slots of a tight pool beyond the running wave's.
constexpr int64_t kTightSpareSlots = 2;

struct Figures {
  int64_t requests = 0, prompt_tokens = 0, reused = 0, computed = 0;
  int64_t state_bytes = 0;   ///< the state pool's and the device tier's
  std::vector<double> ttft;  ///< seconds, per request
  double seconds = 0;
};

class Workload {
 public:
  Workload(const model::Model& model, runtime::Engine& engine, int64_t reply_tokens)
      : engine_(engine), rng_(kWorkloadSeed), id_(0, int32_t(model.config().vocab_size - 1)) {
    params_.max_new_tokens = reply_tokens;  // greedy, no stop token: every reply is this long
  }

  Tokens random(int64_t n) {
    Tokens t(static_cast<size_t>(n));
    for (int32_t& x : t) x = id_(rng_);
    return t;
  }

  /// Runs the prompts as one wave (all arriving now) to completion; returns each one's tokens.
  Result<std::vector<Tokens>> wave(const std::vector<Tokens>& prompts, Figures& f) {
    const Clock::time_point arrival = Clock::now();
    std::map<runtime::RequestId, size_t> index;
    for (size_t i = 0; i < prompts.size(); ++i) {
      HYLA_ASSIGN_OR_RETURN(const runtime::RequestId id, engine_.add_request(prompts[i], params_));
      index[id] = i;
      f.prompt_tokens += int64_t(prompts[i].size());
    }
    std::vector<Tokens> out(prompts.size());
    while (!engine_.idle()) {
      for (const runtime::TokenEvent& e : engine_.step()) {
        if (e.reason == runtime::FinishReason::kError) return internal_error(e.error);
        Tokens& tokens = out[index.at(e.request)];
        if (e.token < 0) continue;
        if (tokens.empty()) {
          f.ttft.push_back(std::chrono::duration<double>(Clock::now() - arrival).count());
          f.reused += e.cached_tokens;
        }
        tokens.push_back(e.token);
      }
    }
    f.requests += int64_t(prompts.size());
    return out;
  }

 private:
  runtime::Engine& engine_;
  runtime::SamplingParams params_;
  std::mt19937 rng_;
  std::uniform_int_distribution<int32_t> id_;
};

Result<Figures> run_workload(const model::Model& model, Device device, const BenchOptions& o,
                             const Setup& setup) {
  runtime::EngineOptions options;
  options.device = device;
  options.max_batch_tokens = o.step_tokens;
  options.allow_long_context = true;  // random ids: the model's context limit says nothing here
  options.prefix_cache.enabled = setup.cache;
  // At most a wave runs at once (the largest is the conversations'), each request with room for
  // the snapshots the cache keeps of it (runtime::size_engine).
  const int64_t longest_chat = kSystemTokens + kTurns * (kUserTokens + o.new_tokens);
  std::vector<int64_t> tokens(size_t(kConversations), longest_chat);
  for (int64_t d = 0; d < kDocuments; ++d)
    tokens.push_back(kDocumentTokens + kQuestionTokens + o.new_tokens);
  options.max_running = kConversations;
  HYLA_ASSIGN_OR_RETURN(const runtime::EngineSizing sizing,
                        runtime::size_engine(model.config(), options, tokens));
  options.max_running = sizing.max_running;
  options.memory_budget_bytes = sizing.budget_bytes;
  options.state_ratio = sizing.state_ratio;
  if (setup.tight) {
    // The same KV bytes; state for the wave and a few spare slots (a quarter slot of slack, as
    // size_memory leaves).
    HYLA_ASSIGN_OR_RETURN(
        const runtime::MemoryPlan full,
        runtime::plan_memory(model.config(), sizing.budget_bytes, sizing.state_ratio,
                             runtime::memory_plan_options(options)));
    const int64_t slots = kConversations + kTightSpareSlots;
    const int64_t state = slots * full.bytes_per_slot + full.bytes_per_slot / 4;
    options.memory_budget_bytes = full.scratch_bytes + state + full.kv_bytes();
    options.state_ratio = double(state) / double(full.kv_bytes());
    if (setup.int8_tier) {
      options.prefix_cache.int8_snapshots = true;
      options.prefix_cache.device_tier_bytes = (full.state_slots - slots) * full.bytes_per_slot / 4;
    }
  }
  HYLA_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Engine> engine,
                        runtime::Engine::create(model, options));
  Workload w(model, *engine, o.new_tokens);
  Figures f;
  const Clock::time_point start = Clock::now();

  const Tokens system = w.random(kSystemTokens);
  std::vector<Tokens> history(size_t(kConversations), system);
  for (int64_t turn = 0; turn < kTurns; ++turn) {
    std::vector<Tokens> prompts;
    for (Tokens& h : history) {
      const Tokens user = w.random(kUserTokens);
      h.insert(h.end(), user.begin(), user.end());
      prompts.push_back(h);
    }
    HYLA_ASSIGN_OR_RETURN(const std::vector<Tokens> replies, w.wave(prompts, f));
    for (size_t c = 0; c < history.size(); ++c)
      history[c].insert(history[c].end(), replies[c].begin(), replies[c].end());
  }
  std::vector<Tokens> documents;
  for (int64_t d = 0; d < kDocuments; ++d) documents.push_back(w.random(kDocumentTokens));
  for (int64_t q = 0; q < kQuestions; ++q) {
    std::vector<Tokens> prompts;
    for (const Tokens& d : documents) {
      Tokens p = d;
      const Tokens question = w.random(kQuestionTokens);
      p.insert(p.end(), question.begin(), question.end());
      prompts.push_back(p);
    }
    HYLA_RETURN_IF_ERROR(w.wave(prompts, f).status());
  }
  f.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  f.computed = engine->stats().prompt_tokens;
  f.state_bytes = engine->plan().state_bytes() + options.prefix_cache.device_tier_bytes;
  return f;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

Status run_prefix_workload(const model::Model& model, Device device, const BenchOptions& options,
                           const std::optional<std::string>& commit, std::FILE* out,
                           nlohmann::json& results) {
  std::fprintf(out,
               "prefix workload: %lld conversations x %lld turns on a %lld-token system prompt "
               "(%lld-token user turns, %lld-token replies), %lld documents of %lld tokens x %lld "
               "questions\n\n",
               static_cast<long long>(kConversations), static_cast<long long>(kTurns),
               static_cast<long long>(kSystemTokens), static_cast<long long>(kUserTokens),
               static_cast<long long>(options.new_tokens), static_cast<long long>(kDocuments),
               static_cast<long long>(kDocumentTokens), static_cast<long long>(kQuestions));
  std::fprintf(out,
               "| cache | device | state MiB | requests | prompt tokens | reused | computed | hit "
               "rate | TTFT mean ms | TTFT p50 ms | TTFT p90 ms | seconds |\n");
  std::fprintf(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::fflush(out);
  for (const Setup& setup : kSetups) {
    HYLA_ASSIGN_OR_RETURN(const Figures f, run_workload(model, device, options, setup));
    double mean = 0;
    for (double t : f.ttft) mean += t;
    mean /= double(std::max<size_t>(f.ttft.size(), 1));
    const double hit_rate = f.prompt_tokens > 0 ? double(f.reused) / double(f.prompt_tokens) : 0;
    std::fprintf(
        out, "| %s | %s | %.1f | %lld | %lld | %lld | %lld | %.3f | %.1f | %.1f | %.1f | %.3f |\n",
        setup.name, device_name(device).c_str(), double(f.state_bytes) / double(1 << 20),
        static_cast<long long>(f.requests), static_cast<long long>(f.prompt_tokens),
        static_cast<long long>(f.reused), static_cast<long long>(f.computed), hit_rate, 1e3 * mean,
        1e3 * percentile(f.ttft, 0.5), 1e3 * percentile(f.ttft, 0.9), f.seconds);
    std::fflush(out);
    nlohmann::json row = {{"name", std::string("prefix_workload_") + setup.json},
                          {"device", device_name(device)},
                          {"state_bytes", f.state_bytes},
                          {"requests", f.requests},
                          {"prompt_tokens", f.prompt_tokens},
                          {"reused_tokens", f.reused},
                          {"computed_tokens", f.computed},
                          {"hit_rate", hit_rate},
                          {"ttft_mean_ms", 1e3 * mean},
                          {"ttft_p50_ms", 1e3 * percentile(f.ttft, 0.5)},
                          {"ttft_p90_ms", 1e3 * percentile(f.ttft, 0.9)},
                          {"seconds", f.seconds}};
    if (commit) row["commit"] = *commit;
    results.push_back(row);
  }
  return ok_status();
}

}  // namespace hyla::cli
