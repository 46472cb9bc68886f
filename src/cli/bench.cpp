// `hyla bench` (see bench.h): load -> Model::to(--device) -> one warm-up run -> each case on a
// fresh engine sized for its requests -> the markdown table, then the JSON file.
#include "cli/bench.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>

#include "cli/bench_prefix.h"
#include "cli/bench_spec.h"
#include "cli/device.h"
#include "cli/generate.h"
#include "core/op_times.h"
#include "model/architecture.h"
#include "model/layer_times.h"
#include "runtime/engine.h"

namespace hyla::cli {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kPromptSeed = 42;  ///< the random prompt ids: the same in every run

struct Case {
  std::string name;
  std::vector<int64_t> prompts;  ///< prompt tokens of each request
  int64_t new_tokens = 0;
  int64_t step_tokens = 0;  ///< EngineOptions::max_batch_tokens
  bool prefill = false;     ///< measures the prompt steps (else the decode-only steps)
};

struct Measured {
  int64_t tokens = 0;
  double seconds = 0;
  int64_t steps = 0;                          ///< steps counted in tokens / seconds
  model::LayerTimes layers;                   ///< with --profile: those steps' time by layer kind
  std::map<std::string, OpTimes::Entry> ops;  ///< with --profile: those steps' time by op
  double tokens_per_s() const { return seconds > 0 ? double(tokens) / seconds : 0.0; }
};

int fail(std::FILE* err, const std::string& message) {
  std::fprintf(err, "hyla bench: %s\n", message.c_str());
  return 1;
}

struct ProfiledCase {
  std::string name;
  double step_ms = 0;  ///< the profiled step's time (every layer boundary synchronised)
  nlohmann::json ops;  ///< op -> {ms_per_step, calls_per_step}
};

/// The ops' device time per counted step, one column per case, ops by their largest share of a
/// step; the last rows: the ops' sum and what the step spent beyond it (host work, launch gaps,
/// the per-layer waits of --profile).
void print_op_table(std::FILE* out, const std::vector<ProfiledCase>& cases) {
  std::map<std::string, double> top_share;
  for (const ProfiledCase& c : cases)
    for (const auto& [op, e] : c.ops.items())
      top_share[op] = std::max(top_share[op], e["ms_per_step"].get<double>() / c.step_ms);
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [op, share] : top_share) order.push_back({-share, op});
  std::sort(order.begin(), order.end());
  std::fprintf(out,
               "\nms per counted step by op (device time between events around each op; "
               "calls per step in brackets)\n\n| op |");
  for (const ProfiledCase& c : cases) std::fprintf(out, " %s |", c.name.c_str());
  std::fprintf(out, "\n|---|");
  for (size_t i = 0; i < cases.size(); ++i) std::fprintf(out, "---:|");
  std::fprintf(out, "\n");
  for (const auto& [share, op] : order) {
    std::fprintf(out, "| %s |", op.c_str());
    for (const ProfiledCase& c : cases) {
      if (!c.ops.contains(op)) {
        std::fprintf(out, " - |");
        continue;
      }
      std::fprintf(out, " %.3f (%.0f) |", c.ops[op]["ms_per_step"].get<double>(),
                   c.ops[op]["calls_per_step"].get<double>());
    }
    std::fprintf(out, "\n");
  }
  std::fprintf(out, "| sum of ops |");
  std::vector<double> sums;
  for (const ProfiledCase& c : cases) {
    double sum = 0;
    for (const auto& [op, e] : c.ops.items()) sum += e["ms_per_step"].get<double>();
    sums.push_back(sum);
    std::fprintf(out, " %.3f |", sum);
  }
  std::fprintf(out, "\n| step beyond the ops |");
  for (size_t i = 0; i < cases.size(); ++i)
    std::fprintf(out, " %.3f |", cases[i].step_ms - sums[i]);
  std::fprintf(out, "\n");
  std::fflush(out);
}

