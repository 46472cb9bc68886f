// Token sampling: greedy and its limits (temperature -> 0, top_k = 1, tiny top_p), seeds,
// frequencies against known probabilities, top-k and nucleus membership against an independent
// float64 nucleus, -inf / NaN / +inf logits, a pinned token sequence, validate()'s errors, and
// token_logprobs against a long-double log-softmax (top tokens, order, ties), and probabilities()
// against a float64 reference and sample()'s own draws.
#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "testing.h"

namespace hyla::runtime {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// `n` tokens from a fresh Sampler over the same row of logits.
std::vector<int32_t> draw(const SamplingParams& params, const std::vector<float>& logits, int n) {
  Sampler sampler(params);
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(sampler.sample(logits));
  return tokens;
}

std::vector<float> random_logits(int64_t vocab, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& x : logits) x = normal(rng);
  return logits;
}

/// Token ids best first: logit descending, lower id first on ties.
std::vector<int32_t> ranked(const std::vector<float>& logits) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  return ids;
}

/// The nucleus of softmax(logits / temperature), computed in float64 straight from the
/// definition: best-first tokens until their probability sums to >= top_p.
std::set<int32_t> nucleus(const std::vector<float>& logits, double temperature, double top_p) {
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float x : logits) sum += std::exp((x - max_logit) / temperature);
  std::set<int32_t> kept;
  double cumulative = 0.0;
  for (int32_t id : ranked(logits)) {
    kept.insert(id);
    cumulative += std::exp((logits[id] - max_logit) / temperature) / sum;
    if (cumulative >= top_p) break;
  }
  return kept;
}

int32_t argmax_lowest_id(const std::vector<float>& logits) { return ranked(logits).front(); }

TEST(Sampling, GreedyPicksArgmax) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    const std::vector<float> logits = random_logits(1000, seed);
    Sampler sampler(SamplingParams{});
    EXPECT_EQ(sampler.sample(logits), argmax_lowest_id(logits)) << "seed " << seed;
  }
}

TEST(Sampling, GreedyTiesGoToLowestId) {
  Sampler sampler(SamplingParams{});
  EXPECT_EQ(sampler.sample(std::vector<float>{1.0f, 3.0f, 2.0f, 3.0f, 3.0f}), 1);
  EXPECT_EQ(sampler.sample(std::vector<float>{5.0f, 5.0f}), 0);
  EXPECT_EQ(sampler.sample(std::vector<float>{-2.0f, -1.0f, -1.0f}), 1);
}

TEST(Sampling, GreedyIgnoresFiltersAndSeed) {
  const std::vector<float> logits = random_logits(500, 4);
  const SamplingParams params{.temperature = 0.0f, .top_k = 7, .top_p = 0.3f, .seed = 99};
  for (int32_t token : draw(params, logits, 10)) EXPECT_EQ(token, argmax_lowest_id(logits));
}

TEST(Sampling, TemperatureToZeroIsGreedy) {
  // Top-2 gap >= 0.01 and T = 1e-6: the runner-up's weight is exp(-1e4), which is 0 in double.
  for (uint32_t seed : {5u, 6u, 7u}) {
    std::vector<float> logits = random_logits(1000, seed);
    const int32_t best = argmax_lowest_id(logits);
    logits[best] += 0.01f;
    const SamplingParams params{.temperature = 1e-6f, .seed = seed};
    for (int32_t token : draw(params, logits, 100)) EXPECT_EQ(token, best) << "seed " << seed;
  }
}

