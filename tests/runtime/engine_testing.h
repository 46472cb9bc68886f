// Shared by the engine tests on the CPU (runtime/engine_test.cpp) and on CUDA
// (runtime/cuda/engine_cuda_test.cpp): the golden models and HF's prompts, the test engine, and
// the checks every device must pass (batched == alone == the CPU's greedy tokens, chunked prefill,
// cancel, admission), each taking the device the engine runs on. The CPU's
// model::greedy_generate is the reference: the CPU engine must match it exactly; another device
// computes the same f32 math in another summation order, so its tokens may part from the CPU's
// only at a near tie of the CPU's two best logits (kTieGap).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/architecture.h"
#include "model/json_file.h"
#include "model/safetensors.h"
#include "runtime/engine.h"
#include "testing.h"

namespace hyla::runtime::engine_testing {

using Tokens = std::vector<int32_t>;

/// The goldens were drawn so that HF's own greedy steps have top1-top2 gaps >= 2e-3
/// (reference_meta.json prompt_seeds.rule); CPU and CUDA differ by summation order, moving f32
/// logits by ~1e-5. A step whose CPU gap is below this may legitimately pick the other token on
/// another device; from there on the continuations are different prompts.
inline constexpr double kTieGap = 2e-3;

inline std::string golden_root() { return testing::golden_root(HYLA_TEST_DATA_DIR "/golden"); }

inline std::vector<std::string> golden_archs() {
  std::vector<std::string> archs;
  for (const std::string& dir : testing::golden_arch_dirs(golden_root()))
    archs.push_back(std::filesystem::path(dir).filename().string());
  return archs;
}

/// One golden architecture: the model (host) and HF's prompts and greedy tokens.
struct Golden {
  std::unique_ptr<model::Model> model;
  Tokens a_prompt, a_tokens, b_prompt, b_tokens;
  /// The smallest router selection margin the reference reports (reference_meta.json checks
  /// "<prompt>.router_min_selection_margin"; +inf when it reports none).
  double router_margin = INFINITY;
  /// The model's copy on a CUDA device (model_on), made on first use.
  mutable std::unique_ptr<model::Model> on_cuda;
};

inline Tokens read_ids(const model::SafetensorsFile& file, const std::string& key) {
  const model::TensorEntry* entry = file.find(key);
  HYLA_CHECK(entry != nullptr, "reference key '", key, "' missing");
  Tokens ids;
  for (double v : testing::to_f64(entry->view())) ids.push_back(int32_t(v));
  return ids;
}

/// Loaded once per process.
inline const Golden& golden(const std::string& arch) {
  static std::map<std::string, Golden> cache;
  auto it = cache.find(arch);
  if (it != cache.end()) return it->second;
  const std::string dir = golden_root() + "/" + arch;
  Result<std::unique_ptr<model::Model>> model = model::load_model(dir);
  HYLA_CHECK(model.ok(), "loading ", dir, ": ", model.status().message());
  Result<model::SafetensorsFile> ref = model::SafetensorsFile::open(dir + "/reference.safetensors");
  HYLA_CHECK(ref.ok(), ref.status().message());
  Golden g{std::move(model).value(),
           read_ids(ref.value(), "A.input_ids"),
           read_ids(ref.value(), "A.gen_tokens"),
           read_ids(ref.value(), "B.input_ids"),
           read_ids(ref.value(), "B.gen_tokens"),
           INFINITY,
           nullptr};
  Result<nlohmann::json> meta = model::read_json_file(dir + "/reference_meta.json");
  HYLA_CHECK(meta.ok(), meta.status().message());
  if (meta->contains("checks"))
    for (const auto& [key, value] : (*meta)["checks"].items())
      if (key.ends_with(".router_min_selection_margin") && value.is_number())
        g.router_margin = std::min(g.router_margin, value.get<double>());
  return cache.emplace(arch, std::move(g)).first->second;
}

/// The golden model with its weights on `device` (Model::to, once per process for CUDA).
inline const model::Model& model_on(const Golden& g, Device device) {
  if (device.is_cpu()) return *g.model;
  if (!g.on_cuda) {
    Result<std::unique_ptr<model::Model>> moved = g.model->to(device);
    HYLA_CHECK(moved.ok(), moved.status().message());
    g.on_cuda = std::move(moved.value());
  }
  return *g.on_cuda;
}

inline Tokens prefix(const Tokens& t, size_t n) { return Tokens(t.begin(), t.begin() + long(n)); }

/// Prompts of different lengths: two chunks and a tail, one short chunk, one chunk and a tail, 5.
inline std::vector<Tokens> mixed_prompts(const Golden& g) {
  return {prefix(g.a_prompt, 150), g.b_prompt, prefix(g.a_prompt, 70), prefix(g.a_prompt, 5)};
}

inline SamplingParams greedy(int64_t n) {
  SamplingParams p;
  p.max_new_tokens = n;
  return p;
}

/// The tests' engine on `device`: a small budget (the golden models are tiny) and f32 conv state,
/// so the state carried between steps is exactly what model::greedy_generate carries (f32).
inline EngineOptions test_options(Device device = Device::cpu()) {
  EngineOptions o;
  o.memory_budget_bytes = int64_t{16} << 20;
  o.conv_dtype = DType::kF32;
  o.device = device;
  return o;
}

/// Runs every request of `engine` to completion, one at a time when `one_by_one`.
inline std::vector<Tokens> run(Engine& engine, const std::vector<Tokens>& prompts,
                               const SamplingParams& params, bool one_by_one) {
  std::vector<Tokens> out(prompts.size());
  std::map<RequestId, size_t> index;
  auto drain = [&] {
    while (!engine.idle())
      for (const TokenEvent& e : engine.step()) {
        EXPECT_NE(e.reason, FinishReason::kError) << e.error;
        if (e.token >= 0) out[index.at(e.request)].push_back(e.token);
      }
  };
  for (size_t i = 0; i < prompts.size(); ++i) {
    Result<RequestId> id = engine.add_request(prompts[i], params);
    EXPECT_TRUE(id.ok()) << id.status().message();
    if (!id.ok()) return out;
    index[id.value()] = i;
    if (one_by_one) drain();
  }
  drain();
  return out;
}

inline std::unique_ptr<Engine> make_engine(const model::Model& model,
                                           const EngineOptions& options) {
  Result<std::unique_ptr<Engine>> engine = Engine::create(model, options);
  HYLA_CHECK(engine.ok(), engine.status().message());
  return std::move(engine).value();
}

/// Every slot and page is free and nothing is queued.
inline void expect_pools_full(const Engine& engine) {
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.free_slots, engine.plan().state_slots);
  EXPECT_EQ(s.free_pages, engine.plan().kv_pages);
  EXPECT_EQ(s.waiting, 0);
  EXPECT_EQ(s.running, 0);
  EXPECT_TRUE(engine.idle());
}