/// Adds the case's requests (random ids, the same every run) to `engine` and steps it until idle,
/// adding the counted steps to `m`.
Status run_requests(runtime::Engine& engine, const model::Model& model, const Case& c, bool profile,
                    model::LayerTimes& step_layers, OpTimes& step_ops, Measured& m) {
  std::mt19937 rng(kPromptSeed);
  std::uniform_int_distribution<int32_t> id(0, int32_t(model.config().vocab_size - 1));
  runtime::SamplingParams params;  // greedy, no stop token: every request runs to new_tokens
  params.max_new_tokens = c.new_tokens;
  for (int64_t n : c.prompts) {
    std::vector<int32_t> prompt(static_cast<size_t>(n));
    for (int32_t& t : prompt) t = id(rng);
    HYLA_ASSIGN_OR_RETURN(const runtime::RequestId request, engine.add_request(prompt, params));
    (void)request;
  }

  while (!engine.idle()) {
    const int64_t prompt_before = engine.stats().prompt_tokens;
    const Clock::time_point start = Clock::now();
    step_layers.clear();
    step_ops.clear();
    std::vector<runtime::TokenEvent> events;
    {
      const OpTimes::Activate recording(profile ? &step_ops : nullptr);
      events = engine.step();
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    step_ops.collect();
    int64_t sampled = 0;
    for (const runtime::TokenEvent& e : events) {
      if (e.reason == runtime::FinishReason::kError) return internal_error(e.error);
      sampled += e.token >= 0 ? 1 : 0;
    }
    const int64_t prompt_tokens = engine.stats().prompt_tokens - prompt_before;
    const bool counted = c.prefill ? prompt_tokens > 0 : prompt_tokens == 0;
    if (counted) {
      m.tokens += c.prefill ? prompt_tokens : sampled;
      m.seconds += seconds;
      m.steps += 1;
      m.layers.add(step_layers);
      for (const auto& [op, e] : step_ops.entries()) {
        m.ops[op].seconds += e.seconds;
        m.ops[op].calls += e.calls;
      }
    }
  }
  return ok_status();
}

/// Runs one case on a fresh engine sized for its requests (at most 3/4 of the device's available
/// memory, as `hyla generate` does; refused beyond it).
Result<Measured> run_case(const model::Model& model, Device device, const Case& c,
                          const runtime::TensorParallelOptions& tensor_parallel,
                          bool profile = false) {
  model::LayerTimes step_layers;
  OpTimes step_ops;
  runtime::EngineOptions options;
  if (profile) options.layer_times = &step_layers;
  options.device = device;
  options.tensor_parallel = tensor_parallel;
  options.max_batch_tokens = c.step_tokens;
  options.max_running = int64_t(c.prompts.size());
  options.allow_long_context = true;  // random ids: the model's context limit says nothing here
  std::vector<int64_t> tokens;
  for (int64_t p : c.prompts) tokens.push_back(p + c.new_tokens);
  HYLA_ASSIGN_OR_RETURN(const runtime::MemorySizing sizing,
                        runtime::size_engine_memory(model.config(), options, tokens));
  options.memory_budget_bytes = sizing.budget_bytes;
  options.state_ratio = sizing.state_ratio;
  HYLA_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Engine> engine,
                        runtime::Engine::create(model, options));

  // Two runs of the case on one engine, only the second timed (as llama-bench's warm-up run):
  // the first makes what later steps reuse (allocator pools, cuBLASLt plans for these shapes,
  // the decode graphs), so neither a first call's cost nor a capture lands in the figures.
  Measured m;
  for (int run = 0; run < 2; ++run) {
    m = Measured{};
    HYLA_RETURN_IF_ERROR(run_requests(*engine, model, c, profile, step_layers, step_ops, m));
  }
  return m;
}

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

std::vector<Case> cases(const BenchOptions& o) {
  std::vector<Case> out;
  for (int64_t p : o.prompt)
    out.push_back({str_cat("prefill_", p), {p}, 1, o.step_tokens, /*prefill=*/true});
  for (int64_t d : o.depth)
    out.push_back({str_cat("decode_depth_", d),
                   {std::max<int64_t>(d, 1)},
                   o.new_tokens,
                   o.step_tokens,
                   /*prefill=*/false});
  // Every batched prompt in one step (as llama-batched-bench), so each decode step holds all B.
  for (int64_t b : o.batch)
    out.push_back({str_cat("batch_decode_", b), std::vector<int64_t>(size_t(b), o.batch_prompt),
                   o.new_tokens,
                   std::max(o.step_tokens, round_up(b * o.batch_prompt, runtime::kPrefillAlign)),
                   /*prefill=*/false});
  return out;
}

/// `git describe --always --dirty` of the source tree this binary was built from, when it is a
/// git checkout and git is installed; nothing otherwise.
std::optional<std::string> source_commit() {
#ifdef HYLA_SOURCE_DIR
  const std::string dir = HYLA_SOURCE_DIR;
  if (dir.find('\'') != std::string::npos) return std::nullopt;
  const std::string command =
      "git -C '" + dir + "' describe --always --dirty --abbrev=12 2>/dev/null";
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  char line[128] = {};
  const bool read = std::fgets(line, sizeof(line), pipe) != nullptr;
  if (pclose(pipe) != 0 || !read) return std::nullopt;
  std::string commit = line;
  while (!commit.empty() && (commit.back() == '\n' || commit.back() == '\r')) commit.pop_back();
  if (commit.empty()) return std::nullopt;
  return commit;
#else
  return std::nullopt;
#endif
}

