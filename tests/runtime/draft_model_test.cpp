// The draft-model drafter (runtime/spec/draft_model.h) on the CPU: for every golden architecture
// its proposals equal model::greedy_generate of the draft model over the request's true sequence,
// through interleaved requests, accepted and rejected drafts, a changed sequence and evictions
// (draft_model_testing.h; the same checks run on CUDA in runtime/cuda/draft_model_cuda_test.cpp);
// release() frees the slot and pages; a sequence beyond the pool gets no drafts, not an error;
// misuse is an error naming the query.
#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "draft_model_testing.h"

namespace hyla::runtime {
namespace {

using namespace engine_testing;       // NOLINT: the shared helpers are this file's vocabulary
using namespace draft_model_testing;  // NOLINT

class DraftModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DraftModelTest, ProposalsEqualGreedy) {
  expect_drafts_equal_greedy(GetParam(), Device::cpu());
}

TEST_P(DraftModelTest, EvictionsKeepProposalsExact) {
  expect_evictions_keep_drafts_exact(GetParam(), Device::cpu());
}

INSTANTIATE_TEST_SUITE_P(Golden, DraftModelTest, ::testing::ValuesIn(golden_archs()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST(DraftModel, GoldenArchitecturesPresent) {
  EXPECT_TRUE(testing::expect_golden_archs(golden_root()));
  const std::vector<std::string> archs = golden_archs();
  for (const char* arch : {"qwen3_next", "kimi_linear"})
    EXPECT_NE(std::find(archs.begin(), archs.end(), arch), archs.end()) << arch;
}

// release() gives back exactly the request's slot and pages; an id it holds nothing for (never
// asked about, or released already) changes nothing.
TEST(DraftModel, ReleaseFreesSlotAndPages) {
  const Golden& g = golden("qwen3_next");
  std::unique_ptr<DraftModelDrafter> drafter = make_drafter(*g.model, draft_options());
  const Tokens a = prefix(g.a_prompt, 150), b = g.b_prompt;
  const std::vector<DraftQuery> queries = {{1, a, 4}, {2, b, 3}};
  Result<std::vector<Tokens>> got = drafter->propose(queries);
  ASSERT_TRUE(got.ok()) << got.status().message();
  const DraftModelStats both = drafter->stats();
  EXPECT_EQ(both.requests, 2);
  EXPECT_EQ(both.used_slots, 2) << "scratch slots must be back in the pool";
  // Each holds the pages of its tokens and of its drafts' KV rows (n + k - 1 positions).
  const int64_t P = draft_options().page_size;
  const int64_t pages_a = (int64_t(a.size()) + 3 + P - 1) / P,
                pages_b = (int64_t(b.size()) + 2 + P - 1) / P;
  EXPECT_EQ(both.used_pages, pages_a + pages_b);
  drafter->release(1);
  const DraftModelStats one = drafter->stats();
  EXPECT_EQ(one.requests, 1);
  EXPECT_EQ(one.used_slots, 1);
  EXPECT_EQ(one.used_pages, pages_b);
  drafter->release(1);   // released already
  drafter->release(99);  // never asked about
  EXPECT_EQ(drafter->stats().used_pages, pages_b);
  EXPECT_OK(drafter->check_invariants());
  // A released request starts over: its whole sequence is prefilled again, with the same drafts.
  const int64_t before = drafter->stats().prefill_tokens;
  Result<std::vector<Tokens>> again = drafter->propose(std::span(queries).first(1));
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->at(0), got->at(0));
  EXPECT_EQ(drafter->stats().prefill_tokens - before, int64_t(a.size()));
  drafter->release(1);
  drafter->release(2);
  EXPECT_EQ(drafter->stats().used_slots, 0);
  EXPECT_EQ(drafter->stats().used_pages, 0);
}

// A sequence longer than the whole KV pool gets no drafts (speculation is optional), the others
// in the call still get theirs, and nothing is left taken.
TEST(DraftModel, SequenceBeyondThePoolGetsNoDrafts) {
  const Golden& g = golden("qwen3_next");
  DraftModelOptions options = draft_options();
  options.memory_budget_bytes = int64_t{1} << 20;
  std::unique_ptr<DraftModelDrafter> drafter = make_drafter(*g.model, options);
  const int64_t max_tokens = drafter->plan().kv_pages * drafter->plan().page_size;
  ASSERT_LT(max_tokens, 20000) << "the budget should hold few pages";
  Tokens too_long;
  for (int64_t t = 0; t <= max_tokens; ++t) too_long.push_back(int32_t(t % 200));
  const std::vector<DraftQuery> queries = {{5, too_long, 4}, {6, g.b_prompt, 4}};
  Result<std::vector<Tokens>> got = drafter->propose(queries);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_TRUE(got->at(0).empty());
  expect_cpu_greedy_tokens(g, g.b_prompt, got->at(1), 4, Device::cpu());
  const DraftModelStats s = drafter->stats();
  EXPECT_EQ(s.short_queries, 1);
  EXPECT_EQ(s.requests, 1);
  EXPECT_OK(drafter->check_invariants());
}

// k = 0 asks nothing and runs nothing; k = 1 needs no scratch slot.
TEST(DraftModel, ZeroAndOneDraft) {
  const Golden& g = golden("kimi_linear");
  std::unique_ptr<DraftModelDrafter> drafter = make_drafter(*g.model, draft_options());
  const std::vector<DraftQuery> queries = {{1, g.a_prompt, 0}, {2, g.b_prompt, 1}};
  Result<std::vector<Tokens>> got = drafter->propose(queries);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_TRUE(got->at(0).empty());
  expect_cpu_greedy_tokens(g, g.b_prompt, got->at(1), 1, Device::cpu());
  const DraftModelStats s = drafter->stats();
  EXPECT_EQ(s.requests, 1);
  EXPECT_EQ(s.prefill_tokens, int64_t(g.b_prompt.size()));
  EXPECT_EQ(s.decode_steps, 0);
  EXPECT_EQ(s.proposals, 1);
}

// Misuse is an error naming the query, its id and the value, and changes nothing.
TEST(DraftModel, BadQueriesAreErrors) {
  const Golden& g = golden("qwen3_next");
  std::unique_ptr<DraftModelDrafter> drafter = make_drafter(*g.model, draft_options());
  const int64_t V = g.model->config().vocab_size;
  const Tokens good = prefix(g.a_prompt, 10);
  Tokens bad = good;
  bad[3] = int32_t(V);
  Tokens negative = good;
  negative[0] = -1;
  const Tokens empty;
  const auto error_of = [&](std::vector<DraftQuery> queries) {
    Result<std::vector<Tokens>> got = drafter->propose(queries);
    return got.ok() ? ok_status() : got.status();
  };
  EXPECT_ERROR_CONTAINS(error_of({{1, good, 2}, {7, bad, 2}}),
                        str_cat("query 1 (id 7): token 3 is ", V, ", outside [0, ", V, ")"));
  EXPECT_ERROR_CONTAINS(error_of({{4, negative, 2}}), "query 0 (id 4): token 0 is -1");
  EXPECT_ERROR_CONTAINS(error_of({{1, good, -1}}), "query 0 (id 1): k is -1");
  EXPECT_ERROR_CONTAINS(error_of({{1, good, kMaxDraftModelTokens + 1}}),
                        str_cat("k is ", kMaxDraftModelTokens + 1));
  EXPECT_ERROR_CONTAINS(error_of({{1, empty, 2}}), "query 0 (id 1) has no tokens");
  EXPECT_ERROR_CONTAINS(error_of({{1, good, 2}, {1, good, 2}}), "query 1 (id 1) repeats the id");
  const DraftModelStats s = drafter->stats();
  EXPECT_EQ(s.requests, 0);
  EXPECT_EQ(s.prefill_tokens, 0);
  EXPECT_EQ(s.used_slots, 0);
  EXPECT_EQ(s.used_pages, 0);
}

TEST(DraftModel, BadOptionsAreErrors) {
  const Golden& g = golden("qwen3_next");
  const auto error_of = [&](const DraftModelOptions& o) {
    Result<std::unique_ptr<DraftModelDrafter>> d = DraftModelDrafter::create(*g.model, o);
    return d.ok() ? ok_status() : d.status();
  };
  DraftModelOptions o = draft_options();
  o.max_batch_tokens = 63;
  EXPECT_ERROR_CONTAINS(error_of(o), "max_batch_tokens is 63, expected >= 64");
  o = draft_options();
  o.max_requests = 0;
  EXPECT_ERROR_CONTAINS(error_of(o), "max_requests is 0");
  o = draft_options();
  o.memory_budget_bytes = 0;
  EXPECT_ERROR_CONTAINS(error_of(o), "memory_budget_bytes is 0");
  o = draft_options();
  o.memory_budget_bytes = 1000;
  EXPECT_ERROR_CONTAINS(error_of(o), "DraftModelDrafter: plan_memory");
}

// max_requests bounds the requests held: one more evicts the least recently used.
TEST(DraftModel, MaxRequestsEvictsLeastRecentlyUsed) {
  const Golden& g = golden("qwen3_next");
  DraftModelOptions options = draft_options();
  options.max_requests = 2;
  std::unique_ptr<DraftModelDrafter> drafter = make_drafter(*g.model, options);
  const Tokens a = prefix(g.a_prompt, 20), b = prefix(g.a_prompt, 30), c = g.b_prompt;
  for (const DraftQuery& q :
       {DraftQuery{1, a, 2}, DraftQuery{2, b, 2}, DraftQuery{1, a, 2}, DraftQuery{3, c, 2}}) {
    Result<std::vector<Tokens>> got = drafter->propose(std::span(&q, 1));
    ASSERT_TRUE(got.ok()) << got.status().message();
    expect_cpu_greedy_tokens(g, Tokens(q.tokens.begin(), q.tokens.end()), got->at(0), 2,
                             Device::cpu());
  }
  // Request 2 was the least recently used when 3 came: it went, 1 stayed (no new prefill).
  DraftModelStats s = drafter->stats();
  EXPECT_EQ(s.evictions, 1);
  EXPECT_EQ(s.requests, 2);
  const int64_t before = s.prefill_tokens;
  const DraftQuery one{1, a, 2}, two{2, b, 2};
  ASSERT_TRUE(drafter->propose(std::span(&one, 1)).ok());
  EXPECT_EQ(drafter->stats().prefill_tokens, before) << "request 1 should have been kept";
  ASSERT_TRUE(drafter->propose(std::span(&two, 1)).ok());
  EXPECT_EQ(drafter->stats().prefill_tokens, before + int64_t(b.size()));
  EXPECT_EQ(drafter->stats().evictions, 2);
  EXPECT_OK(drafter->check_invariants());
}

}  // namespace
}  // namespace hyla::runtime