/// `got` (tokens from the engine on `device`) against the CPU's greedy_generate of `prompt`:
/// every token on the CPU; on another device up to a step whose CPU top1-top2 gap < kTieGap.
inline void expect_cpu_greedy_tokens(const Golden& g, const Tokens& prompt, const Tokens& got,
                                     int64_t n, Device device) {
  Tensor logits;
  Result<Tokens> want = model::greedy_generate(*g.model, prompt, n, &logits);
  ASSERT_TRUE(want.ok()) << want.status().message();
  if (device.is_cpu()) {
    EXPECT_EQ(got, want.value());
    return;
  }
  ASSERT_EQ(got.size(), want->size());
  const int64_t V = logits.size(1);
  for (size_t t = 0; t < got.size(); ++t) {
    if (got[t] == want.value()[t]) continue;
    const float* row = logits.host<float>() + int64_t(t) * V;
    float top1 = -INFINITY, top2 = -INFINITY;
    for (int64_t v = 0; v < V; ++v) {
      if (row[v] > top1) {
        top2 = top1;
        top1 = row[v];
      } else if (row[v] > top2) {
        top2 = row[v];
      }
    }
    const double gap = double(top1) - double(top2);
    if (gap >= kTieGap)
      ADD_FAILURE() << device_name(device) << " step " << t << ": chose " << got[t] << ", the CPU "
                    << want.value()[t] << " with a top1-top2 gap of " << gap
                    << " (router margins of the reference down to " << g.router_margin << ")";
    else
      std::printf("note: %s parts from the CPU at step %zu, a near tie (gap %.2g)\n",
                  device_name(device).c_str(), t, gap);
    return;
  }
}

