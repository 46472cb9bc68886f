// Engine log-probabilities on the CPU: for greedy and seeded sampled requests batched together,
// every event's logprob and top_logprobs equal a long-double log_softmax(row / temperature) of the
// logits the model gives for that position alone (model::greedy_generate over the prompt plus the
// tokens so far); the top list is the best tokens in order; asking for logprobs changes no token.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/engine_testing.h"
#include "testing.h"

namespace hyla::runtime {
namespace {

using namespace engine_testing;  // NOLINT: the shared helpers are this file's vocabulary

/// The logits row after `prompt`, from one greedy_generate step: [vocab] on the host.
std::vector<float> next_logits(const model::Model& model, const Tokens& prompt) {
  Tensor logits;
  Result<Tokens> one = model::greedy_generate(model, prompt, 1, &logits);
  HYLA_CHECK(one.ok(), one.status().message());
  const float* row = logits.host<float>();
  return std::vector<float>(row, row + logits.size(1));
}

/// log_softmax(row / T)[token] in long double (T = 0: the row itself).
double reference_logprob(const std::vector<float>& row, float temperature, int32_t token) {
  const long double scale = temperature > 0.0f ? 1.0L / temperature : 1.0L;
  long double max_z = -INFINITY;
  for (float x : row) max_z = std::max(max_z, x * scale);
  long double sum = 0.0L;
  for (float x : row) sum += std::exp(x * scale - max_z);
  return double(row[size_t(token)] * scale - max_z - std::log(sum));
}

class EngineLogprobsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineLogprobsTest, EqualLogSoftmaxOfTheRow) {
  const Golden& g = golden(GetParam());
  const int64_t n = 6;
  SamplingParams greedy_lp = greedy(n);
  greedy_lp.logprobs = true;
  greedy_lp.top_logprobs = 5;
  SamplingParams sampled_lp = greedy(n);
  sampled_lp.temperature = 0.7f;
  sampled_lp.top_k = 40;
  sampled_lp.seed = 99;
  sampled_lp.logprobs = true;
  sampled_lp.top_logprobs = 3;
  SamplingParams sampled_plain = sampled_lp;
  sampled_plain.logprobs = false;
  sampled_plain.top_logprobs = 0;

  struct Req {
    Tokens prompt;
    SamplingParams params;
    Tokens tokens;
    std::vector<TokenEvent> events;
  };
  std::vector<Req> reqs = {{g.b_prompt, greedy_lp, {}, {}},
                           {prefix(g.a_prompt, 70), sampled_lp, {}, {}},
                           {g.b_prompt, greedy(n), {}, {}},
                           {prefix(g.a_prompt, 70), sampled_plain, {}, {}}};
  std::unique_ptr<Engine> engine = make_engine(*g.model, test_options());
  for (Req& r : reqs) {
    Result<RequestId> id = engine->add_request(r.prompt, r.params);
    ASSERT_TRUE(id.ok()) << id.status().message();
  }
  while (!engine->idle())
    for (TokenEvent& e : engine->step()) {
      ASSERT_NE(e.reason, FinishReason::kError) << e.error;
      Req& r = reqs[size_t(e.request)];
      r.tokens.push_back(e.token);
      r.events.push_back(std::move(e));
    }
  expect_pools_full(*engine);
  // Logprobs change no token.
  EXPECT_EQ(reqs[0].tokens, reqs[2].tokens);
  EXPECT_EQ(reqs[1].tokens, reqs[3].tokens);
  for (const TokenEvent& e : reqs[2].events) {
    EXPECT_FALSE(e.logprob.has_value());
    EXPECT_TRUE(e.top_logprobs.empty());
  }

  // The engine's batched logits and greedy_generate's single-sequence ones are the same f32 math
  // in a different chunking and summation order (prefill chunks and batch rows vs one sequence);
  // the log-probabilities differ by up to 4e-5 on the golden models (a log-softmax moves by at
  // most twice the largest logit change). A missing temperature would move them by ~0.1 or more.
  constexpr double kTolerance = 1e-4;
  for (size_t i : {size_t(0), size_t(1)}) {
    const Req& r = reqs[i];
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_EQ(int64_t(r.events.size()), n);
    Tokens context = r.prompt;
    for (int64_t t = 0; t < n; ++t) {
      SCOPED_TRACE("token " + std::to_string(t));
      const TokenEvent& e = r.events[size_t(t)];
      const std::vector<float> row = next_logits(*g.model, context);
      const float temperature = r.params.temperature;
      ASSERT_TRUE(e.logprob.has_value());
      EXPECT_NEAR(*e.logprob, reference_logprob(row, temperature, e.token), kTolerance);
      ASSERT_EQ(int64_t(e.top_logprobs.size()), r.params.top_logprobs);
      for (size_t k = 0; k < e.top_logprobs.size(); ++k) {
        const TokenLogprob& c = e.top_logprobs[k];
        EXPECT_NEAR(c.logprob, reference_logprob(row, temperature, c.token), kTolerance);
        if (k > 0) {
          EXPECT_GE(e.top_logprobs[k - 1].logprob, c.logprob);
        }
      }
      // Nothing outside the list beats its last entry (beyond the tolerance).
      for (int32_t v = 0; v < int32_t(row.size()); ++v) {
        bool listed = false;
        for (const TokenLogprob& c : e.top_logprobs) listed |= c.token == v;
        if (!listed) {
          EXPECT_LE(reference_logprob(row, temperature, v),
                    e.top_logprobs.back().logprob + kTolerance)
              << "token " << v;
        }
      }
      if (temperature == 0.0f) {
        EXPECT_EQ(e.top_logprobs.front().token, e.token);
      }
      context.push_back(e.token);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, EngineLogprobsTest, ::testing::ValuesIn(golden_archs()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           return param.param;
                         });

TEST(EngineLogprobs, BadTopLogprobsAreRefused) {
  ASSERT_FALSE(golden_archs().empty());
  const Golden& g = golden(golden_archs().front());
  std::unique_ptr<Engine> engine = make_engine(*g.model, test_options());
  SamplingParams p = greedy(2);
  p.logprobs = true;
  p.top_logprobs = 21;
  EXPECT_ERROR_CONTAINS(engine->add_request(g.b_prompt, p).status(),
                        "top_logprobs is 21, expected in [0, 20]");
  p.logprobs = false;
  p.top_logprobs = 2;
  EXPECT_ERROR_CONTAINS(engine->add_request(g.b_prompt, p).status(), "needs logprobs = true");
  expect_pools_full(*engine);
}

}  // namespace
}  // namespace hyla::runtime
