// Draft-model drafter checks shared by the CPU (runtime/draft_model_test.cpp) and CUDA
// (runtime/cuda/draft_model_cuda_test.cpp) tests, each taking the device the drafter runs on.
// The reference is the CPU's model::greedy_generate of the same golden model over the request's
// true sequence (engine_testing.h's expect_cpu_greedy_tokens: exact on the CPU, up to a near tie
// elsewhere).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "engine_testing.h"
#include "runtime/spec/draft_model.h"

namespace hyla::runtime::draft_model_testing {

using engine_testing::Golden;
using engine_testing::Tokens;

/// A roomy budget (the golden models are tiny), f32 state and conv (exactly what
/// greedy_generate carries), and 128-token catch-up steps so a 150-token prompt takes two.
inline DraftModelOptions draft_options() {
  DraftModelOptions o;
  o.memory_budget_bytes = int64_t{16} << 20;
  o.conv_dtype = DType::kF32;
  o.kv_dtype = DType::kF32;
  o.state_dtype = DType::kF32;
  o.max_batch_tokens = 128;
  return o;
}

inline std::unique_ptr<DraftModelDrafter> make_drafter(const model::Model& model,
                                                       const DraftModelOptions& options) {
  Result<std::unique_ptr<DraftModelDrafter>> d = DraftModelDrafter::create(model, options);
  HYLA_CHECK(d.ok(), d.status().message());
  return std::move(d).value();
}

/// One request of a scenario: its true sequence, and what the drafter was last asked about it.
struct Sequence {
  int64_t id;
  Tokens tokens;
  Tokens last_asked{};
};

/// Prompts of different lengths (two catch-up chunks, one, a few tokens).
inline std::vector<Sequence> scenario_sequences(const Golden& g) {
  using engine_testing::prefix;
  return {{11, prefix(g.a_prompt, 150)},
          {-3, g.b_prompt},
          {42, prefix(g.a_prompt, 70)},
          {7, prefix(g.b_prompt, 5)}};
}

/// What a scenario saw.
struct ScenarioCounts {
  int64_t calls = 0;
  int64_t drafts = 0;           ///< tokens proposed
  int64_t short_proposals = 0;  ///< proposals below their k
  int64_t accepted = 0;         ///< drafts the simulated verifier kept
  int64_t rejected = 0;         ///< proposals whose next token differed from a draft
  /// Tokens a drafter that never loses its state would catch up on: per call and sequence, the
  /// tokens past the last asked ones when those are a prefix, else all.
  int64_t new_tokens = 0;
};

/// `rounds` calls of propose() over `seqs`, each proposal checked against the CPU's greedy tokens
/// of the sequence. Every call leaves one sequence out in turn (interleaving) and asks each for
/// k in 0..5; between calls a sequence grows like a verified one: some of its drafts accepted,
/// then one token of the target, which differs from the next draft when there is one (a
/// rejection, draft 1 included). In round 2 sequence 0 does not grow (the held state is already
/// current); in round 3 sequence 1's last three tokens change (the caller's sequence no longer
/// extends what the drafter holds: a reset). `full`: every proposal has its k tokens.
inline void run_scenario(const Golden& g, DraftModelDrafter& drafter, std::vector<Sequence>& seqs,
                         int rounds, Device device, bool full, ScenarioCounts& counts) {
  const int32_t V = int32_t(g.model->config().vocab_size);
  for (int r = 0; r < rounds; ++r) {
    std::vector<DraftQuery> queries;
    std::vector<size_t> which;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if ((size_t(r) + i) % seqs.size() == seqs.size() - 1) continue;  // sits this call out
      const int64_t k = int64_t((size_t(r) + 2 * i) % 6);              // 0..5
      queries.push_back({seqs[i].id, seqs[i].tokens, k});
      which.push_back(i);
    }
    Result<std::vector<Tokens>> got = drafter.propose(queries);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_EQ(got->size(), queries.size());
    ASSERT_OK(drafter.check_invariants());
    ++counts.calls;
    for (size_t q = 0; q < queries.size(); ++q) {
      Sequence& s = seqs[which[q]];
      const Tokens& drafts = (*got)[q];
      const int64_t k = queries[q].k;
      SCOPED_TRACE(
          str_cat("round ", r, ", request ", s.id, " (", s.tokens.size(), " tokens, k ", k, ")"));
      if (k > 0) {
        const bool extends = s.last_asked.size() <= s.tokens.size() &&
                             std::equal(s.last_asked.begin(), s.last_asked.end(), s.tokens.begin());
        counts.new_tokens += int64_t(s.tokens.size() - (extends ? s.last_asked.size() : 0));
        s.last_asked = s.tokens;
      }
      ASSERT_LE(int64_t(drafts.size()), k);
      if (full) {
        EXPECT_EQ(int64_t(drafts.size()), k);
      }
      if (int64_t(drafts.size()) < k) ++counts.short_proposals;
      counts.drafts += int64_t(drafts.size());
      for (int32_t d : drafts) ASSERT_TRUE(d >= 0 && d < V) << d;
      if (!drafts.empty())
        engine_testing::expect_cpu_greedy_tokens(g, s.tokens, drafts, int64_t(drafts.size()),
                                                 device);
    }
    // The verifier's verdicts: the sequences grow.
    for (size_t q = 0; q < queries.size(); ++q) {
      Sequence& s = seqs[which[q]];
      if (r == 2 && which[q] == 0) continue;
      const Tokens& drafts = (*got)[q];
      const size_t accepted = drafts.empty() ? 0 : (size_t(r) + 3 * which[q]) % (drafts.size() + 1);
      s.tokens.insert(s.tokens.end(), drafts.begin(), drafts.begin() + long(accepted));
      counts.accepted += int64_t(accepted);
      if (accepted < drafts.size()) {
        s.tokens.push_back((drafts[accepted] + 1 + r) % V);
        ++counts.rejected;
      } else {
        s.tokens.push_back((s.tokens.back() * 31 + 17 + r) % V);
      }
    }
    if (r == 3) {
      Tokens& t = seqs[1].tokens;
      for (size_t j = t.size() - 3; j < t.size(); ++j) t[j] = (t[j] + 5) % V;
    }
  }
}