/// Batched, then one request at a time, on one engine: both give the CPU's greedy tokens, and
/// the pools are full again after each.
inline void expect_batched_equals_alone(const Golden& g, Device device) {
  const std::vector<Tokens> prompts = mixed_prompts(g);
  const int64_t n = int64_t(g.a_tokens.size());
  std::unique_ptr<Engine> engine = make_engine(model_on(g, device), test_options(device));
  const std::vector<Tokens> batched = run(*engine, prompts, greedy(n), /*one_by_one=*/false);
  expect_pools_full(*engine);
  const std::vector<Tokens> alone = run(*engine, prompts, greedy(n), /*one_by_one=*/true);
  expect_pools_full(*engine);
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i) + " of " + std::to_string(prompts[i].size()));
    expect_cpu_greedy_tokens(g, prompts[i], batched[i], n, device);
    expect_cpu_greedy_tokens(g, prompts[i], alone[i], n, device);
    if (!device.is_cpu()) {
      EXPECT_EQ(batched[i], alone[i]);
    }
  }
  EXPECT_EQ(engine->stats().tokens_generated, 2 * n * int64_t(prompts.size()));
}

/// Step budgets of 64, 128 and 1000 tokens chunk the prompts differently; the tokens stay the
/// same and no step exceeds its budget.
inline void expect_chunked_prefill_same(const Golden& g, Device device) {
  const std::vector<Tokens> prompts = mixed_prompts(g);
  const int64_t n = 8;
  std::vector<Tokens> first;
  for (int64_t budget : {64, 128, 1000}) {
    SCOPED_TRACE("max_batch_tokens " + std::to_string(budget));
    EngineOptions options = test_options(device);
    options.max_batch_tokens = budget;
    std::unique_ptr<Engine> engine = make_engine(model_on(g, device), options);
    std::vector<Tokens> out(prompts.size());
    for (const Tokens& p : prompts) ASSERT_TRUE(engine->add_request(p, greedy(n)).ok());
    while (!engine->idle()) {
      for (const TokenEvent& e : engine->step()) {
        ASSERT_NE(e.reason, FinishReason::kError) << e.error;
        out[size_t(e.request)].push_back(e.token);
      }
      EXPECT_LE(engine->stats().last_step_tokens, budget);
    }
    expect_pools_full(*engine);
    if (first.empty()) {
      first = out;
    } else {
      EXPECT_EQ(out, first);
    }
  }
}

/// Cancel mid-prefill, mid-decode and while waiting: each frees its slot and pages at once and is
/// reported by the next step.
inline void expect_cancel_frees_slot_and_pages(const Golden& g, Device device) {
  EngineOptions options = test_options(device);
  options.max_batch_tokens = 64;
  std::unique_ptr<Engine> engine = make_engine(model_on(g, device), options);

  // Mid-prefill: 150 tokens, one 64-token chunk done.
  Result<RequestId> long_prompt = engine->add_request(g.a_prompt, greedy(8));
  ASSERT_TRUE(long_prompt.ok());
  EXPECT_TRUE(engine->step().empty());  // a mid-prompt chunk samples nothing
  EXPECT_EQ(engine->stats().running, 1);
  EXPECT_EQ(engine->stats().prompt_tokens, 64);
  ASSERT_OK(engine->cancel(long_prompt.value()));
  const std::vector<TokenEvent> cancelled = engine->step();
  ASSERT_EQ(cancelled.size(), 1u);
  EXPECT_EQ(cancelled[0].request, long_prompt.value());
  EXPECT_TRUE(cancelled[0].finished);
  EXPECT_EQ(cancelled[0].reason, FinishReason::kCancelled);
  expect_pools_full(*engine);

  // Mid-decode: B has generated 3 tokens; a waiting request is cancelled too.
  Result<RequestId> decoding = engine->add_request(g.b_prompt, greedy(8));
  ASSERT_TRUE(decoding.ok());
  for (int s = 0; s < 3; ++s) EXPECT_EQ(engine->step().size(), 1u);
  Result<RequestId> waiting = engine->add_request(g.a_prompt, greedy(8));
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(engine->stats().waiting, 1);
  ASSERT_OK(engine->cancel(decoding.value()));
  ASSERT_OK(engine->cancel(waiting.value()));
  EXPECT_EQ(engine->step().size(), 2u);
  expect_pools_full(*engine);
  EXPECT_EQ(engine->stats().finished, 3);
  EXPECT_ERROR_CONTAINS(engine->cancel(decoding.value()), "not waiting or running");
}

