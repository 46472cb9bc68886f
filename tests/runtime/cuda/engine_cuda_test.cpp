// Engine on CUDA (pools, decode scratch and weights on the device; logits sampled on the host):
// on every golden architecture the checks of engine_testing.h that the CPU passes (batched ==
// alone == the CPU's greedy tokens up to a near tie, chunked prefill, cancel, admission and
// preemption); log-probabilities equal the CPU's and keep their steps off decode graphs; a model
// left on the host and a plan beyond the device's free memory are refused; the demo model's greedy
// continuations on CUDA follow transformers' and the CPU engine's. Each test skips without a
// device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/device_memory.h"
#include "cuda_testing.h"
#include "model/architecture.h"
#include "runtime/prefix_cache_testing.h"
#include "runtime/speculative_testing.h"

namespace hyla::runtime {
namespace {

using namespace engine_testing;  // NOLINT: the shared helpers are this file's vocabulary

class EngineCudaTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    HYLA_SKIP_WITHOUT_CUDA();
    // A model that Model::to left on the host would make every engine below refuse to start.
    ASSERT_EQ(model_on(golden(GetParam()), Device::cuda()).device(), Device::cuda())
        << "Model::to(cuda:0) left the weights on the host";
  }
};

TEST_P(EngineCudaTest, BatchedEqualsAloneEqualsCpuGreedy) {
  expect_batched_equals_alone(golden(GetParam()), Device::cuda());
}

TEST_P(EngineCudaTest, ChunkedPrefillGivesTheSameTokens) {
  expect_chunked_prefill_same(golden(GetParam()), Device::cuda());
}

TEST_P(EngineCudaTest, CancelFreesSlotAndPages) {
  expect_cancel_frees_slot_and_pages(golden(GetParam()), Device::cuda());
}

TEST_P(EngineCudaTest, AdmissionWaitsForFreeMemory) {
  expect_admission_waits_for_free_memory(golden(GetParam()), Device::cuda());
}

// bf16 conv state on the device (the engine's default): every token comes out, no step fails.
TEST_P(EngineCudaTest, Bf16ConvStateRuns) {
  const Golden& g = golden(GetParam());
  EngineOptions options = test_options(Device::cuda());
  options.conv_dtype = DType::kBF16;
  Result<std::vector<Tokens>> out = generate(model_on(g, Device::cuda()), mixed_prompts(g),
                                             greedy(int64_t(g.a_tokens.size())), options);
  ASSERT_TRUE(out.ok()) << out.status().message();
  for (const Tokens& t : out.value()) EXPECT_EQ(t.size(), g.a_tokens.size());
}

// Greedy decode steps through CUDA graphs (runtime/decode_graphs.h): requests join while others
// decode (so the padded batch shape changes: 1 -> 2 -> 4 sequences, and back as they finish);
// every request gets the CPU's greedy tokens (up to a near tie), the graphs were captured and
// replayed where the model allows them (never where it does not), and every slot and page is
// free at the end. With cuda_graphs off nothing is captured.
TEST_P(EngineCudaTest, DecodeGraphsGiveTheCpuGreedyTokens) {
  const Golden& g = golden(GetParam());
  const std::vector<Tokens> prompts = mixed_prompts(g);
  const int64_t n = int64_t(g.a_tokens.size());
  for (const bool graphs : {true, false}) {
    SCOPED_TRACE(graphs ? "cuda_graphs on" : "cuda_graphs off");
    EngineOptions options = test_options(Device::cuda());
    options.cuda_graphs = graphs;
    std::unique_ptr<Engine> engine = make_engine(model_on(g, Device::cuda()), options);
    std::vector<Tokens> out(prompts.size());
    std::map<RequestId, size_t> index;
    for (size_t i = 0; i < prompts.size(); ++i) {
      Result<RequestId> id = engine->add_request(prompts[i], greedy(n));
      ASSERT_TRUE(id.ok()) << id.status().message();
      index[id.value()] = i;
      for (int s = 0; s < 3 && !engine->idle(); ++s)  // the others join mid-flight
        for (const TokenEvent& e : engine->step()) {
          ASSERT_NE(e.reason, FinishReason::kError) << e.error;
          if (e.token >= 0) out[index.at(e.request)].push_back(e.token);
        }
    }
    while (!engine->idle())
      for (const TokenEvent& e : engine->step()) {
        ASSERT_NE(e.reason, FinishReason::kError) << e.error;
        if (e.token >= 0) out[index.at(e.request)].push_back(e.token);
      }
    for (size_t i = 0; i < prompts.size(); ++i) {
      SCOPED_TRACE(str_cat("prompt ", i));
      expect_cpu_greedy_tokens(g, prompts[i], out[i], n, Device::cuda());
    }
    expect_pools_full(*engine);
    const DecodeGraphStats stats = engine->graph_stats();
    if (graphs && DecodeGraphs::supports(g.model->config())) {
      EXPECT_GT(stats.captures, 0);
      EXPECT_GT(stats.replays, stats.captures);
    } else {
      EXPECT_EQ(stats.captures, 0);
      EXPECT_EQ(stats.replays, 0);
    }
  }
}

