// The engine's rank loop (EngineOptions::tensor_parallel, runtime/engine_ranks.cpp) on the CPU:
// N engines, one per rank and thread, each on its slice of the model with its own pools, the
// ranks' sums added by LocalGroup. Greedy tokens through N = 2 (and 4 where the heads allow)
// equal HF's reference tokens on every golden architecture; a batch under a small pool (chunked
// prefill, preemption, the prefix cache) and n-gram speculation give the one-rank tokens with every
// rank's bookkeeping equal; sampled tokens and log-probabilities agree across ranks; N = 2 and 4 on
// the Qwen configs widened to 4 key heads give the whole model's greedy tokens. A rank that fails
// (rank 0 or another) ends every request with its error and releases the others at once; ranks
// whose results part end the group; bad counts, drafters and devices are refused by name.
#include <gtest/gtest.h>

#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <limits>
#include <set>
#include <thread>

#include "model/tensor_parallel.h"
#include "model/tensor_parallel_testing.h"
#include "runtime/engine_testing.h"
#include "runtime/tp/local_group.h"
#include "testing.h"

namespace hyla::runtime {
namespace {

using namespace engine_testing;  // NOLINT: the shared helpers are this file's vocabulary

EngineOptions ranks_options(int ranks) {
  EngineOptions o = test_options();
  o.tensor_parallel.ranks = ranks;
  return o;
}

/// `f()` on another thread; a call still running after a minute is a hang (a rank waiting for
/// one that will not come): the test binary stops with a message instead of hanging CI.
template <typename F>
auto within_a_minute(const char* what, F&& f) {
  auto done = std::async(std::launch::async, std::forward<F>(f));
  if (done.wait_for(std::chrono::minutes(1)) == std::future_status::timeout) {
    std::fprintf(stderr, "%s did not return within a minute: a rank hangs\n", what);
    std::abort();
  }
  return done.get();
}

// An empty list (a wrong $HYLA_GOLDEN_DIR) must fail, not pass by running nothing.
TEST(TensorParallelEngineGolden, HasArchitectures) {
  EXPECT_TRUE(testing::expect_golden_archs(golden_root()));
}

class TensorParallelEngineTest : public ::testing::TestWithParam<std::string> {};

// The goldens' greedy steps have top1-top2 gaps >= 2e-3 (kTieGap); slicing moves the logits by
// < 1e-4 (tensor_parallel_group_test.cpp), so every token must be HF's.
TEST_P(TensorParallelEngineTest, GreedyTokensOfTheReference) {
  const Golden& g = golden(GetParam());
  for (const int ranks : {2, 4}) {
    if (!model::shard_config(g.model->config(), 0, ranks).ok()) continue;  // Qwen: H = 2
    SCOPED_TRACE(str_cat(ranks, " ranks"));
    Result<std::vector<Tokens>> out =
        generate(*g.model, {g.a_prompt, g.b_prompt}, greedy(int64_t(g.a_tokens.size())),
                 ranks_options(ranks));
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(out.value()[0], g.a_tokens);
    EXPECT_EQ(out.value()[1], g.b_tokens);
  }
}

/// Five prompts of 50-112 tokens (two share a prefix), 16 greedy tokens each, all at once, then
/// again one at a time: chunked prefill of up to 128 tokens per step, a pool of 8 slots and 5
/// pages per rank (requests end on 2-3 pages each, so the first round preempts and recomputes),
/// the prefix cache on (the second round hits what it kept).
/// Every rank's engine is checked after each step (check_invariants covers the other ranks and
/// that their counts equal rank 0's).
std::vector<Tokens> run_small_pool(const model::Model& model, int ranks, EngineStats* stats) {
  const model::ModelConfig rank = model::shard_config(model.config(), 0, ranks).value();
  EngineOptions options = ranks_options(ranks);
  options.max_batch_tokens = 128;
  options.prefix_cache.enabled = true;
  StatePoolOptions state{.conv_dtype = options.conv_dtype, .ssm_dtype = options.state_dtype};
  KvPagePoolOptions kv{.page_size = options.page_size, .dtype = options.kv_dtype};
  const double slot = double(StatePool::bytes_per_slot(rank, state));
  const double page = double(KvPagePool::bytes_per_token(rank, kv) * options.page_size);
  const double slack = 0.25 * std::min(slot, page);
  options.memory_budget_bytes =
      int64_t(8 * slot + 5 * page + 2 * slack) +
      model::attn_res_scratch_bytes_per_token(rank) * options.max_batch_tokens;
  options.state_ratio = (8 * slot + slack) / (5 * page + slack);
  std::unique_ptr<Engine> engine = make_engine(model, options);
  EXPECT_EQ(engine->plan().kv_pages, 5) << engine->plan().summary();
  const Tokens& a = golden("qwen3_5").a_prompt;  // only ids: every golden has vocab 512
  const auto slice = [&](size_t begin, size_t end) {
    return Tokens(a.begin() + long(begin), a.begin() + long(end));
  };
  const std::vector<Tokens> prompts = {slice(0, 70), slice(10, 60), slice(20, 120), slice(0, 64),
                                       slice(30, 142)};
  std::vector<Tokens> out(2 * prompts.size());
  std::map<RequestId, size_t> index;
  const auto drain = [&] {
    while (!engine->idle()) {
      for (const TokenEvent& e : engine->step()) {
        EXPECT_NE(e.reason, FinishReason::kError) << e.error;
        if (e.token >= 0) out[index.at(e.request)].push_back(e.token);
      }
      const Status checked = engine->check_invariants();
      EXPECT_TRUE(checked.ok()) << checked.message();
      if (!checked.ok()) return false;
    }
    return true;
  };
  // All at once, then one at a time, last first (what the cache kept of the first round).
  for (size_t round = 0; round < 2; ++round) {
    for (size_t k = 0; k < prompts.size(); ++k) {
      const size_t i = round == 0 ? k : prompts.size() - 1 - k;
      Result<RequestId> id = engine->add_request(prompts[i], greedy(16));
      EXPECT_TRUE(id.ok()) << id.status().message();
      if (id.ok()) index[id.value()] = round * prompts.size() + i;
      if (round == 1 && !drain()) return out;
    }
    if (!drain()) return out;
  }
  *stats = engine->stats();
  return out;
}

// The whole model's greedy steps on these prompts have top1-top2 gaps >= 1.3e-3 (qwen3_next; the
// others >= 4.6e-3), over 10x what slicing moves the logits: the tokens must be the same.
TEST_P(TensorParallelEngineTest, SmallPoolWithCacheEqualsOneRank) {
  const Golden& g = golden(GetParam());
  EngineStats one_stats, two_stats;
  const std::vector<Tokens> one = run_small_pool(*g.model, 1, &one_stats);
  const std::vector<Tokens> two = run_small_pool(*g.model, 2, &two_stats);
  EXPECT_EQ(two, one);
  EXPECT_GT(two_stats.preemptions, 0);
  EXPECT_GT(two_stats.cache.hits, 0);
  std::printf("%s, 2 ranks: %lld preemptions, %lld cache hits (one rank: %lld, %lld)\n",
              GetParam().c_str(), (long long)two_stats.preemptions, (long long)two_stats.cache.hits,
              (long long)one_stats.preemptions, (long long)one_stats.cache.hits);
}

// Verify steps (1 + K rows per request) run through the all-reduce like any other step; each
// rank commits its own slice of the state. Greedy speculation keeps the reference's tokens.
TEST_P(TensorParallelEngineTest, NgramSpeculationKeepsTheReference) {
  const Golden& g = golden(GetParam());
  EngineOptions options = ranks_options(2);
  options.speculative.drafter = SpeculativeOptions::Drafter::kNgram;  // min_ngram 1: any match
  std::unique_ptr<Engine> engine = make_engine(*g.model, options);
  const int64_t n = int64_t(g.a_tokens.size());
  const std::vector<Tokens> out =
      run(*engine, {g.a_prompt, g.b_prompt}, greedy(n), /*one_by_one=*/false);
  EXPECT_EQ(out[0], g.a_tokens);
  EXPECT_EQ(out[1], g.b_tokens);
  EXPECT_GT(engine->stats().spec.steps, 0);
  ASSERT_OK(engine->check_invariants());
}

// Sampling runs on every rank with the request's own Sampler over that rank's logits: the same
// bits on every rank, so the same draws. Rank 0 compares every step's events (tokens and
// log-probabilities) across the ranks, so a rank that drew otherwise would end the run with
// errors; the run is reproducible.
TEST_P(TensorParallelEngineTest, SampledTokensAndLogprobsAgreeAcrossRanks) {
  const Golden& g = golden(GetParam());
  SamplingParams params = greedy(12);
  params.temperature = 1.0f;
  params.top_k = 50;
  params.seed = 99;
  params.logprobs = true;
  params.top_logprobs = 3;
  const std::vector<Tokens> prompts = mixed_prompts(g);
  std::vector<Tokens> runs[2];
  for (std::vector<Tokens>& out : runs) {
    std::unique_ptr<Engine> engine = make_engine(*g.model, ranks_options(2));
    out = run(*engine, prompts, params, /*one_by_one=*/false);
    ASSERT_OK(engine->check_invariants());
    EXPECT_EQ(engine->stats().tokens_generated, 12 * int64_t(prompts.size()));
  }
  EXPECT_EQ(runs[0], runs[1]);
}

INSTANTIATE_TEST_SUITE_P(Golden, TensorParallelEngineTest, ::testing::ValuesIn(golden_archs()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           return param.param;
                         });

/// `got` against the whole model's greedy tokens of `prompt`: equal up to the first step whose
/// top1-top2 gap is below kTieGap (random weights have no drawn margins; slicing moves logits by
/// < 1e-4, so only such a near tie may go the other way).
void expect_whole_greedy_tokens(const model::Model& whole, const Tokens& prompt, const Tokens& got,
                                int64_t n) {
  Tensor logits;
  Result<Tokens> want = model::greedy_generate(whole, prompt, n, &logits);
  ASSERT_TRUE(want.ok()) << want.status().message();
  ASSERT_EQ(got.size(), want->size());
  const int64_t V = logits.size(1);
  for (size_t t = 0; t < got.size(); ++t) {
    if (got[t] == want.value()[t]) continue;
    const float* row = logits.host<float>() + int64_t(t) * V;
    std::vector<float> sorted(row, row + V);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    const double gap = double(sorted[0]) - double(sorted[1]);
    EXPECT_LT(gap, kTieGap) << "step " << t << ": " << got[t] << " instead of " << want.value()[t]
                            << " with a top1-top2 gap of " << gap;
    std::printf("note: parts from the whole model at step %zu, a near tie (gap %.2g)\n", t, gap);
    return;
  }
}

// Qwen's goldens have H = 2 key heads; widened to H = 4, HV = 8 with random weights, the engine
// runs them over 4 ranks (and 2).
TEST(TensorParallelEngineWide, FourRanksGiveTheWholeModelsTokens) {
  for (const char* arch : {"qwen3_next", "qwen3_5", "qwen3_5_moe"}) {
    SCOPED_TRACE(arch);
    const std::unique_ptr<model::Model> wide =
        model::widened_random_model(golden(arch).model->config(), 4, 8, 23);
    const Golden& g = golden(arch);
    const std::vector<Tokens> prompts = {prefix(g.a_prompt, 70), g.b_prompt};
    for (const int ranks : {2, 4}) {
      SCOPED_TRACE(str_cat(ranks, " ranks"));
      Result<std::vector<Tokens>> out = generate(*wide, prompts, greedy(12), ranks_options(ranks));
      ASSERT_TRUE(out.ok()) << out.status().message();
      for (size_t p = 0; p < prompts.size(); ++p)
        expect_whole_greedy_tokens(*wide, prompts[p], out.value()[p], 12);
    }
  }
}

/// LocalGroup with a fault on rank `faulty`: its sum number `at` (from 1) returns an error
/// without taking part (kFail), or every sum whose number is a multiple of `at` is overwritten
/// with NaN after the real sum (kPoison: only that rank's result goes wrong). The ranks' fail()
/// calls are counted.
class FaultyGroup final : public RankGroup {
 public:
  enum class Fault { kFail, kPoison };
  FaultyGroup(std::unique_ptr<LocalGroup> inner, int faulty, int64_t at, Fault fault)
      : inner_(std::move(inner)) {
    for (int r = 0; r < inner_->ranks(); ++r)
      members_.push_back(std::make_unique<Member>(inner_->rank(r), r == faulty, at, fault));
  }
  int ranks() const override { return inner_->ranks(); }
  model::AllReduce& rank(int r) override { return *members_[size_t(r)]; }
  void fail(int r) override {
    ++fails;
    inner_->fail(r);
  }
  std::atomic<int> fails{0};