int bench(const BenchOptions& options, std::FILE* out, std::FILE* err) {
  if (const Status s = validate(options); !s.ok()) {
    std::fprintf(err, "hyla bench: %s\n", s.message().c_str());
    return 2;
  }
  const std::string model_dir = options.model_dir.empty() ? default_model_dir() : options.model_dir;
  const Result<Device> device = resolve_device(options.device);
  if (!device.ok()) return fail(err, device.status().message());
  Result<std::unique_ptr<model::Model>> model = model::load_model(model_dir);
  if (!model.ok()) return fail(err, str_cat(model_dir, ": ", model.status().message()));
  Result<runtime::TensorParallelOptions> tp =
      tensor_parallel_options(options.tensor_parallel, device.value());
  if (!tp.ok()) return fail(err, tp.status().message());
  model = model_on(std::move(model).value(), weights_device(device.value(), tp->ranks));
  if (!model.ok()) return fail(err, model.status().message());
  model.value()->set_linear_backends(
      model::parse_linear_attn_backends(options.linear_attn).value());
  const model::ModelConfig& config = model.value()->config();
  const std::string device_text = device_name(device.value());
  const std::optional<std::string> commit = source_commit();
  std::fprintf(out,
               "hyla bench: %s (%s, %lld layers) on %s%s%s; prompts of random ids (seed %u), "
               "greedy\n\n",
               model_dir.c_str(), config.model_type.c_str(),
               static_cast<long long>(config.num_layers), device_text.c_str(),
               tp->ranks > 1 ? str_cat(", ", tp->ranks, " tensor-parallel ranks").c_str() : "",
               commit ? str_cat(", commit ", *commit).c_str() : "", kPromptSeed);
  std::fflush(out);

  // Warm-up, not reported: first-call costs (allocator pools, library handles, page faults).
  const Result<Measured> warm = run_case(
      *model.value(), device.value(),
      {"warm_up", {std::min<int64_t>(64, options.prompt.front())}, 2, options.step_tokens, false},
      tp.value());
  if (!warm.ok()) return fail(err, str_cat("warm-up: ", warm.status().message()));

  if (options.workload == "prefix" || options.workload == "speculative") {
    nlohmann::json rows = nlohmann::json::array();
    const Status ran =
        options.workload == "prefix"
            ? run_prefix_workload(*model.value(), device.value(), options, commit, out, rows)
            : run_speculative_workload(*model.value(), device.value(), options, commit, out, rows);
    if (!ran.ok()) return fail(err, str_cat(options.workload, " workload: ", ran.message()));
    if (!options.json_path.empty()) {
      std::ofstream file(options.json_path);
      file << rows.dump(2) << "\n";
      if (!file.good()) return fail(err, str_cat("cannot write ", options.json_path));
    }
    return 0;
  }

  std::fprintf(out, "| case | device | tokens | seconds | tokens/s |\n");
  std::fprintf(out, "|---|---|---:|---:|---:|\n");
  std::fflush(out);
  nlohmann::json results = nlohmann::json::array();
  int failed = 0;
  for (const Case& c : cases(options)) {
    Result<Measured> m = run_case(*model.value(), device.value(), c, tp.value());
    if (!m.ok()) {
      ++failed;
      std::fprintf(err, "hyla bench: %s: %s\n", c.name.c_str(), m.status().message().c_str());
      continue;
    }
    std::fprintf(out, "| %s | %s | %lld | %.4f | %.1f |\n", c.name.c_str(), device_text.c_str(),
                 static_cast<long long>(m->tokens), m->seconds, m->tokens_per_s());
    std::fflush(out);
    nlohmann::json row = {{"name", c.name},
                          {"device", device_text},
                          {"model", model_dir},
                          {"model_type", config.model_type},
                          {"tokens", m->tokens},
                          {"seconds", m->seconds},
                          {"tokens_per_s", m->tokens_per_s()},
                          {"tensor_parallel", tp->ranks}};
    if (commit) row["commit"] = *commit;
    results.push_back(row);
  }

  if (options.profile) {
    // The same cases again, each layer boundary synchronised: where a counted step's time goes.
    std::fprintf(out,
                 "\nms per counted step by layer kind (--profile: every layer waits for the "
                 "device, so steps run slower than above)\n\n| case | steps |");
    std::vector<ProfiledCase> profiled;
    constexpr int kParts = int(model::LayerPart::kCount);
    for (int p = 0; p < kParts; ++p)
      std::fprintf(out, " %s |", model::layer_part_name(model::LayerPart(p)));
    std::fprintf(out, " total |\n|---|---:|");
    for (int p = 0; p <= kParts; ++p) std::fprintf(out, "---:|");
    std::fprintf(out, "\n");
    for (const Case& c : cases(options)) {
      Result<Measured> m =
          run_case(*model.value(), device.value(), c, tp.value(), /*profile=*/true);
      if (!m.ok() || m->steps == 0) {
        ++failed;
        std::fprintf(err, "hyla bench: %s (profile): %s\n", c.name.c_str(),
                     m.ok() ? "no step counted" : m.status().message().c_str());
        continue;
      }
      const double per_step = 1e3 / double(m->steps);
      std::fprintf(out, "| %s | %lld |", c.name.c_str(), static_cast<long long>(m->steps));
      nlohmann::json parts = nlohmann::json::object();
      for (int p = 0; p < kParts; ++p) {
        const double ms = m->layers.seconds(model::LayerPart(p)) * per_step;
        std::fprintf(out, " %.3f |", ms);
        parts[model::layer_part_name(model::LayerPart(p))] = ms;
      }
      std::fprintf(out, " %.3f |\n", m->layers.total_seconds() * per_step);
      std::fflush(out);
      nlohmann::json ops = nlohmann::json::object();
      for (const auto& [op, e] : m->ops)
        ops[op] = {{"ms_per_step", e.seconds * per_step},
                   {"calls_per_step", double(e.calls) / double(m->steps)}};
      for (nlohmann::json& row : results)
        if (row["name"] == c.name) {
          row["layer_ms_per_step"] = parts;
          row["op_ms_per_step"] = ops;
        }
      profiled.push_back({c.name, m->layers.total_seconds() * per_step, std::move(ops)});
    }
    print_op_table(out, profiled);
  }

  if (!options.json_path.empty()) {
    std::ofstream file(options.json_path);
    file << results.dump(2) << "\n";
    if (!file.good()) return fail(err, str_cat("cannot write ", options.json_path));
  }
  if (failed > 0) return fail(err, str_cat(failed, " case(s) failed (see above)"));
  return 0;
}

}  // namespace