// Log-probabilities on CUDA: a greedy and a seeded sampled request, each with logprobs and
// top_logprobs, give the CPU engine's tokens and log-probabilities (up to the first near tie,
// after which they are other prompts); their rows come to the host, so no step replays a decode
// graph, while the same greedy request without logprobs does.
TEST_P(EngineCudaTest, LogprobsMatchTheCpuAndSkipDecodeGraphs) {
  const Golden& g = golden(GetParam());
  SamplingParams greedy_lp = greedy(8);
  greedy_lp.logprobs = true;
  greedy_lp.top_logprobs = 4;
  SamplingParams sampled_lp = greedy_lp;
  sampled_lp.temperature = 0.7f;
  sampled_lp.seed = 7;
  const std::vector<Tokens> prompts = {g.b_prompt, prefix(g.a_prompt, 70)};
  const std::vector<SamplingParams> params = {greedy_lp, sampled_lp};
  const auto run_on = [&](Device device) {
    std::unique_ptr<Engine> engine = make_engine(model_on(g, device), test_options(device));
    std::vector<std::vector<TokenEvent>> events(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_TRUE(engine->add_request(prompts[i], params[i]).ok());
    while (!engine->idle())
      for (TokenEvent& e : engine->step()) {
        EXPECT_NE(e.reason, FinishReason::kError) << e.error;
        events[size_t(e.request)].push_back(std::move(e));
      }
    expect_pools_full(*engine);
    EXPECT_EQ(engine->graph_stats().replays, 0);
    return events;
  };
  const std::vector<std::vector<TokenEvent>> cpu = run_on(Device::cpu());
  const std::vector<std::vector<TokenEvent>> gpu = run_on(Device::cuda());
  // CUDA and CPU logits differ by summation order, ~1e-5 (kTieGap's note); a log-softmax moves by
  // at most twice the largest change, and a temperature of 0.7 scales it by 1 / 0.7.
  constexpr double kTolerance = 2e-4;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(str_cat("request ", i));
    ASSERT_EQ(cpu[i].size(), gpu[i].size());
    for (size_t t = 0; t < cpu[i].size(); ++t) {
      const TokenEvent &want = cpu[i][t], &got = gpu[i][t];
      ASSERT_TRUE(got.logprob.has_value());
      ASSERT_EQ(got.top_logprobs.size(), 4u);
      if (got.token != want.token) {
        // Greedy: only at a near tie of the two best (their log-probabilities within kTieGap);
        // sampled: a draw at a boundary. From here on the continuations are other prompts.
        if (params[i].temperature == 0.0f) {
          EXPECT_LT(std::abs(*want.logprob - *got.logprob), kTieGap + kTolerance) << "token " << t;
        }
        break;
      }
      EXPECT_NEAR(*got.logprob, *want.logprob, kTolerance) << "token " << t;
      for (size_t k = 0; k < 4; ++k)
        EXPECT_NEAR(got.top_logprobs[k].logprob, want.top_logprobs[k].logprob, kTolerance)
            << "token " << t << " rank " << k;
    }
  }
  // The same greedy request without logprobs replays graphs where the model allows them.
  std::unique_ptr<Engine> plain =
      make_engine(model_on(g, Device::cuda()), test_options(Device::cuda()));
  ASSERT_TRUE(plain->add_request(g.b_prompt, greedy(8)).ok());
  while (!plain->idle()) plain->step();
  if (DecodeGraphs::supports(g.model->config())) {
    EXPECT_GT(plain->graph_stats().replays, 0);
  }
}

// The prefix cache on the device: snapshots copied between device slots, partial pages copied,
// hits giving the CPU's greedy tokens and the log-probabilities of no cache; eviction with decode
// graphs replaying (no logprobs).
TEST_P(EngineCudaTest, PrefixCacheHitsGiveTheTokensOfNoCache) {
  expect_prefix_cache_hits(GetParam(), Device::cuda());
}

TEST_P(EngineCudaTest, PrefixCacheStatesInsideAChunkAreSnapshots) {
  expect_prefix_cache_boundary_snapshots(GetParam(), Device::cuda());
}

