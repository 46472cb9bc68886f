// Prefix-cache checks shared by the CPU (runtime/prefix_cache_test.cpp) and CUDA
// (runtime/cuda/engine_cuda_test.cpp) engine tests, each taking the device the engine runs on.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine_testing.h"

namespace hyla::runtime::engine_testing {

/// The golden reference's fp32 spread, times the batched-vs-alone factor of batch_logits_test
/// (a resumed request regroups the same sums as a batched one), times 2: log-softmax moves by
/// at most twice the largest change of its inputs. On CUDA at least the 2e-4 of the CUDA-vs-CPU
/// logprob check (engine_cuda_test.cpp): its kernels regroup more than the CPU's.
inline testing::Tolerance logprob_tolerance(const std::string& arch, Device device) {
  const double spread = testing::reference_logits_spread(golden_root() + "/" + arch);
  return {.atol = device.is_cpu() ? 2 * 4 * spread : std::max(2 * 4 * spread, 2e-4),
          .rtol = 0,
          .why = "log-softmax of logits within 4x the reference's fp32 path-to-path spread"};
}

struct Outcome {
  Tokens tokens;
  std::vector<double> logprobs;  // of each token, then its 3 best alternatives' values
  int64_t cached = 0;
};

/// Runs `prompt` alone on `engine` (greedy, with log-probabilities).
inline Outcome run_one(Engine& engine, const Tokens& prompt, int64_t n, bool logprobs = true) {
  SamplingParams params = greedy(n);
  params.logprobs = logprobs;
  params.top_logprobs = logprobs ? 3 : 0;
  Result<RequestId> id = engine.add_request(prompt, params);
  EXPECT_TRUE(id.ok()) << id.status().message();
  Outcome out;
  if (!id.ok()) return out;
  while (!engine.idle()) {
    for (const TokenEvent& e : engine.step()) {
      EXPECT_NE(e.reason, FinishReason::kError) << e.error;
      out.cached = e.cached_tokens;
      if (e.token < 0) continue;
      out.tokens.push_back(e.token);
      out.logprobs.push_back(e.logprob.value_or(NAN));
      for (const TokenLogprob& t : e.top_logprobs) out.logprobs.push_back(t.logprob);
    }
    const Status ok = engine.check_invariants();
    EXPECT_TRUE(ok.ok()) << ok.message();
  }
  return out;
}

inline EngineOptions cache_options(int64_t budget_tokens, Device device = Device::cpu()) {
  EngineOptions o = test_options(device);
  o.max_batch_tokens = budget_tokens;
  o.prefix_cache.enabled = true;
  return o;
}

/// `hit` (greedy tokens and log-probabilities of `prompt` through the cache) against a fresh
/// engine without it on `device`: its tokens are the CPU's greedy tokens and the no-cache
/// engine's, and the log-probabilities agree within `tolerance`.
inline void expect_as_without_cache(const Golden& g, Device device, const Tokens& prompt,
                                    const Outcome& hit, int64_t n,
                                    const testing::Tolerance& tolerance) {
  expect_cpu_greedy_tokens(g, prompt, hit.tokens, n, device);
  std::unique_ptr<Engine> plain = make_engine(model_on(g, device), test_options(device));
  const Outcome want = run_one(*plain, prompt, n);
  EXPECT_EQ(want.cached, 0);
  EXPECT_EQ(hit.tokens, want.tokens);
  if (hit.tokens != want.tokens) return;
  ASSERT_EQ(hit.logprobs.size(), want.logprobs.size());
  for (size_t i = 0; i < hit.logprobs.size(); ++i)
    EXPECT_NEAR(hit.logprobs[i], want.logprobs[i], tolerance.atol)
        << "log-probability " << i << " (" << tolerance.why << ")";
}

// Request after request on one engine with the cache, each against the same prompt on a fresh
// engine without it: same tokens (those of greedy_generate) and log-probabilities, and the hit
// where the cache should have one.
inline void expect_prefix_cache_hits(const std::string& arch, Device device) {
  const Golden& g = golden(arch);
  const testing::Tolerance tolerance = logprob_tolerance(arch, device);
  const int64_t n = 6;
  // Step budget 64: the 150-token prompt leaves snapshots at its chunk ends 64 and 128, and at 149.
  std::unique_ptr<Engine> cached = make_engine(model_on(g, device), cache_options(64, device));
  const Tokens p150 = prefix(g.a_prompt, 150);
  Tokens other = g.b_prompt;  // a different tail
  struct Case {
    std::string name;
    Tokens prompt;
    int64_t want_cached;
  };
  const Outcome first = run_one(*cached, p150, n);
  Tokens turn2 = p150;  // the first answer and a new question: resumes at the answer's end
  turn2.insert(turn2.end(), first.tokens.begin(), first.tokens.end());
  turn2.insert(turn2.end(), other.begin(), other.begin() + 9);
  Tokens branch_a = prefix(p150, 100), branch_b = prefix(p150, 100);
  branch_a.insert(branch_a.end(), other.begin(), other.begin() + 20);
  branch_b.insert(branch_b.end(), other.begin() + 20, other.begin() + 30);
  Tokens last_differs = prefix(p150, 149);
  last_differs.push_back(other[0]);
  const std::vector<Case> cases = {
      {"identical prompt", p150, 149},
      {"chunk boundary", prefix(p150, 70), 64},
      {"the token before the last", last_differs, 149},
      {"next turn", turn2, int64_t(p150.size() + first.tokens.size()) - 1},
      // The chunk-boundary case left its own snapshot at 69 (the token before its last).
      {"branch inside a chunk", branch_a, 69},
      {"at that branch point, inside a page", branch_b, 100},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Outcome hit = run_one(*cached, c.prompt, n);
    EXPECT_EQ(hit.cached, c.want_cached);
    expect_as_without_cache(g, device, c.prompt, hit, n, tolerance);
  }
  const EngineStats s = cached->stats();
  EXPECT_EQ(s.cache.hits, int64_t(cases.size()));
  EXPECT_GT(s.cache.cached_tokens, 0);
  EXPECT_EQ(s.running + s.waiting, 0);
  EXPECT_EQ(s.free_slots + s.cache.snapshots, cached->plan().state_slots);
  EXPECT_EQ(s.free_pages + s.cache.pages, cached->plan().kv_pages);
}

// A pool too small to keep everything: requests down one shared prefix with different tails evict
// earlier snapshots and KV, each still gives the right tokens, and the last prompt repeated hits
// at its last token (its snapshot is among the most recently used).
inline void expect_prefix_cache_eviction(const std::string& arch, Device device) {
  const Golden& g = golden(arch);
  EngineOptions options = cache_options(64, device);
  const int64_t n = 4;
  Result<MemorySizing> sizing =
      size_engine_memory(g.model->config(), options, {200 + n, 200 + n, 200 + n, 200 + n});
  ASSERT_TRUE(sizing.ok()) << sizing.status().message();
  options.memory_budget_bytes = sizing->budget_bytes;
  options.state_ratio = sizing->state_ratio;
  std::unique_ptr<Engine> engine = make_engine(model_on(g, device), options);
  Tokens last;
  for (int i = 0; i < 8; ++i) {
    last = prefix(g.a_prompt, 100);
    last.insert(last.end(), g.b_prompt.begin() + i, g.b_prompt.begin() + i + 10);
    SCOPED_TRACE("tail " + std::to_string(i));
    const Outcome got = run_one(*engine, last, n, /*logprobs=*/false);
    expect_cpu_greedy_tokens(g, last, got.tokens, n, device);
  }
  EXPECT_GT(engine->stats().cache.evictions, 0);
  const Outcome again = run_one(*engine, last, n, /*logprobs=*/false);
  EXPECT_EQ(again.cached, int64_t(last.size()) - 1);
  expect_cpu_greedy_tokens(g, last, again.tokens, n, device);
}

// One 150-token prompt prefilled in one chunk (step budget 512) leaves the states after 64 and 128
// tokens (the chunk kernel's boundary states, written to snapshot slots during the step); prompts
// sharing 70 and 140 of its tokens then resume there, with the tokens and log-probabilities of no
// cache.
inline void expect_prefix_cache_boundary_snapshots(const std::string& arch, Device device) {
  const Golden& g = golden(arch);
  const testing::Tolerance tolerance = logprob_tolerance(arch, device);
  const int64_t n = 5;
  std::unique_ptr<Engine> cached = make_engine(model_on(g, device), cache_options(512, device));
  const Tokens p150 = prefix(g.a_prompt, 150);
  const Outcome first = run_one(*cached, p150, n);
  EXPECT_EQ(first.cached, 0);
  for (const auto& [length, want_cached] : {std::pair<size_t, int64_t>{70, 64}, {140, 128}}) {
    Tokens prompt = prefix(p150, length);
    prompt.push_back(g.b_prompt[0]);  // leaves the cached path after `length` tokens
    SCOPED_TRACE("sharing " + std::to_string(length) + " tokens");
    const Outcome hit = run_one(*cached, prompt, n);
    EXPECT_EQ(hit.cached, want_cached);
    expect_as_without_cache(g, device, prompt, hit, n, tolerance);
  }
}

/// Where snapshots go when they leave the state pool (PrefixCacheOptions), for the tier tests.
struct TierSetup {
  const char* name;
  bool int8 = false;
  int64_t device_tier_slots = 0;  ///< entries the device tier holds (0: none)
  int64_t host_bytes = 0;
  bool hit_from_host = false;  ///< where the first prompt's snapshot ends up
};

inline const TierSetup kTierSetups[] = {
    {.name = "host", .host_bytes = int64_t{64} << 20, .hit_from_host = true},
    {.name = "int8 host", .int8 = true, .host_bytes = int64_t{64} << 20, .hit_from_host = true},
    {.name = "int8 device", .int8 = true, .device_tier_slots = 64},
    // one device entry: later snapshots push the first prompt's on to the host
    {.name = "int8 device then host",
     .int8 = true,
     .device_tier_slots = 1,
     .host_bytes = int64_t{64} << 20,
     .hit_from_host = true},
};

/// An int8 round trip moves each SSM state element by up to max |row| / 254 (kernels/int8_rows.h),
/// which the rest of the prompt's last token and the decode steps carry into the logits; the
/// quantisation is deterministic, so the change is this model's, not the CPU's. Measured on the
/// golden models (CPU, every tier setup): up to 0.066 (kimi_k3), 0.015 (qwen3_5), 0.014
/// (qwen3_5_moe), 0.012 (qwen3_next), 0.018 (kimi_linear) on the best log-probabilities of the
/// steps before the tokens part (docs/perf-history.md "Prefix cache"). Twice the largest.
inline testing::Tolerance int8_logprob_tolerance() {
  return {.atol = 0.14,
          .rtol = 0,
          .why = "int8 SSM snapshot: twice the golden models' largest measured change"};
}

/// `hit` resumed from an int8 snapshot against a fresh engine without the cache: step by step, the
/// best log-probabilities (each the k-th largest, which moves by no more than the largest change of
/// any) within `tolerance`, while the tokens agree; where they part, the engine without the cache
/// had a near tie there (its two best within 2 atol), which a change within atol can flip.
inline void expect_near_without_cache(const Golden& g, Device device, const Tokens& prompt,
                                      const Outcome& hit, int64_t n,
                                      const testing::Tolerance& tolerance) {
  std::unique_ptr<Engine> plain = make_engine(model_on(g, device), test_options(device));
  const Outcome want = run_one(*plain, prompt, n);
  ASSERT_EQ(hit.tokens.size(), want.tokens.size());
  ASSERT_EQ(hit.logprobs.size(), want.logprobs.size());
  const size_t per_step = hit.logprobs.size() / hit.tokens.size();  // chosen + the 3 best
  double worst = 0;
  for (size_t k = 0; k < hit.tokens.size(); ++k) {
    SCOPED_TRACE(str_cat("step ", k));
    for (size_t j = 1; j < per_step; ++j) {
      const double got = hit.logprobs[k * per_step + j], ref = want.logprobs[k * per_step + j];
      EXPECT_NEAR(got, ref, tolerance.atol)
          << "best log-probability " << j << " (" << tolerance.why << ")";
      worst = std::max(worst, std::fabs(got - ref));
    }
    if (hit.tokens[k] != want.tokens[k]) {
      const double margin = want.logprobs[k * per_step + 1] - want.logprobs[k * per_step + 2];
      EXPECT_LE(margin, 2 * tolerance.atol)
          << "the tokens part (" << hit.tokens[k] << " vs " << want.tokens[k]
          << ") where the engine without the cache had no near tie";
      break;
    }
  }
  // How the figures above were measured:
  if (std::getenv("HYLA_PRINT_LOGPROB_DIFF")) std::printf("int8 largest change %.3g\n", worst);
}

// A state pool of about two slots with tiers beyond it: while other prompts run, the snapshots of
// the first move out of the pool instead of being dropped; a prompt sharing all but its last token
// with it then resumes from the tier's copy, with the tokens of no cache and its log-probabilities
// (within the int8 bound for int8 snapshots).
inline void expect_prefix_cache_tier_round_trip(const std::string& arch, Device device,
                                                const TierSetup& setup) {
  SCOPED_TRACE(setup.name);
  const Golden& g = golden(arch);
  const testing::Tolerance tolerance =
      setup.int8 ? int8_logprob_tolerance() : logprob_tolerance(arch, device);
  const int64_t n = 4;
  EngineOptions options = cache_options(64, device);
  Result<MemorySizing> sizing = size_engine_memory(g.model->config(), options, {200 + n, 200 + n});
  ASSERT_TRUE(sizing.ok()) << sizing.status().message();
  options.memory_budget_bytes = sizing->budget_bytes;
  options.state_ratio = sizing->state_ratio;
  options.prefix_cache.int8_snapshots = setup.int8;
  options.prefix_cache.host_bytes = setup.host_bytes;
  if (setup.device_tier_slots > 0) {
    Result<StatePool> pool =
        StatePool::create(g.model->config(), 1, memory_plan_options(options).state);
    ASSERT_TRUE(pool.ok()) << pool.status().message();
    Result<SnapshotTiers> probe = SnapshotTiers::create(*pool, SnapshotFormat::kInt8, 1 << 30, 0);
    ASSERT_TRUE(probe.ok()) << probe.status().message();
    options.prefix_cache.device_tier_bytes = setup.device_tier_slots * probe->entry_bytes();
  }
  std::unique_ptr<Engine> cached = make_engine(model_on(g, device), options);
  const Tokens p150 = prefix(g.a_prompt, 150);
  run_one(*cached, p150, n);
  for (int i = 0; i < 3; ++i) {  // other prompts: their snapshots want the slots
    Tokens other(g.b_prompt.begin() + i, g.b_prompt.end());
    run_one(*cached, other, n);
  }
  const EngineStats before = cached->stats();
  EXPECT_EQ(before.cache.host_moves > 0, setup.host_bytes > 0);
  EXPECT_EQ(before.cache.device_tier_moves > 0, setup.device_tier_slots > 0);
  Tokens prompt = prefix(p150, 149);
  prompt.push_back(g.b_prompt[0]);
  const Outcome hit = run_one(*cached, prompt, n);
  EXPECT_EQ(hit.cached, 149);
  const EngineStats s = cached->stats();
  EXPECT_EQ(s.cache.host_hits, setup.hit_from_host ? 1 : 0);
  EXPECT_EQ(s.cache.device_tier_hits, setup.hit_from_host ? 0 : 1);
  if (setup.int8) {
    expect_near_without_cache(g, device, prompt, hit, n, tolerance);
  } else {
    expect_as_without_cache(g, device, prompt, hit, n, tolerance);
  }
  EXPECT_EQ(s.free_slots + s.cache.snapshots, cached->plan().state_slots);
  EXPECT_EQ(s.cache.host_snapshots > 0, setup.host_bytes > 0);
  if (setup.device_tier_slots > 0) {
    EXPECT_EQ(s.cache.device_tier_snapshots,
              std::min<int64_t>(setup.device_tier_slots, s.cache.device_tier_moves));
  }
}

}  // namespace hyla::runtime::engine_testing
