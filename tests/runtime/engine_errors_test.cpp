// Engine robustness: a request whose logits turn NaN / inf ends with an error naming it and the
// step while the others in the batch finish as if alone (a golden checkpoint copy whose embedding
// row of one token is +inf); prompts beyond the context limit are refused per request; a memory
// plan beyond the host's memory is refused before allocation; a CUDA engine in a build or on a
// machine without CUDA is refused with the reason; the default budget sizing
// (size_memory / size_engine_memory) holds exactly the requests it was sized for.
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/device_memory.h"
#include "model/architecture.h"
#include "model/safetensors.h"
#include "model/test_files.h"
#include "runtime/engine.h"
#include "runtime/memory/host_memory.h"
#include "testing.h"

namespace hyla::runtime {
namespace {

namespace fs = std::filesystem;
using Tokens = std::vector<int32_t>;

std::string golden_dir(const std::string& arch) {
  return std::string(HYLA_TEST_DATA_DIR) + "/golden/" + arch;
}

std::unique_ptr<model::Model> load(const std::string& dir) {
  Result<std::unique_ptr<model::Model>> model = model::load_model(dir);
  HYLA_CHECK(model.ok(), model.status().message());
  return std::move(model).value();
}

EngineOptions small_options() {
  EngineOptions o;
  o.memory_budget_bytes = int64_t{16} << 20;
  o.conv_dtype = DType::kF32;
  return o;
}

SamplingParams greedy(int64_t n) {
  SamplingParams p;
  p.max_new_tokens = n;
  return p;
}

/// Copies a golden checkpoint (config + weights) with the embedding row of `token` set to +inf.
void write_poisoned_copy(const std::string& from, const std::string& to, int32_t token) {
  fs::copy_file(from + "/config.json", to + "/config.json");
  std::vector<std::pair<std::string, Tensor>> tensors;
  {
    Result<model::SafetensorsFile> f = model::SafetensorsFile::open(from + "/model.safetensors");
    HYLA_CHECK(f.ok(), f.status().message());
    for (const model::TensorEntry& e : f->tensors()) {
      Tensor t = Tensor::empty(int(e.shape.size()), e.shape.data(), e.dtype);
      std::memcpy(t.view().raw(), e.data, size_t(e.nbytes));
      if (e.name == "model.embed_tokens.weight") {
        HYLA_CHECK(e.dtype == DType::kF32 && e.shape.size() == 2, "unexpected embedding");
        float* row = static_cast<float*>(t.view().raw()) + int64_t(token) * e.shape[1];
        for (int64_t i = 0; i < e.shape[1]; ++i) row[i] = std::numeric_limits<float>::infinity();
      }
      tensors.emplace_back(e.name, std::move(t));
    }
  }
  std::vector<std::pair<std::string, TensorView>> views;
  for (auto& [name, t] : tensors) views.emplace_back(name, t.view());
  HYLA_CHECK(model::write_safetensors(to + "/model.safetensors", views).ok(), "write failed");
}

// Request P generates token X as its 3rd token; X's embedding is +inf, so P's 4th step (X fed
// back) gives non-finite logits. Two clean requests share every batch with P.
TEST(EngineErrors, NonFiniteLogitsEndOneRequestOnly) {
  const std::unique_ptr<model::Model> original = load(golden_dir("qwen3_next"));
  const std::vector<Tokens> clean = {{1, 2, 3, 4, 5}, {9, 10, 11, 12}};
  const int64_t n = 8;
  std::vector<Tokens> clean_tokens;
  std::set<int32_t> used;
  for (const Tokens& p : clean) {
    Result<Tokens> g = model::greedy_generate(*original, p, n);
    ASSERT_TRUE(g.ok()) << g.status().message();
    clean_tokens.push_back(g.value());
    used.insert(p.begin(), p.end());
    used.insert(g->begin(), g->end());
  }
  // A prompt whose 3rd greedy token appears nowhere else (not in its own first two either).
  Tokens poisoned_prompt;
  Tokens poisoned_head;
  int32_t poison = -1;
  for (int32_t start = 20; start < 200 && poison < 0; start += 7) {
    const Tokens p = {start, start + 1, start + 2};
    Result<Tokens> g = model::greedy_generate(*original, p, 3);
    ASSERT_TRUE(g.ok());
    const int32_t x = g.value()[2];
    if (used.count(x) || x == g.value()[0] || x == g.value()[1] ||
        std::find(p.begin(), p.end(), x) != p.end())
      continue;
    poison = x;
    poisoned_prompt = p;
    poisoned_head = g.value();
  }
  ASSERT_GE(poison, 0) << "no prompt with a distinct 3rd token";

  testing::TempDir dir;
  write_poisoned_copy(golden_dir("qwen3_next"), dir.path(), poison);
  const std::unique_ptr<model::Model> model = load(dir.path());
  Result<std::unique_ptr<Engine>> engine = Engine::create(*model, small_options());
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  std::map<RequestId, size_t> index;
  const std::vector<Tokens> prompts = {clean[0], poisoned_prompt, clean[1]};
  for (size_t i = 0; i < prompts.size(); ++i) {
    Result<RequestId> id = engine.value()->add_request(prompts[i], greedy(n));
    ASSERT_TRUE(id.ok()) << id.status().message();
    index[id.value()] = i;
  }
  std::vector<Tokens> out(prompts.size());
  std::vector<std::string> errors(prompts.size());
  int64_t error_step = -1;
  while (!engine.value()->idle()) {
    for (const TokenEvent& e : engine.value()->step()) {
      const size_t i = index.at(e.request);
      if (e.token >= 0) out[i].push_back(e.token);
      if (e.reason == FinishReason::kError) {
        errors[i] = e.error;
        error_step = engine.value()->stats().steps;
        EXPECT_TRUE(e.finished);
        EXPECT_EQ(e.token, -1);
      }
    }
  }
  EXPECT_EQ(out[1], poisoned_head);  // its three tokens, then the error
  EXPECT_EQ(error_step, 4);          // prefill (token 1), then decodes of tokens 2, 3, 4
  for (const char* part : {"request 1: the logits of step 4 (its token 4, after 6 tokens) hold ",
                           "logits not finite)", "; the request is ended, the others go on"})
    EXPECT_NE(errors[1].find(part), std::string::npos) << part << " not in: " << errors[1];
  EXPECT_TRUE(errors[0].empty()) << errors[0];
  EXPECT_TRUE(errors[2].empty()) << errors[2];
  EXPECT_EQ(out[0], clean_tokens[0]);
  EXPECT_EQ(out[2], clean_tokens[1]);
  const EngineStats s = engine.value()->stats();
  EXPECT_EQ(s.free_slots, engine.value()->plan().state_slots);
  EXPECT_EQ(s.free_pages, engine.value()->plan().kv_pages);
  EXPECT_EQ(s.finished, 3);
}

TEST(EngineErrors, PromptBeyondTheContextLimitIsRefusedAlone) {
  const std::unique_ptr<model::Model> model = load(golden_dir("qwen3_next"));
  EngineOptions options = small_options();
  options.max_context = 8;
  Result<std::unique_ptr<Engine>> engine = Engine::create(*model, options);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  const Tokens long_prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const Result<RequestId> refused = engine.value()->add_request(long_prompt, greedy(4));
  EXPECT_ERROR_CONTAINS(refused.status(),
                        "add_request: the prompt is 9 tokens, longer than the model's context "
                        "limit of 8 tokens (max_position_embeddings); allow_long_context runs it "
                        "anyway");
  EXPECT_EQ(refused.status().code(), ErrorCode::kOutOfRange);
  // The other requests are accepted and run; nothing was taken by the refused one.
  ASSERT_TRUE(engine.value()->add_request({1, 2, 3, 4, 5, 6, 7, 8}, greedy(4)).ok());
  int64_t tokens = 0;
  while (!engine.value()->idle())
    for (const TokenEvent& e : engine.value()->step()) tokens += e.token >= 0 ? 1 : 0;
  EXPECT_EQ(tokens, 4);

  options.allow_long_context = true;
  Result<std::unique_ptr<Engine>> lenient = Engine::create(*model, options);
  ASSERT_TRUE(lenient.ok());
  EXPECT_TRUE(lenient.value()->add_request(long_prompt, greedy(4)).ok());
}

TEST(EngineErrors, PlanBeyondHostMemoryIsRefusedBeforeAllocating) {
  const std::unique_ptr<model::Model> model = load(golden_dir("qwen3_next"));
  EngineOptions options = small_options();
  options.memory_limit_bytes = 1000;
  EXPECT_ERROR_CONTAINS(Engine::create(*model, options).status(),
                        "Engine: the memory plan needs 16.0 MiB (budget 16.0 MiB), more than the "
                        "limit of 1000 B (memory_limit_bytes)");
  // This machine's own memory: a 1 PiB budget (what --budget-mib 1073741824 asks) plans pools of
  // hundreds of TiB, refused with both numbers before any allocation.
  Result<HostMemory> host = host_memory();
  ASSERT_TRUE(host.ok()) << host.status().message();
  options = small_options();
  options.memory_budget_bytes = int64_t{1} << 50;
  const Status refused = Engine::create(*model, options).status();
  EXPECT_EQ(refused.code(), ErrorCode::kOutOfMemory);
  for (const std::string& part : {std::string("Engine: the memory plan needs "),
                                  std::string("(budget 1.0 PiB), but this machine has "),
                                  str_cat(format_bytes(host->total_bytes), " (", host->source,
                                          " MemAvailable / MemTotal); lower the memory budget")})
    EXPECT_NE(refused.message().find(part), std::string::npos)
        << part << " not in: " << refused.message();
}

// Without a visible CUDA device (or without CUDA in the build) an engine on CUDA is refused at
// create with the reason, before the model's device is compared; with one, its free memory is a
// positive figure no larger than the total.
TEST(EngineErrors, CudaDeviceWithoutCudaIsRefused) {
  const std::unique_ptr<model::Model> model = load(golden_dir("qwen3_next"));
  EngineOptions options = small_options();
  options.device = Device::cuda();
  if (cuda_available()) {
    Result<DeviceFreeMemory> memory = device_free_memory(Device::cuda());
    ASSERT_TRUE(memory.ok()) << memory.status().message();
    EXPECT_GT(memory->free_bytes, 0);
    EXPECT_LE(memory->free_bytes, memory->total_bytes);
    GTEST_SKIP() << "a CUDA device is visible: the refusal is not reachable here";
  }
#if HYLA_WITH_CUDA
  const char* reason = "no CUDA device is visible";
#else
  const char* reason = "this build has no CUDA support";
#endif
  const Status refused = Engine::create(*model, options).status();
  EXPECT_ERROR_CONTAINS(refused, str_cat("Engine: device cuda:0: device_free_memory: ", reason));
  EXPECT_ERROR_CONTAINS(device_free_memory(Device::cuda()).status(), reason);
  EXPECT_ERROR_CONTAINS(device_free_memory(Device::cpu()).status(), "cpu is not a CUDA device");
}

TEST(HostMemory, ParsesMeminfo) {
  Result<HostMemory> m = parse_meminfo(
      "MemTotal:       16310412 kB\nMemFree:         1234 kB\nMemAvailable:   8000000 kB\n");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->total_bytes, int64_t{16310412} * 1024);
  EXPECT_EQ(m->available_bytes, int64_t{8000000} * 1024);
  EXPECT_ERROR_CONTAINS(parse_meminfo("MemTotal: 5 kB\n").status(),
                        "/proc/meminfo: no MemAvailable and MemTotal lines in kB");
  Result<HostMemory> here = host_memory();
  ASSERT_TRUE(here.ok()) << here.status().message();
  EXPECT_GT(here->available_bytes, 0);
  EXPECT_LE(here->available_bytes, here->total_bytes);
}

// The default budget: every request at prompt + max_new_tokens runs at once, with little spare.
TEST(MemorySizing, HoldsTheRequestsItWasSizedFor) {
  for (const char* arch : {"qwen3_next", "kimi_k3", "kimi_linear"}) {
    SCOPED_TRACE(arch);
    const std::unique_ptr<model::Model> model = load(golden_dir(arch));
    const model::ModelConfig& config = model->config();
    EngineOptions options = small_options();
    const std::vector<int64_t> tokens = {150 + 8, 37 + 8, 5 + 8};  // pages of 64: 3 + 1 + 1
    Result<MemorySizing> sizing = size_engine_memory(config, options, tokens);
    ASSERT_TRUE(sizing.ok()) << sizing.status().message();
    Result<MemoryPlan> plan = plan_memory(config, sizing->budget_bytes, sizing->state_ratio,
                                          memory_plan_options(options));
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    EXPECT_EQ(plan->state_slots, 3) << plan->summary();
    EXPECT_EQ(plan->kv_pages, 5) << plan->summary();
    // All three are admitted in the first step and finish.
    options.memory_budget_bytes = sizing->budget_bytes;
    options.state_ratio = sizing->state_ratio;
    Result<std::unique_ptr<Engine>> engine = Engine::create(*model, options);
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    for (int64_t t : tokens) {
      Tokens prompt(size_t(t - 8));
      for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(1 + i % 50);
      ASSERT_TRUE(engine.value()->add_request(prompt, greedy(8)).ok());
    }
    (void)engine.value()->step();
    EXPECT_EQ(engine.value()->stats().running, 3);
    EXPECT_EQ(engine.value()->stats().waiting, 0);
    // max_running 2: sized for the two longest.
    options.max_running = 2;
    Result<MemorySizing> two = size_engine_memory(config, options, tokens);
    ASSERT_TRUE(two.ok());
    Result<MemoryPlan> two_plan =
        plan_memory(config, two->budget_bytes, two->state_ratio, memory_plan_options(options));
    ASSERT_TRUE(two_plan.ok());
    EXPECT_EQ(two_plan->state_slots, 2);
    EXPECT_EQ(two_plan->kv_pages, 4);
  }
  const std::unique_ptr<model::Model> model = load(golden_dir("qwen3_next"));
  EXPECT_ERROR_CONTAINS(size_memory(model->config(), std::vector<int64_t>{}).status(),
                        "size_memory: no request");
  EXPECT_ERROR_CONTAINS(size_memory(model->config(), std::vector<int64_t>{4, 0}).status(),
                        "size_memory: request 1 has 0 tokens, expected >= 1");
  EXPECT_ERROR_CONTAINS(
      size_memory(model->config(), std::vector<int64_t>{std::numeric_limits<int64_t>::max()})
          .status(),
      "size_memory: 1 requests of ");
}

}  // namespace
}  // namespace hyla::runtime