TEST_P(EngineCudaTest, PrefixCacheTierRoundTrips) {
  for (const TierSetup& setup : kTierSetups)
    expect_prefix_cache_tier_round_trip(GetParam(), Device::cuda(), setup);
}

TEST_P(EngineCudaTest, SpeculativeGreedyEqualsPlainDecoding) {
  for (const model::VerifyMode mode : {model::VerifyMode::kReplay, model::VerifyMode::kStepStates})
    for (const bool cache : {false, true}) {
      SCOPED_TRACE(str_cat(mode == model::VerifyMode::kReplay ? "replay" : "step states",
                           cache ? ", cache on" : ", cache off"));
      expect_speculative_greedy_equals_plain(GetParam(), Device::cuda(), mode, cache);
    }
  // Drafts of a draft model on the device (the model itself: its drafts stand).
  SCOPED_TRACE("the model itself as the draft model");
  expect_speculative_greedy_equals_plain(
      GetParam(), Device::cuda(), model::VerifyMode::kReplay, /*cache=*/true,
      {.draft = &model_on(golden(GetParam()), Device::cuda()), .expect_rejected = false});
}

TEST_P(EngineCudaTest, PrefixCacheEvictionKeepsTokensRight) {
  expect_prefix_cache_eviction(GetParam(), Device::cuda());
}

INSTANTIATE_TEST_SUITE_P(Golden, EngineCudaTest, ::testing::ValuesIn(golden_archs()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           return param.param;
                         });

// The MTP head drafting on the device (tests/data/golden/<arch>_mtp).
TEST(EngineCuda, MtpSpeculativeGreedyEqualsPlainDecoding) {
  HYLA_SKIP_WITHOUT_CUDA();
  for (const char* arch : {"qwen3_next", "qwen3_5"}) {
    SCOPED_TRACE(arch);
    Result<std::unique_ptr<model::Model>> with_head =
        model::load_model(std::string(HYLA_TEST_DATA_DIR) + "/golden/" + arch + "_mtp");
    ASSERT_TRUE(with_head.ok()) << with_head.status().message();
    Result<std::unique_ptr<model::Model>> moved = with_head.value()->to(Device::cuda());
    ASSERT_TRUE(moved.ok()) << moved.status().message();
    expect_speculative_greedy_equals_plain(
        arch, Device::cuda(), model::VerifyMode::kReplay, /*cache=*/true,
        {.expect_accepted = false, .expect_rejected = true, .mtp_model = moved.value().get()});
  }
}

TEST(EngineCuda, ModelOnTheHostIsRefused) {
  HYLA_SKIP_WITHOUT_CUDA();
  const Golden& g = golden(golden_archs().front());
  EXPECT_ERROR_CONTAINS(Engine::create(*g.model, test_options(Device::cuda())).status(),
                        "Engine: the model's weights are on cpu but the engine's device is cuda:0");
  ASSERT_EQ(model_on(g, Device::cuda()).device(), Device::cuda());
  EXPECT_ERROR_CONTAINS(Engine::create(model_on(g, Device::cuda()), test_options()).status(),
                        "Engine: the model's weights are on cuda:0 but the engine's device is cpu");
}

TEST(EngineCuda, PlanBeyondDeviceMemoryIsRefusedBeforeAllocating) {
  HYLA_SKIP_WITHOUT_CUDA();
  const Golden& g = golden(golden_archs().front());
  ASSERT_EQ(model_on(g, Device::cuda()).device(), Device::cuda());
  EngineOptions options = test_options(Device::cuda());
  options.memory_budget_bytes = int64_t{1} << 50;  // pools of hundreds of TiB
  const Status refused = Engine::create(model_on(g, Device::cuda()), options).status();
  EXPECT_EQ(refused.code(), ErrorCode::kOutOfMemory);
  EXPECT_ERROR_CONTAINS(refused, "(budget 1.0 PiB), but cuda:0 has ");
  EXPECT_ERROR_CONTAINS(refused, "(cudaMemGetInfo); lower the memory budget");
}

std::string demo_dir() {
  if (const char* env = std::getenv("HYLA_DEMO_MODEL"); env != nullptr && env[0] != '\0')
    return env;
  return std::string(HYLA_MODELS_DIR) + "/hyla-demo";
}