TEST(Sampling, TopK1AndTinyTopPAreGreedyTiesIncluded) {
  std::vector<float> logits = random_logits(1000, 8);
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  logits[900] = max_logit;  // a tie for the best, at a higher id than the first best
  logits[10] = max_logit;   // and one at a lower id
  const int32_t greedy = Sampler(SamplingParams{}).sample(logits);
  ASSERT_EQ(greedy, std::min(10, argmax_lowest_id(logits)));
  const SamplingParams top_k1{.temperature = 1.5f, .top_k = 1, .seed = 1};
  const SamplingParams tiny_top_p{.temperature = 1.5f, .top_p = 1e-6f, .seed = 2};
  const SamplingParams both{.temperature = 0.7f, .top_k = 50, .top_p = 1e-6f, .seed = 3};
  for (const SamplingParams& params : {top_k1, tiny_top_p, both})
    for (int32_t token : draw(params, logits, 200)) EXPECT_EQ(token, greedy);
}

TEST(Sampling, SameSeedSameTokensDifferentSeedDifferent) {
  const std::vector<float> logits = random_logits(1000, 9, 0.5f);  // a flat distribution
  const SamplingParams a{.temperature = 1.0f, .seed = 1234};
  SamplingParams b = a;
  b.seed = 1235;
  const std::vector<int32_t> first = draw(a, logits, 100);
  EXPECT_EQ(draw(a, logits, 100), first);
  EXPECT_NE(draw(b, logits, 100), first);
  // The same holds with both filters on (the sorted path).
  const SamplingParams c{.temperature = 0.8f, .top_k = 200, .top_p = 0.9f, .seed = 77};
  SamplingParams d = c;
  d.seed = 78;
  EXPECT_EQ(draw(c, logits, 100), draw(c, logits, 100));
  EXPECT_NE(draw(c, logits, 100), draw(d, logits, 100));
}

TEST(Sampling, PinnedSequence) {
  // The tokens for one seed and row, pinned: a change here changes every seeded request's output
  // (the generator, the uniform's derivation, the order of the sums or the filters).
  std::vector<float> logits(32);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  const SamplingParams params{.temperature = 0.9f, .top_k = 20, .top_p = 0.95f, .seed = 42};
  EXPECT_EQ(draw(params, logits, 12),
            (std::vector<int32_t>{13, 7, 13, 8, 3, 8, 26, 2, 20, 2, 14, 21}));
}

struct FrequencyCase {
  const char* name;
  float temperature;
  int64_t top_k;
  float top_p;
  std::vector<double> want;  // the probabilities after every filter, renormalised
};

TEST(Sampling, FrequenciesMatchProbabilities) {
  // Logits log(p) for p = {0.4, 0.25, 0.2, 0.1, 0.05}.
  const std::vector<double> p = {0.4, 0.25, 0.2, 0.1, 0.05};
  std::vector<float> logits;
  for (double x : p) logits.push_back(static_cast<float>(std::log(x)));
  // T = 0.5 squares p: {0.16, 0.0625, 0.04, 0.01, 0.0025} / 0.275.
  const std::vector<double> squared = {0.16 / 0.275, 0.0625 / 0.275, 0.04 / 0.275, 0.01 / 0.275,
                                       0.0025 / 0.275};
  const std::vector<FrequencyCase> cases = {
      {"T1", 1.0f, 0, 1.0f, p},
      {"T0.5", 0.5f, 0, 1.0f, squared},
      {"T1_topk3", 1.0f, 3, 1.0f, {0.4 / 0.85, 0.25 / 0.85, 0.2 / 0.85, 0, 0}},
      // cumulative 0.4, 0.65, 0.85: 0.85 is the first >= 0.7, so three tokens stay
      {"T1_topp0.7", 1.0f, 0, 0.7f, {0.4 / 0.85, 0.25 / 0.85, 0.2 / 0.85, 0, 0}},
      // top-k 4 renormalises to {0.421, 0.263, 0.211, 0.105}; top-p 0.6 then keeps two
      {"T1_topk4_topp0.6", 1.0f, 4, 0.6f, {0.4 / 0.65, 0.25 / 0.65, 0, 0, 0}},
  };
  constexpr int kDraws = 20000;
  for (const FrequencyCase& c : cases) {
    SCOPED_TRACE(c.name);
    const SamplingParams params{
        .temperature = c.temperature, .top_k = c.top_k, .top_p = c.top_p, .seed = 2024};
    std::vector<int> count(p.size(), 0);
    for (int32_t token : draw(params, logits, kDraws)) ++count[static_cast<size_t>(token)];
    for (size_t token = 0; token < p.size(); ++token) {
      const double expected = kDraws * c.want[token];
      // Each count is Binomial(N, q): sigma = sqrt(N q (1 - q)). 4 sigma fails a correct sampler
      // with probability ~6e-5 per count (and the seed is fixed); filtered tokens must be 0.
      const double sigma = std::sqrt(kDraws * c.want[token] * (1.0 - c.want[token]));
      EXPECT_LE(std::abs(count[token] - expected), 4.0 * sigma)
          << "token " << token << ": " << count[token] << " draws, expected " << expected;
    }
  }
}