 private:
  struct Member final : model::AllReduce {
    Member(model::AllReduce& inner_, bool faulty_, int64_t at_, Fault fault_)
        : inner(inner_), faulty(faulty_), at(at_), fault(fault_) {}
    Status sum(const TensorView& x) override {
      ++calls;
      if (faulty && fault == Fault::kFail && calls == at)
        return internal_error("injected failure of this rank's sum ", calls);
      HYLA_RETURN_IF_ERROR(inner.sum(x));
      if (faulty && fault == Fault::kPoison && calls % at == 0) {
        float* v = static_cast<float*>(x.raw());
        for (int64_t i = 0; i < x.numel(); ++i) v[i] = std::numeric_limits<float>::quiet_NaN();
      }
      return ok_status();
    }
    model::AllReduce& inner;
    bool faulty;
    int64_t at;
    Fault fault;
    int64_t calls = 0;
  };
  std::unique_ptr<LocalGroup> inner_;
  std::vector<std::unique_ptr<Member>> members_;
};

/// The options of 2 ranks whose group is a FaultyGroup (left in *group).
EngineOptions faulty_options(int faulty, int64_t at, FaultyGroup::Fault fault,
                             FaultyGroup** group) {
  EngineOptions options = ranks_options(2);
  options.max_running = 1;  // the second request waits: the failure must end it too
  options.tensor_parallel.group =
      [=](const std::vector<Device>& devices) -> Result<std::unique_ptr<RankGroup>> {
    EXPECT_EQ(devices, std::vector<Device>(2, Device::cpu()));
    HYLA_ASSIGN_OR_RETURN(std::unique_ptr<LocalGroup> local, LocalGroup::create(2));
    auto made = std::make_unique<FaultyGroup>(std::move(local), faulty, at, fault);
    *group = made.get();
    return std::unique_ptr<RankGroup>(std::move(made));
  };
  return options;
}

// forward_batch sums each layer's mixer and MLP output: 2 sums per layer and step.
int64_t sums_per_step(const model::Model& m) { return 2 * m.config().num_layers; }

TEST(TensorParallelEngineFailure, FailingRankEndsEveryRequestAndReleasesTheOthers) {
  const Golden& g = golden("qwen3_5");
  for (const int faulty : {1, 0}) {  // rank 0 runs on the caller's thread, rank 1 on its own
    SCOPED_TRACE(str_cat("failing rank ", faulty));
    FaultyGroup* group = nullptr;
    // The first sum of step 3 (prefill, decode, then this decode).
    std::unique_ptr<Engine> engine = make_engine(
        *g.model,
        faulty_options(faulty, 2 * sums_per_step(*g.model) + 1, FaultyGroup::Fault::kFail, &group));
    ASSERT_NE(group, nullptr);
    const RequestId running = engine->add_request(g.b_prompt, greedy(8)).value();
    const RequestId waiting = engine->add_request(g.a_prompt, greedy(8)).value();
    for (int s = 0; s < 2; ++s) {
      const std::vector<TokenEvent> events =
          within_a_minute("step", [&] { return engine->step(); });
      ASSERT_EQ(events.size(), 1u);
      EXPECT_EQ(events[0].token, g.b_tokens[size_t(s)]);
    }
    const std::vector<TokenEvent> events = within_a_minute("step", [&] { return engine->step(); });
    ASSERT_EQ(events.size(), 2u);
    const std::string cause = str_cat("tensor-parallel rank ", faulty, " of 2 failed in step 3");
    for (const TokenEvent& e : events) {
      EXPECT_TRUE(e.finished);
      EXPECT_EQ(e.reason, FinishReason::kError);
    }
    // The step's request names the failing rank's own error, not the abort it caused.
    EXPECT_EQ(events[0].request, running);
    EXPECT_NE(events[0].error.find("injected failure of this rank's sum 17"), std::string::npos)
        << events[0].error;
    EXPECT_EQ(events[1].request, waiting);
    EXPECT_NE(events[1].error.find(cause), std::string::npos) << events[1].error;
    EXPECT_NE(events[1].error.find("injected failure"), std::string::npos) << events[1].error;
    EXPECT_GE(group->fails.load(), 1);
    EXPECT_TRUE(engine->idle());
    ASSERT_OK(engine->check_invariants());
    EXPECT_ERROR_CONTAINS(engine->add_request(g.b_prompt, greedy(2)).status(), cause);
    EXPECT_TRUE(engine->step().empty());
  }
}

// Rank 1's last sum of each step (the last layer's MLP) turns NaN on that rank alone: its logits
// are not finite while rank 0's are, so its events part from rank 0's in the first step.
TEST(TensorParallelEngineFailure, PartedRanksEndTheGroup) {
  const Golden& g = golden("qwen3_5");
  FaultyGroup* group = nullptr;
  std::unique_ptr<Engine> engine = make_engine(
      *g.model, faulty_options(1, sums_per_step(*g.model), FaultyGroup::Fault::kPoison, &group));
  const RequestId id = engine->add_request(g.b_prompt, greedy(8)).value();
  const std::vector<TokenEvent> events = within_a_minute("step", [&] { return engine->step(); });
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].token, g.b_tokens[0]);  // rank 0's token, then the end
  EXPECT_EQ(events[1].request, id);
  EXPECT_EQ(events[1].reason, FinishReason::kError);
  EXPECT_NE(events[1].error.find("tensor-parallel ranks parted in step 1"), std::string::npos)
      << events[1].error;
  EXPECT_NE(events[1].error.find("NaN"), std::string::npos) << events[1].error;
  EXPECT_EQ(group->fails.load(), 2);  // every rank left the group
  EXPECT_TRUE(engine->idle());
  EXPECT_ERROR_CONTAINS(engine->add_request(g.b_prompt, greedy(2)).status(), "parted");
}