// The demo model (d_k = d_v = 64: the fused decode kernel, with the engine's arrival counters and
// workspace): all reference prompts in one batch on CUDA follow transformers' greedy tokens as the
// CPU engine does (DemoModelTest), and the CPU engine's tokens, each up to the first step whose
// reference top1-top2 gap is a near tie.
TEST(DemoModelCuda, GreedyContinuationsMatchTransformersAndTheCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const std::string dir = demo_dir();
  if (!std::filesystem::exists(std::filesystem::path(dir) / "reference.json"))
    GTEST_SKIP() << "no demo model with a reference.json at " << dir;
  Result<nlohmann::json> ref = model::read_json_file(dir + "/reference.json");
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  Result<std::unique_ptr<model::Model>> cpu_model = model::load_model(dir);
  ASSERT_TRUE(cpu_model.ok()) << cpu_model.status().message();
  Result<std::unique_ptr<model::Model>> moved = cpu_model.value()->to(Device::cuda());
  ASSERT_TRUE(moved.ok()) << moved.status().message();
  const model::Model& cuda_model = *moved.value();
  ASSERT_EQ(cuda_model.device(), Device::cuda());

  std::vector<Tokens> prompts;
  for (const nlohmann::json& p : (*ref)["prompts"])
    prompts.push_back(p.at("prompt_ids").get<Tokens>());
  SamplingParams params;  // greedy, no stop token: as the reference was made
  params.max_new_tokens = ref->at("max_new_tokens").get<int64_t>();
  EngineOptions options;  // f32 conv state, as transformers' cache
  options.conv_dtype = DType::kF32;
  Result<std::vector<Tokens>> on_cpu = generate(*cpu_model.value(), prompts, params, options);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status().message();
  options.device = Device::cuda();
  Result<std::vector<Tokens>> on_cuda = generate(cuda_model, prompts, params, options);
  ASSERT_TRUE(on_cuda.ok()) << on_cuda.status().message();
  // Speculative decoding on the demo model (d_k = d_v = 64): greedy verify steps replay CUDA
  // graphs; with per-token states the linear layers verify through the fused kernel (T = 1 + K)
  // and commit through gated_delta_rule_commit.
  std::vector<std::pair<std::string, std::vector<Tokens>>> speculative;
  for (const model::VerifyMode mode :
       {model::VerifyMode::kStepStates, model::VerifyMode::kReplay}) {
    EngineOptions spec = options;
    spec.speculative.drafter = SpeculativeOptions::Drafter::kNgram;
    spec.speculative.mode = mode;
    Result<std::vector<Tokens>> got = generate(cuda_model, prompts, params, spec);
    ASSERT_TRUE(got.ok()) << got.status().message();
    speculative.emplace_back(mode == model::VerifyMode::kStepStates ? "speculative (step states)"
                                                                    : "speculative (replay)",
                             std::move(got).value());
  }

  for (size_t i = 0; i < prompts.size(); ++i) {
    const nlohmann::json& p = (*ref)["prompts"][i];
    SCOPED_TRACE("prompt " + p.at("text").get<std::string>());
    const auto want = p.at("tokens").get<Tokens>();
    const auto gaps = p.at("top1_top2_gaps").get<std::vector<double>>();
    ASSERT_EQ(on_cuda.value()[i].size(), want.size());
    ASSERT_EQ(on_cpu.value()[i].size(), want.size());
    ASSERT_EQ(gaps.size(), want.size());
    // The reference's gaps describe its own path: the CPU's tokens are compared up to where they
    // leave it.
    size_t cpu_follows = 0;
    while (cpu_follows < want.size() && on_cpu.value()[i][cpu_follows] == want[cpu_follows])
      ++cpu_follows;
    const struct {
      const char* name;
      const Tokens& tokens;
      size_t steps;
    } others[] = {{"transformers", want, want.size()},
                  {"the CPU engine", on_cpu.value()[i], cpu_follows}};
    const auto expect_follows = [&](const std::string& name, const Tokens& got) {
      ASSERT_EQ(got.size(), want.size()) << name;
      for (const auto& other : others)
        for (size_t t = 0; t < other.steps; ++t) {
          if (got[t] == other.tokens[t]) continue;
          if (gaps[t] >= kTieGap)
            ADD_FAILURE() << "step " << t << ": " << name << " chose " << got[t] << ", "
                          << other.name << " " << other.tokens[t]
                          << " with a reference top1-top2 gap of " << gaps[t];
          else
            std::printf("note: prompt %zu: %s parts from %s at step %zu, a near tie (gap %.2g)\n",
                        i, name.c_str(), other.name, t, gaps[t]);
          break;
        }
    };
    expect_follows("CUDA", on_cuda.value()[i]);
    for (const auto& [name, tokens] : speculative) expect_follows("CUDA " + name, tokens[i]);
  }
}

}  // namespace
}  // namespace hyla::runtime
