// Speculative decoding's pure pieces: the n-gram drafter against a brute-force scan (hand-made
// sequences, random ones appended in random chunks, bad options), and the acceptance rule:
// greedy == plain greedy (ties, rejections, K = 0), every input error, and rejection sampling's
// output distribution against p by chi-square tests (point-mass and full draft rows, filters).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "chi_square.h"
#include "runtime/sampling.h"
#include "runtime/spec/acceptance.h"
#include "runtime/spec/ngram_drafter.h"
#include "testing.h"

namespace hyla::runtime {
namespace {

using testing::chi_square_critical;

using Tokens = std::vector<int32_t>;

Tokens to_vector(std::span<const int32_t> tokens) { return Tokens(tokens.begin(), tokens.end()); }

NgramDrafter drafter_of(const Tokens& tokens, NgramOptions options = {}) {
  NgramDrafter drafter(options);
  EXPECT_OK(drafter.append(tokens));
  return drafter;
}

/// A proposal with its own copy of the tokens (a draft's span dies with its drafter).
struct Proposal {
  Tokens tokens;
  int64_t ngram = 0;
  int64_t source = 0;
};

Proposal proposal_of(const Tokens& tokens, int64_t k, NgramOptions options = {}) {
  const NgramDrafter drafter = drafter_of(tokens, options);
  const NgramDraft draft = drafter.propose(k);
  return {to_vector(draft.tokens), draft.ngram, draft.source};
}

/// The drafter's rule straight from its definition: for n = max..min, scan back for the latest
/// earlier end e (<= size - 2) of the last n tokens; propose what follows, up to k tokens.
NgramDraft scan(const Tokens& tokens, const NgramOptions& options, int64_t k) {
  const int64_t size = int64_t(tokens.size());
  if (k < 1) return {};
  for (int64_t n = options.max_ngram; n >= options.min_ngram; --n) {
    for (int64_t end = size - 2; end >= n - 1; --end) {
      if (!std::equal(tokens.begin() + (end - n + 1), tokens.begin() + (end + 1), tokens.end() - n))
        continue;
      const int64_t count = std::min(k, size - 1 - end);
      return {.tokens = std::span<const int32_t>(tokens).subspan(size_t(end + 1), size_t(count)),
              .ngram = n,
              .source = end + 1};
    }
  }
  return {};
}

::testing::AssertionResult same_draft(const NgramDraft& got, const NgramDraft& want) {
  if (to_vector(got.tokens) == to_vector(want.tokens) && got.ngram == want.ngram &&
      (want.ngram == 0 || got.source == want.source))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "got " << ::testing::PrintToString(to_vector(got.tokens)) << " (n " << got.ngram
         << ", source " << got.source << "), want "
         << ::testing::PrintToString(to_vector(want.tokens)) << " (n " << want.ngram << ", source "
         << want.source << ")";
}

TEST(NgramDrafter, ProposesWhatFollowedTheLastOccurrence) {
  const NgramDrafter drafter = drafter_of({1, 2, 3, 4, 1, 2, 3});
  // "1 2 3" ended at 2: position 3 on follows.
  const NgramDraft draft = drafter.propose(3);
  EXPECT_EQ(to_vector(draft.tokens), (Tokens{4, 1, 2}));
  EXPECT_EQ(draft.ngram, 3);
  EXPECT_EQ(draft.source, 3);
  // K beyond the sequence's end: only what is there (4 1 2 3).
  EXPECT_EQ(to_vector(drafter.propose(10).tokens), (Tokens{4, 1, 2, 3}));
  EXPECT_EQ(to_vector(drafter.propose(1).tokens), (Tokens{4}));
  EXPECT_TRUE(drafter.propose(0).tokens.empty());
  EXPECT_TRUE(drafter.propose(-2).tokens.empty());
}

TEST(NgramDrafter, NoMatchProposesNothing) {
  for (const Tokens& tokens : {Tokens{}, Tokens{7}, Tokens{1, 2, 3, 4}, Tokens{5, 6}}) {
    SCOPED_TRACE(::testing::PrintToString(tokens));
    const Proposal draft = proposal_of(tokens, 4);
    EXPECT_TRUE(draft.tokens.empty());
    EXPECT_EQ(draft.ngram, 0);
  }
}

TEST(NgramDrafter, SeveralMatchesTakeTheMostRecent) {
  // "1" occurs at 1 and 4 before the end ("2 1" never): the later one wins.
  const Proposal draft = proposal_of({7, 1, 5, 8, 1, 6, 2, 1}, 3);
  EXPECT_EQ(draft.tokens, (Tokens{6, 2, 1}));
  EXPECT_EQ(draft.ngram, 1);
  EXPECT_EQ(draft.source, 5);
}

TEST(NgramDrafter, LongerMatchesWinOverMoreRecentShorterOnes) {
  const Tokens tokens = {1, 2, 9, 3, 2, 8, 1, 2};
  // "1 2" (at 0..1) beats the more recent "2" (at 4).
  const Proposal longest = proposal_of(tokens, 2);
  EXPECT_EQ(longest.tokens, (Tokens{9, 3}));
  EXPECT_EQ(longest.ngram, 2);
  // With only 1-grams, the most recent "2".
  const Proposal unigram = proposal_of(tokens, 5, {.min_ngram = 1, .max_ngram = 1});
  EXPECT_EQ(unigram.tokens, (Tokens{8, 1, 2}));
  EXPECT_EQ(unigram.ngram, 1);
  // min_ngram 2 drops the 1-gram fallback: "3 2 8 2" has no earlier "8 2".
  EXPECT_TRUE(proposal_of({3, 2, 8, 2}, 3, {.min_ngram = 2, .max_ngram = 4}).tokens.empty());
  EXPECT_EQ(proposal_of({3, 2, 8, 2}, 3).tokens, (Tokens{8, 2}));
}

TEST(NgramDrafter, OverlappingMatchesCount) {
  // "a b a" ended at 2, overlapping the suffix itself: b a follow, then the sequence ends.
  const Proposal draft = proposal_of({1, 2, 1, 2, 1}, 5);
  EXPECT_EQ(draft.tokens, (Tokens{2, 1}));
  EXPECT_EQ(draft.ngram, 3);
  // A run of one token: the longest earlier run ends one before the last.
  const Proposal run = proposal_of({4, 4, 4, 4, 4, 4}, 3);
  EXPECT_EQ(run.tokens, (Tokens{4}));
  EXPECT_EQ(run.ngram, 4);
}

TEST(NgramDrafter, IncrementalAppendEqualsRebuildAndScan) {
  const std::vector<NgramOptions> options = {{.min_ngram = 1, .max_ngram = 4},
                                             {.min_ngram = 2, .max_ngram = 3},
                                             {.min_ngram = 1, .max_ngram = 1},
                                             {.min_ngram = 3, .max_ngram = 8}};
  // Small alphabets repeat often (many matches, many overwritten positions); the larger one
  // grows the tables well past their first size.
  struct Case {
    int32_t alphabet;
    int64_t length;
    uint32_t seed;
  };
  for (const Case c : {Case{2, 200, 1}, Case{3, 300, 2}, Case{6, 300, 3}, Case{40, 400, 4}}) {
    for (const NgramOptions& option : options) {
      SCOPED_TRACE("alphabet " + std::to_string(c.alphabet) + ", seed " + std::to_string(c.seed) +
                   ", ngram " + std::to_string(option.min_ngram) + ".." +
                   std::to_string(option.max_ngram));
      std::mt19937 rng(c.seed);
      std::uniform_int_distribution<int32_t> token(0, c.alphabet - 1);
      std::uniform_int_distribution<int64_t> chunk(1, 7);
      Tokens tokens;
      NgramDrafter incremental(option);
      while (int64_t(tokens.size()) < c.length) {
        Tokens piece(size_t(chunk(rng)));
        for (int32_t& t : piece) t = token(rng);
        tokens.insert(tokens.end(), piece.begin(), piece.end());
        ASSERT_OK(incremental.append(piece));
        ASSERT_EQ(to_vector(incremental.tokens()), tokens);
        const NgramDrafter rebuilt = drafter_of(tokens, option);
        for (int64_t k : {1, 3, 8}) {
          const NgramDraft want = scan(tokens, option, k);
          ASSERT_TRUE(same_draft(incremental.propose(k), want)) << "size " << tokens.size();
          ASSERT_TRUE(same_draft(rebuilt.propose(k), want)) << "size " << tokens.size();
        }
      }
    }
  }
}

TEST(NgramDrafter, LongContextMatchesTheScan) {
  // 20k tokens of a 50k vocabulary with a repeated passage: tables of 20k entries per level.
  std::mt19937 rng(9);
  std::uniform_int_distribution<int32_t> token(0, 49999);
  Tokens tokens(20000);
  for (int32_t& t : tokens) t = token(rng);
  std::copy(tokens.begin() + 1000, tokens.begin() + 1100, tokens.begin() + 15000);
  NgramDrafter drafter(NgramOptions{});
  for (size_t at = 0; at < tokens.size(); at += 1000) {
    ASSERT_OK(drafter.append(std::span<const int32_t>(tokens).subspan(at, 1000)));
  }
  // Cut inside the copied passage: "... tokens[1000 + 49]" is matched 4 tokens long.
  NgramDrafter inside(NgramOptions{});
  ASSERT_OK(inside.append(std::span<const int32_t>(tokens).first(15050)));
  const Tokens prefix(tokens.begin(), tokens.begin() + 15050);
  const NgramDraft draft = inside.propose(8);
  EXPECT_TRUE(same_draft(draft, scan(prefix, NgramOptions{}, 8)));
  EXPECT_EQ(draft.ngram, 4);
  EXPECT_EQ(draft.source, 1050);
  EXPECT_TRUE(same_draft(drafter.propose(8), scan(tokens, NgramOptions{}, 8)));
}

TEST(NgramDrafter, BadOptionsAreRefused) {
  EXPECT_OK(validate(NgramOptions{}));
  EXPECT_OK(validate(NgramOptions{.min_ngram = 32, .max_ngram = 32}));
  EXPECT_ERROR_CONTAINS(validate(NgramOptions{.min_ngram = 0, .max_ngram = 4}), "min_ngram is 0");
  EXPECT_ERROR_CONTAINS(validate(NgramOptions{.min_ngram = 3, .max_ngram = 2}),
                        "min_ngram is 3, expected in [1, max_ngram = 2]");
  EXPECT_ERROR_CONTAINS(validate(NgramOptions{.min_ngram = 1, .max_ngram = 0}), "max_ngram is 0");
  EXPECT_ERROR_CONTAINS(validate(NgramOptions{.min_ngram = 1, .max_ngram = 33}),
                        "max_ngram is 33, expected in [1, 32]");
  EXPECT_ERROR_CONTAINS(validate(NgramOptions{.min_ngram = -1, .max_ngram = -1}),
                        "max_ngram is -1");
}

// ---- acceptance: greedy ----

/// Rows [K + 1, vocab] whose argmaxes are `best` (logit 2 there, others in [-1, 1)).
std::vector<float> rows_with_argmax(const Tokens& best, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> logits(best.size() * size_t(vocab));
  for (float& x : logits) x = uniform(rng);
  for (size_t i = 0; i < best.size(); ++i) logits[i * size_t(vocab) + size_t(best[i])] = 2.0f;
  return logits;
}

struct GreedyCase {
  const char* name;
  Tokens drafts;
  int64_t accepted;
  Tokens emitted;
};

TEST(Acceptance, GreedyMatchesPlainGreedy) {
  constexpr int64_t kVocab = 6;
  const Tokens best = {3, 0, 5, 2};  // the argmax of rows 0..3
  const std::vector<float> logits = rows_with_argmax(best, kVocab, 5);
  const std::vector<GreedyCase> cases = {
      {"all_accepted", {3, 0, 5}, 3, {3, 0, 5, 2}},
      {"first_rejected", {1, 0, 5}, 0, {3}},
      {"second_rejected", {3, 4, 5}, 1, {3, 0}},
      {"last_rejected", {3, 0, 1}, 2, {3, 0, 5}},
  };
  for (const GreedyCase& c : cases) {
    SCOPED_TRACE(c.name);
    Sampler target(SamplingParams{});
    std::mt19937_64 rng(1);
    const std::mt19937_64 before = rng;
    Result<Acceptance> got = accept_drafts(logits, kVocab, {.tokens = c.drafts}, target, rng);
    ASSERT_OK(got.status());
    EXPECT_EQ(got->accepted, c.accepted);
    EXPECT_EQ(got->tokens, c.emitted);
    EXPECT_TRUE(rng == before) << "greedy acceptance drew from the generator";
    // Plain greedy decoding over the same rows gives the same tokens.
    Sampler plain(SamplingParams{});
    for (size_t i = 0; i < got->tokens.size(); ++i)
      EXPECT_EQ(got->tokens[i],
                plain.sample(std::span<const float>(logits).subspan(i * kVocab, kVocab)));
  }
  // K = 0: the argmax of the one row.
  Sampler target(SamplingParams{});
  std::mt19937_64 rng(1);
  Result<Acceptance> none =
      accept_drafts(std::span<const float>(logits).first(kVocab), kVocab, {}, target, rng);
  ASSERT_OK(none.status());
  EXPECT_EQ(none->accepted, 0);
  EXPECT_EQ(none->tokens, (Tokens{3}));
}

TEST(Acceptance, GreedyTiesGoToTheLowestId) {
  // Row 0: ids 2 and 4 tie for the max; row 1: every id ties.
  const std::vector<float> logits = {0.0f, 1.0f, 3.0f, -1.0f, 3.0f,  //
                                     0.5f, 0.5f, 0.5f, 0.5f,  0.5f};
  Sampler target(SamplingParams{});
  std::mt19937_64 rng(1);
  const Tokens four = {4};
  Result<Acceptance> rejected = accept_drafts(logits, 5, {.tokens = four}, target, rng);
  ASSERT_OK(rejected.status());
  EXPECT_EQ(rejected->accepted, 0);
  EXPECT_EQ(rejected->tokens, (Tokens{2}));
  const Tokens two = {2};
  Result<Acceptance> accepted = accept_drafts(logits, 5, {.tokens = two}, target, rng);
  ASSERT_OK(accepted.status());
  EXPECT_EQ(accepted->accepted, 1);
  EXPECT_EQ(accepted->tokens, (Tokens{2, 0}));
}

TEST(Acceptance, BadInputsAreRefused) {
  const std::vector<float> logits(3 * 4, 0.0f);  // K = 2, vocab 4
  const Tokens drafts = {1, 2};
  std::vector<float> q(2 * 4, 0.25f);
  for (float temperature : {0.0f, 1.0f}) {
    SCOPED_TRACE("temperature " + std::to_string(temperature));
    Sampler target(SamplingParams{.temperature = temperature});
    std::mt19937_64 rng(3);
    const std::mt19937_64 before = rng;
    const auto accept = [&](std::span<const float> rows, int64_t vocab, const Drafts& d) {
      return accept_drafts(rows, vocab, d, target, rng).status();
    };
    EXPECT_ERROR_CONTAINS(accept(logits, 0, {.tokens = drafts}),
                          "vocab is 0, expected in [1, 2^31)");
    EXPECT_ERROR_CONTAINS(accept(std::span<const float>(logits).first(8), 4, {.tokens = drafts}),
                          "logits hold 8 values, expected (K + 1) * vocab = 12");
    const Tokens outside = {1, 4};
    EXPECT_ERROR_CONTAINS(accept(logits, 4, {.tokens = outside}),
                          "draft 1 is token 4, expected in [0, 4)");
    const Tokens negative = {-1, 0};
    EXPECT_ERROR_CONTAINS(accept(logits, 4, {.tokens = negative}), "draft 0 is token -1");
    EXPECT_ERROR_CONTAINS(
        accept(logits, 4, {.tokens = drafts, .probs = std::span<const float>(q).first(4)}),
        "draft probs hold 4 values, expected 0 (point masses) or K * vocab = 8");
    std::vector<float> bad = q;
    bad[5] = -0.5f;
    EXPECT_ERROR_CONTAINS(accept(logits, 4, {.tokens = drafts, .probs = bad}),
                          "draft probs[1, 1] is -0.5, expected finite and >= 0");
    bad = q;
    bad[2] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_ERROR_CONTAINS(accept(logits, 4, {.tokens = drafts, .probs = bad}),
                          "draft probs[0, 2] is nan");
    bad = q;
    bad[3] = std::numeric_limits<float>::infinity();
    EXPECT_ERROR_CONTAINS(accept(logits, 4, {.tokens = drafts, .probs = bad}),
                          "draft probs[0, 3] is inf");
    bad = q;
    std::fill(bad.begin() + 4, bad.end(), 0.0f);
    EXPECT_ERROR_CONTAINS(accept(logits, 4, {.tokens = drafts, .probs = bad}),
                          "draft probs row 1 sums to 0");
    bad = q;
    bad[1] = 0.0f;
    EXPECT_ERROR_CONTAINS(accept(logits, 4, {.tokens = drafts, .probs = bad}),
                          "draft 0 is token 1 but its draft probability is 0");
    EXPECT_TRUE(rng == before) << "a refused call drew from the generator";
    EXPECT_OK(accept(logits, 4, {.tokens = drafts, .probs = q}));
  }
}

// ---- acceptance: rejection sampling's output distribution ----

TEST(Acceptance, ChiSquareCriticalValuesMatchTheTables) {
  // Textbook upper-tail critical values (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.4).
  EXPECT_NEAR(chi_square_critical(1, 0.05), 3.841, 1e-3);
  EXPECT_NEAR(chi_square_critical(2, 0.01), 9.210, 1e-3);
  EXPECT_NEAR(chi_square_critical(7, 0.001), 24.322, 1e-3);
  EXPECT_NEAR(chi_square_critical(10, 0.001), 29.588, 1e-3);
}

/// Each check below fails a correct rule with probability 1e-6 (and the seeds are fixed, so a
/// run repeats): about 24 checks, under 3e-5 for the whole test.
constexpr double kFalseFailure = 1e-6;

/// Chi-square goodness of fit of `counts` to `want` (probabilities); tokens with want 0 must
/// have count 0. Pearson's statistic is chi-square with (tokens of want > 0) - 1 degrees of
/// freedom asymptotically; every expected count here is >= 20, where the approximation holds.
::testing::AssertionResult fits(const std::vector<int64_t>& counts,
                                const std::vector<double>& want) {
  const int64_t n = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  double statistic = 0.0;
  int64_t categories = 0;
  std::string table;
  for (size_t token = 0; token < want.size(); ++token) {
    const double expected = double(n) * want[token];
    table += " [" + std::to_string(token) + "] " + std::to_string(counts[token]) + " vs " +
             std::to_string(expected);
    if (want[token] == 0.0) {
      if (counts[token] != 0)
        return ::testing::AssertionFailure() << "token " << token << " has probability 0 but was "
                                             << "drawn " << counts[token] << " times:" << table;
      continue;
    }
    if (expected < 20.0)
      return ::testing::AssertionFailure() << "expected count " << expected << " of token " << token
                                           << " is too small for the test:" << table;
    ++categories;
    statistic += (double(counts[token]) - expected) * (double(counts[token]) - expected) / expected;
  }
  if (categories < 2) return ::testing::AssertionSuccess();  // one token: counts checked above
  const double critical = chi_square_critical(categories - 1, kFalseFailure);
  if (statistic <= critical) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "chi-square " << statistic << " > " << critical << " (" << categories - 1
         << " dof, false-failure rate " << kFalseFailure << ") from " << n << " draws:" << table;
}

/// Logits log(p) for a probability row (0 -> -inf).
std::vector<float> log_row(const std::vector<double>& p) {
  std::vector<float> row;
  for (double x : p)
    row.push_back(x > 0.0 ? float(std::log(x)) : -std::numeric_limits<float>::infinity());
  return row;
}

struct SamplingCase {
  const char* name;
  float temperature;
  int64_t top_k;
  std::vector<std::vector<double>> rows;  ///< K + 1 rows that log_row turns into logits
  std::vector<std::vector<double>> want;  ///< p of each row after the params' filters
  /// K point-mass drafts, or, with `q`, K rows the drafts are drawn from afresh for every call
  /// (rejection sampling keeps p only for drafts that really come from q).
  Tokens drafts;
  std::vector<std::vector<double>> q;
};

/// A token drawn from the probability row `q`.
int32_t draw_from(const std::vector<double>& q, std::mt19937_64& rng) {
  const double u = uniform_double(rng);
  double cumulative = 0.0;
  for (size_t t = 0; t < q.size(); ++t) {
    cumulative += q[t];
    if (u < cumulative) return int32_t(t);
  }
  return int32_t(q.size() - 1);
}

/// softmax(log(p) / temperature) over the `keep` most likely tokens (ids in `keep`), in double.
std::vector<double> filtered(const std::vector<double>& p, double temperature, const Tokens& keep) {
  std::vector<double> out(p.size(), 0.0);
  double total = 0.0;
  for (int32_t t : keep) total += out[size_t(t)] = std::pow(p[size_t(t)], 1.0 / temperature);
  for (double& x : out) x /= total;
  return out;
}

TEST(Acceptance, SamplingEmitsTheTargetDistribution) {
  // vocab 8; p0, p1, p2 are the target's rows for the first, second and bonus positions.
  const std::vector<double> p0 = {0.30, 0.05, 0.20, 0.10, 0.15, 0.04, 0.10, 0.06};
  const std::vector<double> p1 = {0.05, 0.25, 0.05, 0.30, 0.05, 0.10, 0.10, 0.10};
  const std::vector<double> p2 = {0.10, 0.10, 0.20, 0.05, 0.05, 0.20, 0.25, 0.05};
  // A draft model that disagrees: mass where p has little, none on some tokens p likes.
  const std::vector<double> q0 = {0.10, 0.30, 0.40, 0.00, 0.10, 0.00, 0.00, 0.10};
  const std::vector<double> q1 = {0.00, 0.20, 0.10, 0.50, 0.00, 0.00, 0.10, 0.10};
  // T = 0.7, top_k = 5: p0's five best are ids 0, 2, 4, 3, 6.
  const Tokens p0_top5 = {0, 2, 4, 3, 6}, p1_top5 = {3, 1, 5, 6, 7}, p2_top5 = {6, 2, 5, 0, 1};
  const std::vector<SamplingCase> cases = {
      {"point_mass", 1.0f, 0, {p0, p1, p2}, {p0, p1, p2}, {2, 3}, {}},
      {"point_mass_unlikely", 1.0f, 0, {p0, p1, p2}, {p0, p1, p2}, {5, 0}, {}},
      {"full_q", 1.0f, 0, {p0, p1, p2}, {p0, p1, p2}, {2, 3}, {q0, q1}},
      {"full_q_equals_p", 1.0f, 0, {p0, p1, p2}, {p0, p1, p2}, {0, 3}, {p0, p1}},
      // top-k drops token 1 of row 0, which the point mass drafts: never accepted.
      {"filters_point_mass_dropped",
       0.7f,
       5,
       {p0, p1, p2},
       {filtered(p0, 0.7, p0_top5), filtered(p1, 0.7, p1_top5), filtered(p2, 0.7, p2_top5)},
       {1, 3},
       {}},
      {"filters_full_q",
       0.7f,
       5,
       {p0, p1, p2},
       {filtered(p0, 0.7, p0_top5), filtered(p1, 0.7, p1_top5), filtered(p2, 0.7, p2_top5)},
       {2, 3},
       {q0, q1}},
  };
  constexpr int64_t kVocab = 8;
  constexpr int kDraws = 60000;
  for (const SamplingCase& c : cases) {
    SCOPED_TRACE(c.name);
    const int64_t k = int64_t(c.drafts.size());
    std::vector<float> logits, q;
    for (const auto& row : c.rows) {
      const std::vector<float> l = log_row(row);
      logits.insert(logits.end(), l.begin(), l.end());
    }
    for (const auto& row : c.q)
      for (double x : row) q.push_back(float(x));
    // The Sampler's own p is the case's `want` (up to log / exp rounding in f32).
    Sampler target(SamplingParams{.temperature = c.temperature, .top_k = c.top_k});
    std::vector<double> p;
    for (int64_t i = 0; i <= k; ++i) {
      target.probabilities(std::span<const float>(logits).subspan(size_t(i * kVocab), kVocab), p);
      for (int64_t t = 0; t < kVocab; ++t)
        EXPECT_NEAR(p[size_t(t)], c.want[size_t(i)][size_t(t)], 1e-6)
            << "row " << i << " token " << t << ": logits are log(p) rounded to f32";
    }
    // counts[j]: the j-th emitted token, over the draws whose tokens before j are the drafts
    // (the context plain decoding would have had for row j); its law must be p of row j.
    std::vector<std::vector<int64_t>> counts(size_t(k + 1), std::vector<int64_t>(kVocab, 0));
    std::vector<int64_t> accepted_at_least(size_t(k + 1), 0);
    std::mt19937_64 rng(20240601), draft_rng(77);
    Tokens drafts = c.drafts;
    for (int draw = 0; draw < kDraws; ++draw) {
      if (!c.q.empty()) {
        for (int64_t i = 0; i < k; ++i) drafts[size_t(i)] = draw_from(c.q[size_t(i)], draft_rng);
      }
      Result<Acceptance> got =
          accept_drafts(logits, kVocab, {.tokens = drafts, .probs = q}, target, rng);
      ASSERT_OK(got.status());
      ASSERT_EQ(int64_t(got->tokens.size()), got->accepted + 1);
      for (int64_t j = 0; j <= got->accepted; ++j) {
        ++counts[size_t(j)][size_t(got->tokens[size_t(j)])];
        ++accepted_at_least[size_t(j)];
        if (j < got->accepted) {
          ASSERT_EQ(got->tokens[size_t(j)], drafts[size_t(j)]);
        }
      }
    }
    // Each position j is tested when at least 2000 draws reached it (enough for every expected
    // count >= 20 here); the first always is.
    for (int64_t j = 0; j <= k; ++j) {
      if (accepted_at_least[size_t(j)] < 2000) continue;
      EXPECT_TRUE(fits(counts[size_t(j)], c.want[size_t(j)])) << "emitted token " << j;
    }
    // The rule must also accept as often as it can: draft 0 stands with probability
    // sum_x min(p(x), q(x)) (1 - total variation; p(x) for a point mass on x); a rule that
    // always rejects and draws from p would pass the fits above. Binomial, within 5.3 sigma
    // (two-sided tail 1.2e-7), plus 3 draws: where q = p the rate is 1 - O(1e-7) (f32 rounding
    // of p and q), the normal approximation fails, and the rejections are Poisson with mean
    // < 0.01, more than 3 of them with probability < 1e-9.
    double rate = 0.0;
    for (int64_t t = 0; t < kVocab; ++t) {
      const double q0t = c.q.empty() ? (t == c.drafts[0] ? 1.0 : 0.0) : c.q[0][size_t(t)];
      rate += std::min(c.want[0][size_t(t)], q0t);
    }
    const double stood = double(accepted_at_least[1]);
    const double sigma = std::sqrt(kDraws * rate * std::max(0.0, 1.0 - rate));
    EXPECT_LE(std::abs(stood - kDraws * rate), 5.3 * sigma + 3.0)
        << stood << " of " << kDraws << " first drafts stood, expected rate " << rate;
  }
}

TEST(Acceptance, SamplingRepeatsForASeed) {
  const std::vector<float> logits = log_row({0.2, 0.3, 0.1, 0.4, 0.25, 0.25, 0.25, 0.25});
  const Tokens drafts = {1};
  const auto run = [&](uint64_t seed) {
    Sampler target(SamplingParams{.temperature = 1.0f});
    std::mt19937_64 rng(seed);
    Tokens all;
    for (int i = 0; i < 200; ++i) {
      Result<Acceptance> got = accept_drafts(logits, 4, {.tokens = drafts}, target, rng);
      EXPECT_OK(got.status());
      all.insert(all.end(), got->tokens.begin(), got->tokens.end());
    }
    return all;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

}  // namespace
}  // namespace hyla::runtime