TEST(TensorParallelEngineFailure, RefusedByName) {
  const Golden& g = golden("qwen3_5");
  EXPECT_ERROR_CONTAINS(Engine::create(*g.model, ranks_options(0)).status(),
                        "tensor_parallel.ranks is 0, expected >= 1");
  EXPECT_ERROR_CONTAINS(Engine::create(*g.model, ranks_options(-2)).status(),
                        "tensor_parallel.ranks is -2");
  EXPECT_ERROR_CONTAINS(Engine::create(*g.model, ranks_options(4)).status(),
                        "linear_num_key_heads H = 2, which N = 4 ranks do not divide");
  EXPECT_ERROR_CONTAINS(size_engine_memory(g.model->config(), ranks_options(3), {100}).status(),
                        "which N = 3 ranks do not divide");

  EngineOptions draft = ranks_options(2);
  draft.speculative.drafter = SpeculativeOptions::Drafter::kDraftModel;
  draft.speculative.draft_model = g.model.get();
  EXPECT_ERROR_CONTAINS(Engine::create(*g.model, draft).status(),
                        "a draft model does not run under tensor parallelism");
  Result<std::unique_ptr<model::Model>> with_mtp =
      model::load_model(golden_root() + "/qwen3_5_mtp");
  ASSERT_TRUE(with_mtp.ok()) << with_mtp.status().message();
  EngineOptions mtp = ranks_options(2);
  mtp.speculative.drafter = SpeculativeOptions::Drafter::kMtp;
  EXPECT_ERROR_CONTAINS(Engine::create(**with_mtp, mtp).status(),
                        "the MTP draft head does not run under tensor parallelism");

  EngineOptions on_cuda = ranks_options(2);
  on_cuda.tensor_parallel.devices = {Device::cpu(), Device::cuda(0)};
  EXPECT_ERROR_CONTAINS(Engine::create(*g.model, on_cuda).status(),
                        "rank 1 is on cuda:0, but the CPU group (LocalGroup) adds host tensors");
  on_cuda.tensor_parallel.devices = {Device::cpu()};
  EXPECT_ERROR_CONTAINS(Engine::create(*g.model, on_cuda).status(), "names 1 devices for 2 ranks");
  EngineOptions short_group = ranks_options(2);
  short_group.tensor_parallel.group =
      [](const std::vector<Device>&) -> Result<std::unique_ptr<RankGroup>> {
    HYLA_ASSIGN_OR_RETURN(std::unique_ptr<LocalGroup> local, LocalGroup::create(3));
    return std::unique_ptr<RankGroup>(std::move(local));
  };
  EXPECT_ERROR_CONTAINS(Engine::create(*g.model, short_group).status(),
                        "group has 3 ranks, expected 2");
  // One rank is the whole model on one engine, whatever the group.
  Result<std::unique_ptr<Engine>> one = Engine::create(*g.model, ranks_options(1));
  ASSERT_TRUE(one.ok()) << one.status().message();
}

TEST(RankThreadsTest, RunsEveryRankAtOnceEachOnItsOwnThread) {
  RankThreads threads(4);
  ASSERT_EQ(threads.ranks(), 4);
  std::vector<std::thread::id> first(4), second(4);
  std::barrier all(4);  // passes only when every rank is inside its call at once
  within_a_minute("RankThreads::run", [&] {
    threads.run([&](int r) {
      first[size_t(r)] = std::this_thread::get_id();
      all.arrive_and_wait();
    });
    threads.run([&](int r) { second[size_t(r)] = std::this_thread::get_id(); });
    return 0;
  });
  EXPECT_EQ(first, second);  // a rank keeps its thread
  EXPECT_EQ(std::set<std::thread::id>(first.begin(), first.end()).size(), 4u);
  RankThreads one(1);
  int calls = 0;
  one.run([&](int r) { calls += r + 1; });
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace hyla::runtime
