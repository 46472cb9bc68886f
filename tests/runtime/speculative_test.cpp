// Speculative decoding in the engine: greedy with n-gram drafts equals plain greedy decoding for
// every golden architecture, both rollback modes, the prefix cache on and off
// (speculative_testing.h; the same checks run on CUDA in runtime/cuda/engine_cuda_test.cpp);
// sampled tokens follow plain sampling's law (chi-square against Sampler::probabilities of the
// model's own logits); replay rollback holds one state slot per request and keeps a smaller
// record than per-token states.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "chi_square.h"
#include "model/architecture.h"
#include "model/mtp_testing.h"
#include "speculative_testing.h"

namespace hyla::runtime {
namespace {

using testing::chi_square_critical;

using namespace engine_testing;

class SpeculativeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SpeculativeTest, GreedyEqualsPlainDecoding) {
  for (const model::VerifyMode mode : {model::VerifyMode::kReplay, model::VerifyMode::kStepStates})
    for (const bool cache : {false, true}) {
      SCOPED_TRACE(str_cat(mode == model::VerifyMode::kReplay ? "replay" : "step states",
                           cache ? ", cache on" : ", cache off"));
      expect_speculative_greedy_equals_plain(GetParam(), Device::cpu(), mode, cache);
    }
}

// The fused verify kernel (kernels/gated_delta_rule_decode.h, T = 1 + K, per-token states) and
// its commit kernel, chosen explicitly: the engine pads every sequence of a verify step to the
// step's most tokens, as a CUDA graph's step does.
TEST_P(SpeculativeTest, FusedVerifyEqualsPlainDecoding) {
  model::LinearAttnBackends backends;
  backends.verify = model::LinearDecodeBackend::kFused;
  for (const bool cache : {false, true}) {
    SCOPED_TRACE(cache ? "cache on" : "cache off");
    expect_speculative_greedy_equals_plain(
        GetParam(), Device::cpu(), model::VerifyMode::kStepStates, cache, {.backends = backends});
  }
}

// Drafts from a draft model (runtime/spec/draft_model.h) run by the engine: the model itself
// (its drafts stand, but where batching moves a near tie), and another golden architecture of
// the same vocabulary (its drafts mostly fall).
TEST_P(SpeculativeTest, DraftModelGreedyEqualsPlainDecoding) {
  const Golden& g = golden(GetParam());
  const Golden& other = golden(GetParam() == "qwen3_5" ? "qwen3_next" : "qwen3_5");
  for (const model::VerifyMode mode : {model::VerifyMode::kReplay, model::VerifyMode::kStepStates})
    for (const bool cache : {false, true}) {
      SCOPED_TRACE(str_cat(mode == model::VerifyMode::kReplay ? "replay" : "step states",
                           cache ? ", cache on" : ", cache off", ", itself as the draft"));
      expect_speculative_greedy_equals_plain(
          GetParam(), Device::cpu(), mode, cache,
          {.draft = g.model.get(), .expect_accepted = true, .expect_rejected = false});
    }
  SCOPED_TRACE("another architecture as the draft");
  expect_speculative_greedy_equals_plain(
      GetParam(), Device::cpu(), model::VerifyMode::kReplay, /*cache=*/true,
      {.draft = other.model.get(), .expect_accepted = false, .expect_rejected = true});
}

// Drafts of the checkpoint's own MTP head (tests/data/golden/<arch>_mtp: the golden decoder and a
// seeded random head, made by tools/make_mtp_model.py): its KV rows written every step, rolled
// back with the page table.
TEST(Speculative, MtpGreedyEqualsPlainDecoding) {
  for (const char* arch : {"qwen3_next", "qwen3_5"}) {
    Result<std::unique_ptr<model::Model>> with_head =
        model::load_model(std::string(HYLA_TEST_DATA_DIR) + "/golden/" + arch + "_mtp");
    ASSERT_OK(with_head.status());
    for (const model::VerifyMode mode :
         {model::VerifyMode::kReplay, model::VerifyMode::kStepStates})
      for (const bool cache : {false, true}) {
        SCOPED_TRACE(str_cat(arch, mode == model::VerifyMode::kReplay ? " replay" : " step states",
                             cache ? ", cache on" : ", cache off"));
        expect_speculative_greedy_equals_plain(
            arch, Device::cpu(), mode, cache,
            {.expect_accepted = false, .expect_rejected = true, .mtp_model = with_head->get()});
      }
  }
}

/// The MTP head's drafts after `sequence` (its last token sampled, not yet run), computed in one
/// go on fresh pools: the model over every token but the last (its final hiddens), the head over
/// those positions with the tokens after them, then one position per draft. Also each depth's
/// logits, for telling a near tie from a wrong draft.
std::vector<int32_t> reference_mtp_drafts(const model::Model& m, const Tokens& sequence, int64_t k,
                                          std::vector<std::vector<float>>* logits) {
  const model::ModelConfig& c = m.config();
  const int64_t n = int64_t(sequence.size()), page_size = 16;
  const int64_t pages = (n + k) / page_size + 1;
  testing::PooledMemory pool(c, 1, pages, page_size, Device::cpu());
  std::vector<int32_t> table;
  for (int32_t p = 0; p < int32_t(pages); ++p) table.push_back(p);
  Tensor hidden;
  pool.memory.final_hidden = &hidden;
  const Tokens run(sequence.begin(), sequence.end() - 1);
  HYLA_CHECK(m.forward_batch(testing::make_batch({run}, {0}, {table}, false), pool.memory).ok(),
             "target");
  pool.memory.final_hidden = nullptr;
  const auto pick = [&](const Tensor& l) {
    const float* row = l.host<float>() + (l.size(0) - 1) * c.vocab_size;
    logits->emplace_back(row, row + c.vocab_size);
    return int32_t(std::max_element(row, row + c.vocab_size) - row);
  };
  const Tokens next(sequence.begin() + 1, sequence.end());
  Result<model::MtpOutput> out =
      m.forward_mtp(testing::make_batch({next}, {0}, {table}, false), hidden, pool.memory, 0);
  HYLA_CHECK(out.ok(), out.status().message());
  std::vector<int32_t> drafts = {pick(out->logits)};
  for (int64_t d = 1; d < k; ++d) {
    const Tensor last = testing::gather_host_rows(out->hidden, {{out->hidden.size(0) - 1, 1}});
    out = m.forward_mtp(testing::make_batch({{drafts.back()}}, {n + d - 2}, {table}, false), last,
                        pool.memory, d);
    HYLA_CHECK(out.ok(), out.status().message());
    drafts.push_back(pick(out->logits));
  }
  return drafts;
}

// The engine's MTP drafts after every step equal the head run in one go over the whole sequence
// (reference_mtp_drafts), through prefill chunks, plain decode steps and verify steps: the head's
// KV rows, positions, next tokens and hidden rows are kept right by the engine's bookkeeping.
// Where a draft differs, the reference's logits must hold a near tie there (the engine's hiddens
// come from chunked and recurrent passes, rounded differently).
TEST(Speculative, MtpDraftsEqualTheHeadRunInOneGo) {
  for (const char* arch : {"qwen3_next", "qwen3_5"}) {
    SCOPED_TRACE(arch);
    Result<std::unique_ptr<model::Model>> with_head =
        model::load_model(std::string(HYLA_TEST_DATA_DIR) + "/golden/" + arch + "_mtp");
    ASSERT_OK(with_head.status());
    const model::Model& m = **with_head;
    const Golden& g = golden(arch);
    EngineOptions options = test_options();
    options.speculative.drafter = SpeculativeOptions::Drafter::kMtp;
    options.speculative.draft_tokens = 3;
    options.max_batch_tokens = 64;  // the 150-token prompt in chunks, beside the other's decodes
    std::unique_ptr<Engine> engine = make_engine(m, options);
    std::map<RequestId, Tokens> sequences;
    for (const Tokens& prompt : {prefix(g.a_prompt, 20), prefix(g.a_prompt, 150)}) {
      Result<RequestId> id = engine->add_request(prompt, greedy(24));
      ASSERT_OK(id.status());
      sequences[*id] = prompt;
    }
    int64_t checked = 0;
    while (!engine->idle()) {
      for (const TokenEvent& e : engine->step()) {
        ASSERT_NE(e.reason, FinishReason::kError) << e.error;
        if (e.token >= 0) sequences[e.request].push_back(e.token);
      }
      for (const auto& [id, sequence] : sequences) {
        const auto [got, got_logits] = engine->mtp_drafts(id);
        if (got.empty()) continue;
        std::vector<std::vector<float>> logits;
        const std::vector<int32_t> want =
            reference_mtp_drafts(m, sequence, int64_t(got.size()), &logits);
        for (size_t d = 0; d < got.size(); ++d) {
          // f32 rounding of two summation orders: a few 1e-6 in these logits (MatchesReference);
          // a position off by one moves them by 1e-3 and more.
          constexpr float kTolerance = 1e-4f;
          EXPECT_NEAR(got_logits[d], logits[d][size_t(want[d])], kTolerance)
              << "request " << id << " after " << sequence.size() << " tokens, draft " << d;
          if (got[d] == want[d]) continue;
          // A near tie: the reference's logit of the engine's draft is as high.
          EXPECT_LT(logits[d][size_t(want[d])] - logits[d][size_t(got[d])], kTolerance)
              << "request " << id << " after " << sequence.size() << " tokens, draft " << d;
          break;
        }
        ++checked;
      }
    }
    EXPECT_GT(checked, 10);
    EXPECT_GT(engine->stats().spec.steps, 0);
  }
}

TEST(Speculative, MtpNeedsAHead) {
  EngineOptions options = test_options();
  options.speculative.drafter = SpeculativeOptions::Drafter::kMtp;
  EXPECT_ERROR_CONTAINS(Engine::create(*golden("qwen3_next").model, options).status(),
                        "speculative.drafter is the MTP head, but the model has none");
}

TEST(Speculative, DraftModelOptionsAreChecked) {
  const Golden& g = golden("qwen3_next");
  EngineOptions options = test_options();
  options.speculative.drafter = SpeculativeOptions::Drafter::kDraftModel;
  EXPECT_ERROR_CONTAINS(Engine::create(*g.model, options).status(),
                        "speculative.drafter is the draft model, but none is given");
}

INSTANTIATE_TEST_SUITE_P(Golden, SpeculativeTest, ::testing::ValuesIn(golden_archs()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST(Speculative, GoldenArchitecturesPresent) {
  EXPECT_TRUE(testing::expect_golden_archs(golden_root()));
}

// ---- sampling: the emitted tokens follow plain sampling's law ----

/// Each goodness-of-fit check below fails a correct engine with probability about this (the
/// statistic's law is chi-square asymptotically); SamplingKeepsTheDistribution makes at most 22
/// (t1, 3 contexts x 4 groups for t2, 2 x 4 for t3, one for t4): under 2.2e-5 for the whole
/// test. Its seeds are fixed, so a run repeats.
constexpr double kFalseFailure = 1e-6;

/// Pearson's chi-square test of `counts` (draws per token) against the law `p`. Tokens expected
/// fewer than 5 times are pooled into one bin, which joins the smallest other bin when it is
/// itself below 5 (so every bin expects >= 5, where the statistic is close to chi-square with
/// bins - 1 degrees of freedom). A token of probability 0 that was drawn fails at once; fewer
/// than two bins fails too (too few draws to test anything).
::testing::AssertionResult follows_law(const std::map<int32_t, int64_t>& counts,
                                       const std::vector<double>& p, const std::string& what) {
  int64_t n = 0;
  for (const auto& [token, count] : counts) {
    if (p[size_t(token)] == 0.0)
      return ::testing::AssertionFailure() << what << ": token " << token << " has probability 0"
                                           << " but was drawn " << count << " times";
    n += count;
  }
  struct Bin {
    std::string tokens;
    double observed = 0.0, expected = 0.0;
  };
  std::vector<Bin> bins;
  Bin pooled{"pooled", 0.0, 0.0};
  for (size_t token = 0; token < p.size(); ++token) {
    const auto it = counts.find(int32_t(token));
    const double observed = it == counts.end() ? 0.0 : double(it->second);
    const double expected = double(n) * p[token];
    if (expected >= 5.0) {
      bins.push_back(Bin{std::to_string(token), observed, expected});
    } else {
      pooled.observed += observed;
      pooled.expected += expected;
    }
  }
  if (pooled.expected >= 5.0) {
    bins.push_back(pooled);
  } else if (pooled.expected > 0.0 && !bins.empty()) {
    Bin& smallest = *std::min_element(bins.begin(), bins.end(), [](const Bin& a, const Bin& b) {
      return a.expected < b.expected;
    });
    smallest.tokens += "+pooled";
    smallest.observed += pooled.observed;
    smallest.expected += pooled.expected;
  }
  std::string table;
  double statistic = 0.0;
  for (const Bin& bin : bins) {
    statistic += (bin.observed - bin.expected) * (bin.observed - bin.expected) / bin.expected;
    table += str_cat(" [", bin.tokens, "] ", int64_t(bin.observed), " vs ", bin.expected);
  }
  if (bins.size() < 2)
    return ::testing::AssertionFailure()
           << what << ": " << n << " draws make " << bins.size() << " bin(s), too few to test";
  const int64_t dof = int64_t(bins.size()) - 1;
  const double critical = chi_square_critical(dof, kFalseFailure);
  std::printf("%s: chi-square %.2f <= %.2f? (%lld dof, %lld draws)\n", what.c_str(), statistic,
              critical, static_cast<long long>(dof), static_cast<long long>(n));
  if (statistic <= critical) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": chi-square " << statistic << " > " << critical << " (" << dof
         << " dof, false-failure rate " << kFalseFailure << ") from " << n
         << " draws; observed vs expected:" << table;
}

/// The logits row after `context`, from one greedy_generate step: [vocab] on the host.
std::vector<float> next_logits(const model::Model& model, const Tokens& context) {
  Tensor logits;
  Result<Tokens> one = model::greedy_generate(model, context, 1, &logits);
  HYLA_CHECK(one.ok(), one.status().message());
  const float* row = logits.host<float>();
  return std::vector<float>(row, row + logits.size(1));
}

/// Token ids by probability, best first (ties: lower id).
Tokens by_probability(const std::vector<double>& p) {
  Tokens order(p.size());
  for (size_t t = 0; t < p.size(); ++t) order[t] = int32_t(t);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return p[size_t(a)] > p[size_t(b)]; });
  return order;
}

Tokens concat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Sampling with n-gram drafts: the engine's tokens must follow plain sampling's law, token by
// token: t1 ~ p(. | prompt), t2 ~ p(. | prompt, t1), ... where p is Sampler::probabilities of the
// model's logits after those tokens (computed alone by greedy_generate; the engine's batched
// rows differ from them by ~1e-5, nothing a chi-square test of a few thousand draws can see).
// t1 comes from the prefill step; t2..t4 from verify steps, where each request's predicted tokens
// make the drafter propose, after each of the three likeliest t1, two drafts b, c chosen per
// request among the 1st, 2nd, 4th and 41st likeliest tokens: drafts that mostly stand, drafts
// that mostly fall and replacement draws from max(0, p - q). t2 given t1 tests acceptance of the
// first draft and the replacement; t3 given (t1, b) the second draft; t4 given (t1, b, c) the
// draw after every draft stood. Each request runs 4 tokens in a wave small enough to prefill in
// one step, so that the following steps are decodes alone (only those verify drafts).
TEST(Speculative, SamplingKeepsTheDistribution) {
  // The critical values against closed forms: Q(x; 2) = e^(-x/2) gives -2 ln(1e-6) = 27.631;
  // Q(x; 1) = 1e-6 at x = 4.8916^2 = 23.928 (the two-sided normal quantile); textbook tables
  // (NIST/SEMATECH e-Handbook 1.3.6.7.4) for 0.05 and 0.001.
  EXPECT_NEAR(chi_square_critical(2, 1e-6), -2.0 * std::log(1e-6), 1e-6);
  EXPECT_NEAR(chi_square_critical(1, 1e-6), 23.928, 1e-3);
  EXPECT_NEAR(chi_square_critical(1, 0.05), 3.841, 1e-3);
  EXPECT_NEAR(chi_square_critical(10, 0.001), 29.588, 1e-3);

  const Golden& g = golden("qwen3_next");
  const model::Model& model = *g.model;
  const Tokens prompt = prefix(g.a_prompt, 8);
  SamplingParams params;
  params.temperature = 0.8f;  // top_k 0, top_p 1: every token possible
  params.max_new_tokens = 4;
  const auto law = [&](const Tokens& context) {
    Sampler sampler(params);
    std::vector<double> p;
    sampler.probabilities(next_logits(model, context), p);
    return p;
  };
  const std::vector<double> p0 = law(prompt);
  const Tokens likely = by_probability(p0);

  // Per request variant: the ranks of its drafts b (after t1) and c (after t1, b).
  constexpr int64_t kRanks[] = {0, 1, 3, 40};
  constexpr int64_t kVariants = 16;  // 4 ranks of b x 4 ranks of c
  std::vector<Tokens> predicted(kVariants);
  const Tokens suffix(prompt.end() - 3, prompt.end());
  for (int64_t first = 0; first < 3; ++first) {
    const int32_t a = likely[size_t(first)];
    const Tokens after_a = by_probability(law(concat(prompt, {a})));
    for (int64_t rb = 0; rb < 4; ++rb) {
      const int32_t b = after_a[size_t(kRanks[rb])];
      const Tokens after_b = by_probability(law(concat(prompt, {a, b})));
      for (int64_t rc = 0; rc < 4; ++rc) {
        const int32_t c = after_b[size_t(kRanks[rc])];
        // The prompt's last 3 tokens, then a: the drafter's 4-gram match proposes b, c.
        predicted[size_t(rb * 4 + rc)] =
            concat(predicted[size_t(rb * 4 + rc)], concat(suffix, {a, b, c}));
      }
    }
  }

  constexpr int64_t kRequests = 8192, kWave = 256;
  EngineOptions options = test_options();
  options.memory_budget_bytes = int64_t{64} << 20;
  options.state_ratio = 1.0;
  options.max_running = kWave;
  options.max_batch_tokens = kWave * int64_t(prompt.size());
  options.speculative.drafter = SpeculativeOptions::Drafter::kNgram;
  options.speculative.draft_tokens = 2;
  std::unique_ptr<Engine> engine = make_engine(model, options);
  ASSERT_GE(engine->plan().state_slots, kWave) << engine->plan().summary();
  std::map<RequestId, Tokens> out;
  std::map<RequestId, int64_t> variant;
  for (int64_t begin = 0; begin < kRequests; begin += kWave) {
    for (int64_t i = begin; i < begin + kWave; ++i) {
      SamplingParams request = params;
      request.seed = uint64_t(i) + 1;
      request.predicted_tokens = predicted[size_t(i % kVariants)];
      Result<RequestId> id = engine->add_request(prompt, request);
      ASSERT_TRUE(id.ok()) << id.status().message();
      variant[id.value()] = i % kVariants;
    }
    for (int64_t step = 0; !engine->idle(); ++step) {
      const std::vector<TokenEvent> events = engine->step();
      for (const TokenEvent& e : events) {
        ASSERT_NE(e.reason, FinishReason::kError) << e.error;
        if (e.token >= 0) out[e.request].push_back(e.token);
      }
      ASSERT_TRUE(step > 0 || int64_t(events.size()) == kWave)
          << "the wave's prompts must prefill in one step (got " << events.size()
          << " first tokens), else its decodes run beside prefill chunks and verify nothing";
    }
  }
  ASSERT_EQ(int64_t(out.size()), kRequests);

  // Each request's law holds whatever its drafts, so the draws are also split by the rank of the
  // draft that decides them (b for t2, c for t3): a bias that one kind of draft causes and
  // another offsets (say replacements drawn from p instead of max(0, p - q)) shows in its group.
  std::map<int32_t, int64_t> first;
  // (context after the prompt, group) -> next token -> draws
  std::map<std::pair<Tokens, int64_t>, std::map<int32_t, int64_t>> next;
  std::map<Tokens, int64_t> draws;  // context -> draws over every group
  for (const auto& [id, tokens] : out) {
    ASSERT_EQ(tokens.size(), 4u) << "request " << id;
    ++first[tokens[0]];
    const int64_t v = variant.at(id);
    for (size_t t = 1; t < tokens.size(); ++t) {
      const Tokens context(tokens.begin(), tokens.begin() + long(t));
      const int64_t group = t == 1 ? v / 4 : t == 2 ? v % 4 : 0;
      ++next[{context, group}][tokens[t]];
      ++draws[context];
    }
  }
  EXPECT_TRUE(follows_law(first, p0, "t1"));
  // The contexts drawn most often of each length (1: the three likeliest t1), every group.
  for (const auto& [length, most] : {std::pair<size_t, size_t>{1, 3}, {2, 2}, {3, 1}}) {
    std::vector<std::pair<int64_t, Tokens>> contexts;
    for (const auto& [context, n] : draws)
      if (context.size() == length) contexts.emplace_back(n, context);
    std::sort(contexts.rbegin(), contexts.rend());
    ASSERT_GE(contexts.size(), most);
    for (size_t k = 0; k < most; ++k) {
      const Tokens& context = contexts[k].second;
      const std::vector<double> want = law(concat(prompt, context));
      for (const auto& [key, counts] : next) {
        if (key.first != context) continue;
        std::string what = str_cat("t", length + 1, " after");
        for (int32_t t : context) what += str_cat(" ", t);
        if (length < 3)
          what += str_cat(", ", length == 1 ? "b" : "c", " of rank ", kRanks[key.second] + 1);
        EXPECT_TRUE(follows_law(counts, want, what));
      }
    }
  }

  const EngineStats s = engine->stats();
  std::printf("%lld verify steps, %lld of %lld drafts accepted\n",
              static_cast<long long>(s.spec.steps), static_cast<long long>(s.spec.accepted_tokens),
              static_cast<long long>(s.spec.draft_tokens));
  EXPECT_GT(s.spec.steps, 0);
  EXPECT_GT(s.spec.accepted_tokens, 0) << "no draft stood: acceptance went untested";
  EXPECT_LT(s.spec.accepted_tokens, s.spec.draft_tokens)
      << "no draft was rejected: the replacement draw went untested";
}

// Replay rollback keeps one state slot per request: R requests decode with drafts at once (the
// prefix cache off, so no snapshot holds a slot), and after every step the free slots are the
// plan's less one per running request. Step-state rollback must match that too (its per-token
// states live in the verify record, not in the pool). What a verify step keeps for its commit is
// smaller in replay mode: per token and linear layer, the gates (g, beta) instead of a whole
// [HV, d_v, d_k] f32 state, besides the conv inputs both keep. Both runs are greedy, so they
// verify the same sequences and tokens step for step, and the records are compared step by
// step. Measured on the golden models (K = 4): step states keep 8.7x the bytes of replay on
// Kimi-Linear and K3 (KDA gates are per d_k), 16.5x on the Qwen models.
TEST(Speculative, ReplayUsesOneSlotPerRequest) {
  for (const std::string& arch : golden_archs()) {
    SCOPED_TRACE(arch);
    const Golden& g = golden(arch);
    std::vector<Tokens> prompts = speculative_prompts(g);
    prompts.push_back(prefix(g.a_prompt, 40));
    prompts.push_back(prefix(g.b_prompt, 20));
    const int64_t R = int64_t(prompts.size()), n = 24;
    // Predicted outputs: plain greedy with every fifth token wrong, so that drafts stand and fall.
    std::vector<Tokens> predicted;
    for (const Tokens& prompt : prompts) {
      Result<Tokens> plain = model::greedy_generate(*g.model, prompt, n);
      ASSERT_TRUE(plain.ok()) << plain.status().message();
      predicted.push_back(plain.value());
      const int32_t V = int32_t(g.model->config().vocab_size);
      for (size_t i = 4; i < predicted.back().size(); i += 5)
        predicted.back()[i] = (predicted.back()[i] + 1) % V;
    }
    struct Verify {
      int64_t bytes, sequences, tokens;
    };
    std::map<model::VerifyMode, std::vector<Verify>> verifies;
    for (const model::VerifyMode mode :
         {model::VerifyMode::kReplay, model::VerifyMode::kStepStates}) {
      SCOPED_TRACE(mode == model::VerifyMode::kReplay ? "replay" : "step states");
      EngineOptions options = test_options();
      options.speculative.drafter = SpeculativeOptions::Drafter::kNgram;
      options.speculative.draft_tokens = 4;
      options.speculative.mode = mode;
      std::unique_ptr<Engine> engine = make_engine(*g.model, options);
      const int64_t slots = engine->plan().state_slots;
      ASSERT_GT(slots, R) << engine->plan().summary();
      for (int64_t i = 0; i < R; ++i) {
        SamplingParams params = greedy(n);
        params.predicted_tokens = predicted[size_t(i)];
        ASSERT_TRUE(engine->add_request(prompts[size_t(i)], params).ok());
      }
      std::vector<Verify>& seen = verifies[mode];
      for (int64_t step = 0; !engine->idle(); ++step) {
        for (const TokenEvent& e : engine->step())
          ASSERT_NE(e.reason, FinishReason::kError) << e.error;
        ASSERT_OK(engine->check_invariants());
        const EngineStats s = engine->stats();
        EXPECT_EQ(s.free_slots, slots - s.running)
            << "step " << step << ": " << s.running << " running of " << slots << " slots";
        if (s.spec.steps > int64_t(seen.size()))
          seen.push_back(Verify{s.spec.record_bytes, s.spec.record_sequences, s.last_step_tokens});
      }
      expect_pools_full(*engine);
      ASSERT_FALSE(seen.empty()) << "no verify step ran";
      EXPECT_EQ(seen.front().sequences, R) << "the first verify step holds every request";
    }
    const std::vector<Verify>& replay = verifies[model::VerifyMode::kReplay];
    const std::vector<Verify>& states = verifies[model::VerifyMode::kStepStates];
    ASSERT_EQ(replay.size(), states.size());
    int64_t replay_bytes = 0, states_bytes = 0;
    for (size_t i = 0; i < replay.size(); ++i) {
      SCOPED_TRACE(str_cat("verify step ", i));
      EXPECT_EQ(replay[i].sequences, states[i].sequences);
      EXPECT_EQ(replay[i].tokens, states[i].tokens);
      EXPECT_GT(replay[i].bytes, 0);
      EXPECT_LT(replay[i].bytes, states[i].bytes);
      replay_bytes += replay[i].bytes;
      states_bytes += states[i].bytes;
    }
    std::printf("%s: %zu verify steps, record bytes replay %lld, step states %lld (%.1fx)\n",
                arch.c_str(), replay.size(), static_cast<long long>(replay_bytes),
                static_cast<long long>(states_bytes), double(states_bytes) / double(replay_bytes));
  }
}

// Adaptive K: where drafts keep failing a request drafts fewer (down to one per step), so the
// same run verifies fewer drafts at a higher acceptance rate; the tokens stay plain greedy's.
TEST(Speculative, AdaptiveKDraftsLessWhereDraftsFail) {
  const Golden& g = golden("qwen3_next");
  const Tokens prompt = prefix(g.a_prompt, 40);
  const int64_t n = 40;
  Result<Tokens> plain = model::greedy_generate(*g.model, prompt, n);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  // A prediction right for its first half and wrong (shifted ids) after.
  SamplingParams params = greedy(n);
  params.predicted_tokens = plain.value();
  const int32_t V = int32_t(g.model->config().vocab_size);
  for (size_t i = size_t(n / 2); i < params.predicted_tokens.size(); ++i)
    params.predicted_tokens[i] = (params.predicted_tokens[i] + 7) % V;
  EngineStats stats[2];
  for (const bool adaptive : {false, true}) {
    SCOPED_TRACE(adaptive ? "adaptive" : "fixed K");
    EngineOptions options = test_options();
    options.speculative.drafter = SpeculativeOptions::Drafter::kNgram;
    options.speculative.draft_tokens = 4;
    options.speculative.adaptive = adaptive;
    std::unique_ptr<Engine> engine = make_engine(*g.model, options);
    const std::vector<Tokens> got = run(*engine, {prompt}, params, /*one_by_one=*/false);
    EXPECT_EQ(got[0], plain.value());
    stats[adaptive] = engine->stats();
    EXPECT_GT(stats[adaptive].spec.accepted_tokens, 0);
  }
  EXPECT_LT(stats[1].spec.draft_tokens, stats[0].spec.draft_tokens);
  EXPECT_GT(double(stats[1].spec.accepted_tokens) / double(stats[1].spec.draft_tokens),
            double(stats[0].spec.accepted_tokens) / double(stats[0].spec.draft_tokens));
  std::printf("fixed K: %lld of %lld drafts accepted; adaptive: %lld of %lld\n",
              static_cast<long long>(stats[0].spec.accepted_tokens),
              static_cast<long long>(stats[0].spec.draft_tokens),
              static_cast<long long>(stats[1].spec.accepted_tokens),
              static_cast<long long>(stats[1].spec.draft_tokens));
}

}  // namespace
}  // namespace hyla::runtime