/// Five requests all complete with the CPU's greedy tokens under a small pool. Two state slots:
/// admission waits for a free one (at most two run). Five KV pages, where each request ends on 2
/// (prompt + 16 tokens in (64, 128]): pages are taken by need, so the first three prompts (2 + 1 +
/// 2 pages) run at once, and the pool is kept by preempting (at least once) when they grow. The
/// engine's bookkeeping is checked after every step.
inline void expect_admission_waits_for_free_memory(const Golden& g, Device device) {
  const model::ModelConfig& config = g.model->config();
  EngineOptions base = test_options(device);
  StatePoolOptions state{.conv_dtype = base.conv_dtype, .ssm_dtype = base.state_dtype};
  KvPagePoolOptions kv{.page_size = base.page_size, .dtype = base.kv_dtype};
  const double slot = double(StatePool::bytes_per_slot(config, state));
  const double page = double(KvPagePool::bytes_per_token(config, kv) * base.page_size);
  struct Limit {
    const char* name;
    double slots, pages;
    int64_t most_running;
  } limits[] = {{"slots", 2, 40, 2}, {"pages", 40, 5, 3}};
  const std::vector<Tokens> prompts = {prefix(g.a_prompt, 70), prefix(g.a_prompt, 50),
                                       prefix(g.a_prompt, 100), prefix(g.a_prompt, 64),
                                       prefix(g.a_prompt, 112)};
  for (const Limit& limit : limits) {
    SCOPED_TRACE(std::string("limited by ") + limit.name);
    // Whole slots and pages plus a quarter of the smaller one on each side, so neither share
    // rounds down below its count nor leaves room for one more page.
    const double slack = 0.25 * std::min(slot, page);
    const double state_share = limit.slots * slot + slack, kv_share = limit.pages * page + slack;
    EngineOptions options = base;
    // plus the per-step scratch the plan reserves first (Attention Residuals: K3)
    options.memory_budget_bytes =
        int64_t(state_share + kv_share) +
        model::attn_res_scratch_bytes_per_token(config) * base.max_batch_tokens;
    options.state_ratio = state_share / kv_share;
    std::unique_ptr<Engine> engine = make_engine(model_on(g, device), options);
    ASSERT_EQ(
        limit.name == std::string("slots") ? engine->plan().state_slots : engine->plan().kv_pages,
        limit.name == std::string("slots") ? 2 : 5)
        << engine->plan().summary();
    std::vector<Tokens> out(prompts.size());
    for (const Tokens& p : prompts) ASSERT_TRUE(engine->add_request(p, greedy(16)).ok());
    int64_t most_running = 0;
    while (!engine->idle()) {
      for (const TokenEvent& e : engine->step()) {
        ASSERT_NE(e.reason, FinishReason::kError) << e.error;
        out[size_t(e.request)].push_back(e.token);
      }
      ASSERT_OK(engine->check_invariants());
      const EngineStats s = engine->stats();
      most_running = std::max(most_running, s.running);
      EXPECT_LE(s.running, limit.most_running);
      EXPECT_EQ(s.waiting + s.running + s.finished, int64_t(prompts.size()));
    }
    EXPECT_EQ(most_running, limit.most_running);
    if (limit.name == std::string("pages")) {
      EXPECT_GE(engine->stats().preemptions, 1);
    } else {
      EXPECT_EQ(engine->stats().preemptions, 0);
    }
    expect_pools_full(*engine);
    for (size_t i = 0; i < prompts.size(); ++i) {
      SCOPED_TRACE("prompt " + std::to_string(i));
      expect_cpu_greedy_tokens(g, prompts[i], out[i], 16, device);
    }
  }
}

}  // namespace hyla::runtime::engine_testing
