// CPU benchmark of the runtime engine: decode tokens/s at batch 1, 8 and 32 on a checkpoint
// (default: the golden qwen3_next, a tiny random model, so this measures the engine and kernel
// overheads more than the arithmetic). Each request: a 32-token prompt (seeded random ids), 64 new
// tokens, greedy. Decode rate = tokens sampled in decode-only steps / their time; end-to-end =
// all sampled tokens / the whole run (prefill included). Prints a table and one JSON line.
//   build/bin/hyla_bench_engine [MODEL_DIR] [--threads N]
#include "runtime/engine.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "model/architecture.h"

namespace hyla {
namespace {

constexpr int64_t kPromptTokens = 32, kNewTokens = 64;
constexpr int kBatches[] = {1, 8, 32};

struct Row {
  int batch = 0;
  double decode_tokens_per_s = 0, end_to_end_tokens_per_s = 0, seconds = 0;
  int64_t steps = 0;
};

Result<Row> run_batch(const model::Model& model, int batch) {
  runtime::EngineOptions options;
  options.max_running = batch;
  HYLA_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Engine> engine,
                        runtime::Engine::create(model, options));
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> id(0, int32_t(model.config().vocab_size) - 1);
  runtime::SamplingParams params;
  params.max_new_tokens = kNewTokens;
  for (int b = 0; b < batch; ++b) {
    std::vector<int32_t> prompt(kPromptTokens);
    for (int32_t& t : prompt) t = id(rng);
    HYLA_ASSIGN_OR_RETURN(runtime::RequestId rid, engine->add_request(prompt, params));
    (void)rid;
  }
  using Clock = std::chrono::steady_clock;
  double decode_seconds = 0;
  int64_t decode_tokens = 0;
  const Clock::time_point start = Clock::now();
  while (!engine->idle()) {
    const int64_t prompt_before = engine->stats().prompt_tokens;
    const Clock::time_point step_start = Clock::now();
    const std::vector<runtime::TokenEvent> events = engine->step();
    const double dt = std::chrono::duration<double>(Clock::now() - step_start).count();
    for (const runtime::TokenEvent& e : events)
      if (e.reason == runtime::FinishReason::kError) return internal_error(e.error);
    if (engine->stats().prompt_tokens == prompt_before) {
      decode_seconds += dt;
      decode_tokens += int64_t(events.size());
    }
  }
  Row row;
  row.batch = batch;
  row.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  row.steps = engine->stats().steps;
  row.decode_tokens_per_s = decode_seconds > 0 ? double(decode_tokens) / decode_seconds : 0;
  row.end_to_end_tokens_per_s = double(engine->stats().tokens_generated) / row.seconds;
  return row;
}

}  // namespace
}  // namespace hyla

int main(int argc, char** argv) {
  std::string dir = std::string(HYLA_SOURCE_DIR) + "/tests/data/golden/qwen3_next";
  int threads = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else
      dir = arg;
  }
  hyla::set_num_threads(threads);
  hyla::Result<std::unique_ptr<hyla::model::Model>> model = hyla::model::load_model(dir);
  if (!model.ok()) {
    std::fprintf(stderr, "hyla_bench_engine: %s\n", model.status().message().c_str());
    return 1;
  }
  std::printf("engine decode, %s: prompt %lld tokens, %lld new tokens each, greedy, %d threads\n",
              model.value()->config().model_type.c_str(),
              static_cast<long long>(hyla::kPromptTokens), static_cast<long long>(hyla::kNewTokens),
              hyla::num_threads());
  std::printf("%6s %16s %20s %10s %7s\n", "batch", "decode tok/s", "end-to-end tok/s", "seconds",
              "steps");
  std::string json = "{\"bench\": \"engine\", \"model\": \"" + model.value()->config().model_type +
                     "\", \"decode_tokens_per_s\": {";
  for (int batch : hyla::kBatches) {
    hyla::Result<hyla::Row> row = hyla::run_batch(*model.value(), batch);
    if (!row.ok()) {
      std::fprintf(stderr, "hyla_bench_engine: batch %d: %s\n", batch,
                   row.status().message().c_str());
      return 1;
    }
    std::printf("%6d %16.1f %20.1f %10.3f %7lld\n", batch, row->decode_tokens_per_s,
                row->end_to_end_tokens_per_s, row->seconds, static_cast<long long>(row->steps));
    json += hyla::str_cat(batch == hyla::kBatches[0] ? "" : ", ", "\"", batch,
                          "\": ", row->decode_tokens_per_s);
  }
  std::printf("%s}}\n", json.c_str());
  return 0;
}