TEST(Sampling, TopKNeverLeavesTheKBest) {
  for (uint32_t seed : {10u, 11u, 12u}) {
    const std::vector<float> logits = random_logits(2000, seed, 0.3f);  // flat: the tail is likely
    const std::vector<int32_t> best = ranked(logits);
    const std::set<int32_t> top2(best.begin(), best.begin() + 2);
    const SamplingParams params{.temperature = 2.0f, .top_k = 2, .seed = seed};
    std::set<int32_t> seen;
    for (int32_t token : draw(params, logits, 500)) {
      EXPECT_TRUE(top2.count(token)) << "token " << token << " is not among the 2 best";
      seen.insert(token);
    }
    EXPECT_EQ(seen, top2) << "both of the 2 best should appear in 500 draws";
  }
}

TEST(Sampling, TopKKeepsExactlyKOnTies) {
  // Tokens 1, 2, 3 tie for second: top_k = 2 keeps token 0 and the lowest id of the tie.
  const std::vector<float> logits = {2.0f, 1.0f, 1.0f, 1.0f, -1.0f};
  const SamplingParams params{.temperature = 1.0f, .top_k = 2, .seed = 5};
  for (int32_t token : draw(params, logits, 300)) EXPECT_TRUE(token == 0 || token == 1) << token;
}

struct NucleusCase {
  const char* name;
  float stddev;  // of the logits: 3 gives a nucleus of tens of tokens, 0.5 one of thousands
  uint32_t seed;
  size_t min_size, max_size;  // what the case means to cover
};

TEST(Sampling, TopPNeverLeavesTheNucleus) {
  // The sampler sorts the best 64 first and 4x more per round; the flat cases need several rounds.
  const std::vector<NucleusCase> cases = {
      {"peaked_seed20", 3.0f, 20, 2, 200},
      {"peaked_seed21", 3.0f, 21, 2, 200},
      {"flat_seed22", 0.5f, 22, 1100, 4900},
      {"flat_seed23", 0.5f, 23, 1100, 4900},
  };
  for (const NucleusCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<float> logits = random_logits(5000, c.seed, c.stddev);
    const float temperature = 0.8f;
    const std::set<int32_t> want = nucleus(logits, temperature, 0.9);
    ASSERT_GE(want.size(), c.min_size);
    ASSERT_LE(want.size(), c.max_size);
    const SamplingParams params{.temperature = temperature, .top_p = 0.9f, .seed = c.seed};
    for (int32_t token : draw(params, logits, 1000))
      EXPECT_TRUE(want.count(token)) << "token " << token << " is outside the nucleus";
  }
}

TEST(Sampling, TopKAboveTheRowKeepsAll) {
  const std::vector<float> logits = {0.0f, 0.0f, 0.0f};
  const SamplingParams params{.temperature = 1.0f, .top_k = 10, .seed = 3};
  std::set<int32_t> seen;
  for (int32_t token : draw(params, logits, 200)) seen.insert(token);
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2}));
}