/// The scenario on one golden architecture with the budget size_draft_memory gives for it: every
/// proposal whole and equal
/// to greedy decoding; the drafter ran only the tokens added since each request's last call
/// (state kept, not recomputed), reset once, evicted nothing; release() frees everything.
inline void expect_drafts_equal_greedy(const std::string& arch, Device device) {
  const Golden& g = engine_testing::golden(arch);
  const model::Model& model = engine_testing::model_on(g, device);
  std::vector<Sequence> seqs = scenario_sequences(g);
  // Just the room for them: 260 tokens each (the sequences grow to about 200, plus k), and a
  // scratch slot each (size_draft_memory).
  DraftModelOptions options = draft_options();
  const std::vector<int64_t> request_tokens(seqs.size(), 260);
  Result<MemorySizing> sizing = size_draft_memory(model.config(), options, request_tokens);
  ASSERT_TRUE(sizing.ok()) << sizing.status().message();
  options.memory_budget_bytes = sizing->budget_bytes;
  options.state_ratio = sizing->state_ratio;
  std::unique_ptr<DraftModelDrafter> drafter = make_drafter(model, options);
  ScenarioCounts counts;
  run_scenario(g, *drafter, seqs, 8, device, /*full=*/true, counts);
  if (::testing::Test::HasFatalFailure()) return;
  const DraftModelStats s = drafter->stats();
  EXPECT_GT(counts.accepted, 0);
  EXPECT_GT(counts.rejected, 0);
  EXPECT_EQ(s.drafts, counts.drafts);
  EXPECT_EQ(s.prefill_tokens, counts.new_tokens) << "the held states were not reused";
  EXPECT_EQ(s.resets, 1);
  EXPECT_EQ(s.evictions, 0);
  EXPECT_EQ(s.short_queries, 0);
  EXPECT_EQ(s.non_finite, 0);
  EXPECT_GT(s.decode_steps, 0);
  EXPECT_GT(s.prefill_steps, counts.calls) << "the 150-token prompt should take two steps";
  EXPECT_EQ(s.requests, int64_t(seqs.size()));
  for (const Sequence& q : seqs) drafter->release(q.id);
  const DraftModelStats after = drafter->stats();
  EXPECT_EQ(after.requests, 0);
  EXPECT_EQ(after.used_slots, 0);
  EXPECT_EQ(after.used_pages, 0);
  EXPECT_OK(drafter->check_invariants());
}

/// A budget that holds 2 requests of 260 tokens (size_memory: no scratch slots), so 4 requests
/// evict each other: every proposal still equals greedy decoding (fewer drafts allowed where
/// memory was short).
inline void expect_evictions_keep_drafts_exact(const std::string& arch, Device device) {
  const Golden& g = engine_testing::golden(arch);
  const model::Model& model = engine_testing::model_on(g, device);
  DraftModelOptions options = draft_options();
  const int64_t request_tokens[] = {260, 260};
  Result<MemorySizing> sizing =
      size_memory(model.config(), request_tokens, draft_memory_plan_options(options, device));
  ASSERT_TRUE(sizing.ok()) << sizing.status().message();
  options.memory_budget_bytes = sizing->budget_bytes;
  options.state_ratio = sizing->state_ratio;
  std::unique_ptr<DraftModelDrafter> drafter = make_drafter(model, options);
  std::vector<Sequence> seqs = scenario_sequences(g);
  ScenarioCounts counts;
  run_scenario(g, *drafter, seqs, 8, device, /*full=*/false, counts);
  if (::testing::Test::HasFatalFailure()) return;
  const DraftModelStats s = drafter->stats();
  EXPECT_GT(s.evictions, 0);
  EXPECT_GT(counts.drafts, 0);
  EXPECT_EQ(s.short_queries, counts.short_proposals);
  EXPECT_GT(s.prefill_tokens, counts.new_tokens) << "evicted requests must re-prefill";
  EXPECT_LE(s.used_slots, s.state_slots);
  EXPECT_LE(s.used_pages, s.kv_pages);
  std::printf("%s: %lld slots, %lld pages; %lld evictions, %lld of %lld proposals short\n",
              arch.c_str(), static_cast<long long>(s.state_slots),
              static_cast<long long>(s.kv_pages), static_cast<long long>(s.evictions),
              static_cast<long long>(s.short_queries), static_cast<long long>(s.proposals));
}

}  // namespace hyla::runtime::draft_model_testing
