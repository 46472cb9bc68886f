// The engine's prefix cache (EngineOptions::prefix_cache) on every golden architecture: a hit
// gives the tokens of the CPU's greedy_generate and the log-probabilities of an engine without
// the cache (within the batched-vs-alone bound), wherever it resumes: a chunk boundary, inside a
// chunk and a page, the token before the prompt's last, the end of an earlier turn, after
// evictions; and thousands of random requests under a small pool keep the books straight.
#include <gtest/gtest.h>

#include <random>

#include "engine_testing.h"

namespace hyla::runtime {
namespace {

using namespace engine_testing;

/// The golden reference's fp32 spread, times the batched-vs-alone factor of batch_logits_test
/// (a resumed request regroups the same sums as a batched one), times 2: log-softmax moves by
/// at most twice the largest change of its inputs.
testing::Tolerance logprob_tolerance(const std::string& arch) {
  const double spread = testing::reference_logits_spread(golden_root() + "/" + arch);
  return {.atol = 2 * 4 * spread,
          .rtol = 0,
          .why = "log-softmax of logits within 4x the reference's fp32 path-to-path spread"};
}

struct Outcome {
  Tokens tokens;
  std::vector<double> logprobs;  // of each token, then its 3 best alternatives' values
  int64_t cached = 0;
};

/// Runs `prompt` alone on `engine` (greedy, with log-probabilities).
Outcome run_one(Engine& engine, const Tokens& prompt, int64_t n) {
  SamplingParams params = greedy(n);
  params.logprobs = true;
  params.top_logprobs = 3;
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

EngineOptions cache_options(int64_t budget_tokens) {
  EngineOptions o = test_options();
  o.max_batch_tokens = budget_tokens;
  o.prefix_cache.enabled = true;
  return o;
}

class PrefixCacheTest : public ::testing::TestWithParam<std::string> {};

// Request after request on one engine with the cache, each against the same prompt on a fresh
// engine without it: same tokens (those of greedy_generate) and log-probabilities, and the hit
// where the cache should have one.
TEST_P(PrefixCacheTest, HitsGiveTheTokensAndLogprobsOfNoCache) {
  const Golden& g = golden(GetParam());
  const testing::Tolerance tolerance = logprob_tolerance(GetParam());
  const int64_t n = 6;
  // Step budget 64: the 150-token prompt leaves snapshots at its chunk ends 64 and 128, and at 149.
  std::unique_ptr<Engine> cached = make_engine(*g.model, cache_options(64));
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
    expect_cpu_greedy_tokens(g, c.prompt, hit.tokens, n, Device::cpu());
    std::unique_ptr<Engine> plain = make_engine(*g.model, test_options());
    const Outcome want = run_one(*plain, c.prompt, n);
    EXPECT_EQ(want.cached, 0);
    EXPECT_EQ(hit.tokens, want.tokens);
    if (hit.tokens != want.tokens) continue;
    ASSERT_EQ(hit.logprobs.size(), want.logprobs.size());
    for (size_t i = 0; i < hit.logprobs.size(); ++i)
      EXPECT_NEAR(hit.logprobs[i], want.logprobs[i], tolerance.atol)
          << "log-probability " << i << " (" << tolerance.why << ")";
  }
  const EngineStats s = cached->stats();
  EXPECT_EQ(s.cache_hits, int64_t(cases.size()));
  EXPECT_GT(s.cached_tokens, 0);
  EXPECT_EQ(s.running + s.waiting, 0);
  EXPECT_EQ(s.free_slots + s.cache_snapshots, cached->plan().state_slots);
  EXPECT_EQ(s.free_pages + s.cache_pages, cached->plan().kv_pages);
}

// A pool too small to keep everything: requests down one shared prefix with different tails evict
// earlier snapshots and KV, each still gives the right tokens, and the last prompt repeated hits
// at its last token (its snapshot is among the most recently used).
TEST_P(PrefixCacheTest, EvictionUnderASmallPoolKeepsTokensRight) {
  const Golden& g = golden(GetParam());
  EngineOptions options = cache_options(64);
  const int64_t n = 4;
  Result<MemorySizing> sizing =
      size_engine_memory(g.model->config(), options, {200 + n, 200 + n, 200 + n, 200 + n});
  ASSERT_TRUE(sizing.ok()) << sizing.status().message();
  options.memory_budget_bytes = sizing->budget_bytes;
  options.state_ratio = sizing->state_ratio;
  std::unique_ptr<Engine> engine = make_engine(*g.model, options);
  Tokens last;
  for (int i = 0; i < 8; ++i) {
    last = prefix(g.a_prompt, 100);
    last.insert(last.end(), g.b_prompt.begin() + i, g.b_prompt.begin() + i + 10);
    SCOPED_TRACE("tail " + std::to_string(i));
    const Outcome got = run_one(*engine, last, n);
    expect_cpu_greedy_tokens(g, last, got.tokens, n, Device::cpu());
  }
  EXPECT_GT(engine->stats().cache_evictions, 0);
  const Outcome again = run_one(*engine, last, n);
  EXPECT_EQ(again.cached, int64_t(last.size()) - 1);
  expect_cpu_greedy_tokens(g, last, again.tokens, n, Device::cpu());
}

INSTANTIATE_TEST_SUITE_P(Golden, PrefixCacheTest, ::testing::ValuesIn(golden_archs()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           return param.param;
                         });

// Thousands of requests with shared prefixes, random lengths and cancels, a small pool, many at
// once: the engine's and the tree's books hold after every step (no slot or page held twice, refs
// counted right, every leaf with a snapshot), every request ends, and afterwards every slot and
// page is either free or the cache's.
TEST(PrefixCache, RandomStressKeepsTheBooks) {
  const Golden& g = golden("qwen3_next");
  EngineOptions options = cache_options(128);
  // Four run at once; the pool holds ten, so the cache has slots and pages to work with, and too
  // few to keep everything.
  Result<MemorySizing> sizing =
      size_engine_memory(g.model->config(), options, std::vector<int64_t>(10, 160));
  options.max_running = 4;
  ASSERT_TRUE(sizing.ok()) << sizing.status().message();
  options.memory_budget_bytes = sizing->budget_bytes;
  options.state_ratio = sizing->state_ratio;
  options.prefix_cache.decode_interval = 8;  // snapshots while decoding too
  std::unique_ptr<Engine> engine = make_engine(*g.model, options);
  std::mt19937 rng(424242);
  const int32_t V = int32_t(g.model->config().vocab_size);
  std::vector<Tokens> stems;
  for (int i = 0; i < 6; ++i) {
    Tokens t(size_t(20 + rng() % 100));
    for (int32_t& x : t) x = int32_t(rng() % unsigned(V));
    stems.push_back(t);
  }
  int64_t added = 0, ended = 0;
  std::vector<RequestId> live;
  for (int step = 0; added < 1500 || !engine->idle(); ++step) {
    ASSERT_LT(step, 200000) << "no progress";
    while (added < 1500 && live.size() < 12) {
      Tokens p = stems[rng() % stems.size()];
      p.resize(size_t(1 + rng() % p.size()));
      for (auto extra = uint32_t(rng() % 8); extra > 0; --extra)
        p.push_back(int32_t(rng() % unsigned(V)));
      Result<RequestId> id = engine->add_request(p, greedy(1 + int64_t(rng() % 12)));
      ASSERT_TRUE(id.ok()) << id.status().message();
      live.push_back(id.value());
      ++added;
    }
    if (!live.empty() && rng() % 10 == 0) {
      const size_t i = rng() % live.size();
      ASSERT_TRUE(engine->cancel(live[i]).ok());
      live.erase(live.begin() + std::ptrdiff_t(i));
      ++ended;
    }
    for (const TokenEvent& e : engine->step()) {
      ASSERT_NE(e.reason, FinishReason::kError) << e.error;
      if (!e.finished || e.reason == FinishReason::kCancelled) continue;
      ++ended;
      live.erase(std::find(live.begin(), live.end(), e.request));
    }
    const Status ok = engine->check_invariants();
    ASSERT_TRUE(ok.ok()) << "step " << step << ": " << ok.message();
  }
  EXPECT_EQ(ended, 1500);
  const EngineStats s = engine->stats();
  EXPECT_GT(s.cache_hits, 100);
  EXPECT_GT(s.cache_evictions, 0);
  EXPECT_EQ(s.free_slots + s.cache_snapshots, engine->plan().state_slots);
  EXPECT_EQ(s.free_pages + s.cache_pages, engine->plan().kv_pages);
}

}  // namespace
}  // namespace hyla::runtime