TEST(Sampling, NegativeInfinityHasProbabilityZero) {
  const std::vector<float> logits = {-kInf, 0.0f, -kInf, 0.5f, -kInf};
  const SamplingParams params{.temperature = 5.0f, .seed = 6};
  for (int32_t token : draw(params, logits, 500)) EXPECT_TRUE(token == 1 || token == 3) << token;
}

TEST(Sampling, NaNIsTreatedAsNegativeInfinity) {
  std::vector<float> with_nan = random_logits(300, 30);
  std::vector<float> with_inf = with_nan;
  const int32_t best = argmax_lowest_id(with_nan);
  for (int32_t token : {best, 0, 17, 299}) {  // the best token too: greedy must skip it
    with_nan[token] = kNaN;
    with_inf[token] = -kInf;
  }
  const SamplingParams greedy{};
  const SamplingParams sampled{.temperature = 1.0f, .seed = 8};
  const SamplingParams filtered{.temperature = 1.0f, .top_k = 40, .top_p = 0.8f, .seed = 9};
  for (const SamplingParams& params : {greedy, sampled, filtered}) {
    const std::vector<int32_t> tokens = draw(params, with_nan, 300);
    EXPECT_EQ(tokens, draw(params, with_inf, 300));
    for (int32_t token : tokens) EXPECT_FALSE(std::isnan(with_nan[token])) << token;
  }
  EXPECT_NE(draw(greedy, with_nan, 1).front(), best);
}

TEST(Sampling, NoFiniteLogitGivesTokenZero) {
  const std::vector<float> logits = {-kInf, kNaN, -kInf, kNaN};
  EXPECT_EQ(draw(SamplingParams{}, logits, 1).front(), 0);
  const SamplingParams params{.temperature = 1.0f, .top_k = 2, .top_p = 0.5f, .seed = 1};
  for (int32_t token : draw(params, logits, 20)) EXPECT_EQ(token, 0);
}

TEST(Sampling, PositiveInfinityTokensShareAllProbability) {
  const std::vector<float> logits = {1.0f, kInf, 1e30f, kInf, kNaN};
  EXPECT_EQ(draw(SamplingParams{}, logits, 1).front(), 1);
  const SamplingParams params{.temperature = 1.0f, .seed = 4};
  std::set<int32_t> seen;
  for (int32_t token : draw(params, logits, 300)) seen.insert(token);
  EXPECT_EQ(seen, (std::set<int32_t>{1, 3}));
}

/// The probabilities straight from the definition, in double: the top_k best (ties -> lower id),
/// softmax(logit / T) over them, then the best-first prefix reaching top_p, renormalised.
std::vector<double> reference_probabilities(const std::vector<float>& logits, double temperature,
                                            int64_t top_k, double top_p) {
  std::vector<int32_t> kept = ranked(logits);
  if (top_k > 0) kept.resize(size_t(top_k));
  const double max_logit = logits[size_t(kept.front())];
  double total = 0.0;
  for (int32_t id : kept) total += std::exp((logits[size_t(id)] - max_logit) / temperature);
  double cumulative = 0.0, nucleus_total = 0.0;
  size_t count = 0;
  while (count < kept.size()) {
    const double w = std::exp((logits[size_t(kept[count++])] - max_logit) / temperature);
    cumulative += w / total;
    nucleus_total += w;
    if (cumulative >= top_p) break;
  }
  std::vector<double> p(logits.size(), 0.0);
  for (size_t i = 0; i < count; ++i)
    p[size_t(kept[i])] =
        std::exp((logits[size_t(kept[i])] - max_logit) / temperature) / nucleus_total;
  return p;
}