Status validate(const BenchOptions& o) {
  constexpr int64_t kMaxTokens = int64_t{1} << 20, kMaxBatch = 4096;
  auto check_list = [](const char* name, const std::vector<int64_t>& values, int64_t lo,
                       int64_t hi) -> Status {
    if (values.empty()) return invalid_argument(name, " is empty, expected at least one value");
    for (int64_t v : values)
      if (v < lo || v > hi)
        return invalid_argument(name, " has ", v, ", expected integers in [", lo, ", ", hi, "]");
    return ok_status();
  };
  HYLA_RETURN_IF_ERROR(check_list("--prompt", o.prompt, 1, kMaxTokens));
  HYLA_RETURN_IF_ERROR(check_list("--depth", o.depth, 0, kMaxTokens));
  HYLA_RETURN_IF_ERROR(check_list("--batch", o.batch, 1, kMaxBatch));
  if (o.batch_prompt < 1 || o.batch_prompt > kMaxTokens)
    return invalid_argument("--batch-prompt is ", o.batch_prompt, ", expected an integer in [1, ",
                            kMaxTokens, "]");
  if (o.new_tokens < 2 || o.new_tokens > kMaxTokens)
    return invalid_argument("--new is ", o.new_tokens, ", expected an integer in [2, ", kMaxTokens,
                            "] (the first token comes with the prefill)");
  if (o.step_tokens < runtime::kPrefillAlign || o.step_tokens > kMaxTokens)
    return invalid_argument("--step-tokens is ", o.step_tokens, ", expected an integer in [",
                            runtime::kPrefillAlign, ", ", kMaxTokens, "]");
  if (o.workload != "standard" && o.workload != "prefix" && o.workload != "speculative")
    return invalid_argument("--workload is '", o.workload,
                            "', expected standard, prefix or speculative");
  HYLA_RETURN_IF_ERROR(check_tensor_parallel(o.tensor_parallel));
  if (o.tensor_parallel > 1 && o.workload != "standard")
    return invalid_argument("--tensor-parallel ", o.tensor_parallel,
                            " runs the standard workload "
                            "only, not --workload ",
                            o.workload);
  if (std::find(std::begin(kDeviceNames), std::end(kDeviceNames), o.device) ==
      std::end(kDeviceNames))
    return invalid_argument("--device is '", o.device, "', expected cpu, cuda or auto");
  return model::parse_linear_attn_backends(o.linear_attn).status();
}

int run_bench(const BenchOptions& options, std::FILE* out, std::FILE* err) {
  try {
    return bench(options, out, err);
  } catch (const std::bad_alloc&) {
    return fail(err, "out of memory");
  } catch (const std::exception& e) {
    return fail(err, e.what());
  }
}

}  // namespace hyla::cli