TEST(Sampling, ProbabilitiesAreTheDistributionSampleDrawsFrom) {
  const std::vector<float> logits = random_logits(300, 40);
  const std::vector<SamplingParams> cases = {
      {.temperature = 1.0f, .seed = 1},
      {.temperature = 0.6f, .top_k = 20, .seed = 2},
      {.temperature = 1.3f, .top_p = 0.8f, .seed = 3},
      {.temperature = 0.9f, .top_k = 50, .top_p = 0.7f, .seed = 4},
  };
  constexpr int kDraws = 20000;
  for (const SamplingParams& params : cases) {
    SCOPED_TRACE("T " + std::to_string(params.temperature) + ", top_k " +
                 std::to_string(params.top_k) + ", top_p " + std::to_string(params.top_p));
    Sampler sampler(params);
    std::vector<double> probs;
    sampler.probabilities(logits, probs);
    const std::vector<double> want =
        reference_probabilities(logits, params.temperature, params.top_k, params.top_p);
    ASSERT_EQ(probs.size(), want.size());
    for (size_t token = 0; token < want.size(); ++token) {
      // Both in double over <= 300 terms of size <= 1, summed in other orders: ~1e-15.
      EXPECT_NEAR(probs[token], want[token], 1e-13) << "token " << token;
      EXPECT_EQ(probs[token] == 0.0, want[token] == 0.0) << "token " << token;
    }
    // It draws nothing: the sampler's draws are those of a fresh one with the same seed.
    std::vector<int32_t> drawn;
    for (int i = 0; i < kDraws; ++i) drawn.push_back(sampler.sample(logits));
    EXPECT_EQ(drawn, draw(params, logits, kDraws));
    // And sample() follows them: tokens of probability 0 never come, and each count expected
    // >= 100 is within 5 sigma of Binomial(N, p) (a correct sampler fails one with probability
    // ~1e-6 at worst, where the binomial is most skewed; the seeds are fixed).
    std::vector<int> count(want.size(), 0);
    for (int32_t token : drawn) ++count[size_t(token)];
    for (size_t token = 0; token < want.size(); ++token) {
      const double expected = kDraws * probs[token];
      if (probs[token] == 0.0) {
        EXPECT_EQ(count[token], 0) << "token " << token;
      }
      if (expected < 100.0) continue;
      const double sigma = std::sqrt(expected * (1.0 - probs[token]));
      EXPECT_LE(std::abs(count[token] - expected), 5.0 * sigma) << "token " << token;
    }
  }
}

TEST(Sampling, ProbabilitiesOfGreedyAndInfiniteRows) {
  std::vector<double> probs;
  // Greedy: the argmax, ties -> lowest id.
  Sampler greedy(SamplingParams{});
  greedy.probabilities(std::vector<float>{0.0f, 2.0f, -1.0f, 2.0f}, probs);
  EXPECT_EQ(probs, (std::vector<double>{0.0, 1.0, 0.0, 0.0}));
  Sampler sampled(SamplingParams{.temperature = 1.0f});
  // +inf tokens share everything; NaN and -inf get nothing.
  sampled.probabilities(std::vector<float>{1.0f, kInf, 1e30f, kInf, kNaN}, probs);
  EXPECT_EQ(probs, (std::vector<double>{0.0, 0.5, 0.0, 0.5, 0.0}));
  sampled.probabilities(std::vector<float>{-kInf, 0.0f, kNaN, 0.0f}, probs);
  EXPECT_EQ(probs, (std::vector<double>{0.0, 0.5, 0.0, 0.5}));
  // No finite logit: token 0, as sample() gives.
  sampled.probabilities(std::vector<float>{-kInf, kNaN, -kInf}, probs);
  EXPECT_EQ(probs, (std::vector<double>{1.0, 0.0, 0.0}));
}

TEST(Sampling, IsStop) {
  const SamplingParams params{.stop_token_ids = {2, 151643}};
  const Sampler sampler(params);
  EXPECT_TRUE(sampler.is_stop(2));
  EXPECT_TRUE(sampler.is_stop(151643));
  EXPECT_FALSE(sampler.is_stop(3));
  EXPECT_FALSE(Sampler(SamplingParams{}).is_stop(0));
}

/// log_softmax(logits / T)[token] straight from the definition, in long double (T = 0: T = 1).
double reference_logprob(const std::vector<float>& logits, double temperature, int32_t token) {
  const long double scale = temperature > 0 ? 1.0L / temperature : 1.0L;
  long double sum = 0.0L;
  for (float x : logits) sum += std::exp(static_cast<long double>(x) * scale);
  return double(std::log(std::exp(static_cast<long double>(logits[size_t(token)]) * scale) / sum));
}

// Both sides work in (at least) double over <= 1000 terms of size <= 1: the sums agree to ~1e-13
// relative, and log-probabilities near -20 to ~1e-12 absolute.
constexpr double kLogprobTolerance = 1e-11;

TEST(Logprobs, EqualLogSoftmaxAfterTemperature) {
  for (float temperature : {0.0f, 0.3f, 1.0f, 2.5f}) {
    SCOPED_TRACE("temperature " + std::to_string(temperature));
    const std::vector<float> logits = random_logits(997, 7, 3.0f);
    for (int32_t token : {0, 5, 996, argmax_lowest_id(logits)}) {
      const TokenLogprobs got = token_logprobs(logits, token, temperature, 0);
      EXPECT_NEAR(got.logprob, reference_logprob(logits, temperature, token), kLogprobTolerance);
      EXPECT_TRUE(got.top.empty());
    }
    // The probabilities sum to 1.
    double total = 0.0;
    for (int32_t t = 0; t < 997; ++t)
      total += std::exp(token_logprobs(logits, t, temperature, 0).logprob);
    EXPECT_NEAR(total, 1.0, 1e-12) << "997 terms of a double sum";
  }
}

TEST(Logprobs, TopAreTheBestInOrderTiesToLowerId) {
  const std::vector<float> logits = random_logits(500, 11, 2.0f);
  const std::vector<int32_t> order = ranked(logits);
  for (int64_t top : {1, 5, 20}) {
    const TokenLogprobs got = token_logprobs(logits, 3, 0.8f, top);
    ASSERT_EQ(int64_t(got.top.size()), top);
    for (int64_t i = 0; i < top; ++i) {
      EXPECT_EQ(got.top[size_t(i)].token, order[size_t(i)]) << "rank " << i;
      EXPECT_NEAR(got.top[size_t(i)].logprob,
                  reference_logprob(logits, double(0.8f), order[size_t(i)]), kLogprobTolerance);
    }
  }
  // Ties: five tokens share the best logit, two the next; the lower ids come first.
  std::vector<float> tied(40, -1.0f);
  for (int32_t t : {31, 4, 17, 9, 22}) tied[size_t(t)] = 3.0f;
  for (int32_t t : {38, 2}) tied[size_t(t)] = 1.0f;
  const TokenLogprobs got = token_logprobs(tied, 0, 0.0f, 6);
  std::vector<int32_t> ids;
  for (const TokenLogprob& c : got.top) ids.push_back(c.token);
  EXPECT_EQ(ids, (std::vector<int32_t>{4, 9, 17, 22, 31, 2}));
  EXPECT_EQ(got.top[0].logprob, got.top[4].logprob);
  // More than the vocabulary: all of it, best first.
  EXPECT_EQ(token_logprobs(std::vector<float>{0.5f, 2.0f, 1.0f}, 0, 1.0f, 20).top.size(), 3u);
  EXPECT_EQ(token_logprobs(std::vector<float>{0.5f, 2.0f, 1.0f}, 0, 1.0f, 20).top[2].token, 0);
}

TEST(Logprobs, NonFiniteLogits) {
  const TokenLogprobs masked =
      token_logprobs(std::vector<float>{0.0f, -kInf, kNaN, 0.0f}, 1, 1.0f, 4);
  EXPECT_EQ(masked.logprob, -std::numeric_limits<double>::infinity());
  EXPECT_NEAR(masked.top[0].logprob, std::log(0.5), 1e-15);
  EXPECT_EQ(masked.top[0].token, 0);
  EXPECT_EQ(masked.top[1].token, 3);
  EXPECT_EQ(token_logprobs(std::vector<float>{kInf, 1.0f, kInf}, 2, 1.0f, 0).logprob,
            std::log(0.5));
  EXPECT_EQ(token_logprobs(std::vector<float>{kInf, 1.0f, kInf}, 1, 1.0f, 0).logprob,
            -std::numeric_limits<double>::infinity());
}

TEST(SamplingValidate, AcceptsDefaultsAndEdges) {
  EXPECT_OK(validate(SamplingParams{}, 1));
  EXPECT_OK(validate(SamplingParams{.temperature = 0.7f, .top_k = 100, .top_p = 1.0f}, 100));
  EXPECT_OK(validate(SamplingParams{.top_p = 1e-6f, .stop_token_ids = {0, 99}}, 100));
}

TEST(SamplingValidate, Errors) {
  constexpr int64_t kVocab = 100;
  EXPECT_ERROR_CONTAINS(validate(SamplingParams{}, 0), "vocab_size is 0, expected >= 1");
  EXPECT_ERROR_CONTAINS(validate(SamplingParams{.temperature = -0.5f}, kVocab),
                        "temperature is -0.5, expected finite and >= 0");
  EXPECT_ERROR_CONTAINS(validate(SamplingParams{.temperature = kNaN}, kVocab),
                        "temperature is nan");
  EXPECT_ERROR_CONTAINS(validate(SamplingParams{.temperature = kInf}, kVocab),
                        "temperature is inf");
  EXPECT_ERROR_CONTAINS(validate(SamplingParams{.top_p = 0.0f}, kVocab),
                        "top_p is 0, expected in (0, 1]");
  EXPECT_ERROR_CONTAINS(validate(SamplingParams{.top_p = 1.5f}, kVocab),
                        "top_p is 1.5, expected in (0, 1]");
  EXPECT_ERROR_CONTAINS(validate(SamplingParams{.top_p = -0.1f}, kVocab), "top_p is -0.1");
  EXPECT_ERROR_CONTAINS(validate(SamplingParams{.top_p = kNaN}, kVocab), "top_p is nan");
  EXPECT_ERROR_CONTAINS(validate(SamplingParams{.top_k = -1}, kVocab),
                        "top_k is -1, expected in [0, 100]");
  EXPECT_ERROR_CONTAINS(validate(SamplingParams{.top_k = 101}, kVocab),
                        "top_k is 101, expected in [0, 100]");
  EXPECT_ERROR_CONTAINS(validate(SamplingParams{.max_new_tokens = 0}, kVocab),
                        "max_new_tokens is 0, expected >= 1");
  EXPECT_ERROR_CONTAINS(validate(SamplingParams{.stop_token_ids = {5, 100}}, kVocab),
                        "stop_token_ids[1] is 100, expected in [0, 100)");
  EXPECT_ERROR_CONTAINS(validate(SamplingParams{.stop_token_ids = {-1}}, kVocab),
                        "stop_token_ids[0] is -1");
  EXPECT_ERROR_CONTAINS(validate(SamplingParams{.logprobs = true, .top_logprobs = -1}, kVocab),
                        "top_logprobs is -1, expected in [0, 20]");
  EXPECT_ERROR_CONTAINS(validate(SamplingParams{.logprobs = true, .top_logprobs = 21}, kVocab),
                        "top_logprobs is 21, expected in [0, 20]");
  EXPECT_ERROR_CONTAINS(validate(SamplingParams{.top_logprobs = 3}, kVocab),
                        "top_logprobs needs logprobs = true");
  EXPECT_OK(validate(SamplingParams{.logprobs = true, .top_logprobs = 20}, kVocab));
  EXPECT_OK(validate(SamplingParams{.logprobs = true, .top_logprobs = 20}, 5));
}

}  // namespace
}  // namespace hyla::runtime
