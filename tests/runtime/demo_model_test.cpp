// The embedded demo model (models/hyla-demo, or $HYLA_DEMO_MODEL): what the issue asks it to be,
// and parity with transformers. tools/demo/train.py writes reference.json: prompts, their token
// ids and transformers' greedy continuations (the saved bf16 weights loaded as float32, torch code,
// cached decode), with the top1-top2 logit gap of every step. Hyla's engine, in float32 from the
// same bf16 weights, must generate the same tokens. Skips while the model has not been trained.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "model/architecture.h"
#include "model/json_file.h"
#include "runtime/engine.h"
#ifdef HYLA_WITH_PCRE2
#include "serve/tokenizer.h"
#endif

namespace hyla::runtime {
namespace {

namespace fs = std::filesystem;

// Hyla and transformers both compute in float32 but sum in different orders; on the golden models
// that moves logits by 1e-5..1e-4. A greedy step whose two best logits are closer than this may
// legitimately pick the other token; from there on the continuations are different prompts, so
// the comparison stops at such a step. A mismatch at any step with a wider gap is a failure.
constexpr double kTieGap = 2e-3;

std::string demo_dir() {
  if (const char* env = std::getenv("HYLA_DEMO_MODEL"); env != nullptr && env[0] != '\0')
    return env;
  return std::string(HYLA_MODELS_DIR) + "/hyla-demo";
}

class DemoModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = demo_dir();
    if (!fs::exists(fs::path(dir_) / "reference.json"))
      GTEST_SKIP() << "no demo model with a reference.json at " << dir_
                   << ": train it with tools/demo/train.py (see models/README.md)";
    Result<nlohmann::json> ref = model::read_json_file(dir_ + "/reference.json");
    ASSERT_TRUE(ref.ok()) << ref.status().message();
    ref_ = std::move(ref).value();
    ASSERT_TRUE(ref_.contains("prompts") && ref_["prompts"].is_array() && !ref_["prompts"].empty())
        << dir_ << "/reference.json has no prompts";
  }

  std::string dir_;
  nlohmann::json ref_;
};

TEST_F(DemoModelTest, IsWhatTheIssueAsks) {
  Result<model::LoadedConfig> loaded = model::load_config(dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const model::ModelConfig& c = loaded->config;
  EXPECT_EQ(c.model_type.rfind("qwen3_5", 0), 0u) << c.model_type;
  EXPECT_EQ(c.model_type.find("moe"), std::string::npos) << "expected a dense MLP";
  for (int64_t i = 0; i < c.num_layers; ++i) {
    SCOPED_TRACE("layer " + std::to_string(i));
    const bool full = (i + 1) % 4 == 0;
    EXPECT_EQ(c.mixers[size_t(i)],
              full ? model::MixerKind::kFullAttention : model::MixerKind::kGatedDeltaNet);
    EXPECT_EQ(c.mlps[size_t(i)], model::MlpKind::kDense);
  }
  EXPECT_GE(c.vocab_size, 4096);
  EXPECT_LE(c.vocab_size, 8192);
  const fs::path weights = fs::path(dir_) / "model.safetensors";
  ASSERT_TRUE(fs::exists(weights));
  EXPECT_LE(fs::file_size(weights), 30'000'000u) << "the issue allows at most 30 MB of weights";
  for (const char* file : {"tokenizer.json", "tokenizer_config.json", "MODEL_CARD.md"})
    EXPECT_TRUE(fs::exists(fs::path(dir_) / file)) << file << " is missing in " << dir_;
}

TEST_F(DemoModelTest, GreedyContinuationsMatchTransformers) {
  Result<std::unique_ptr<model::Model>> m = model::load_model(dir_);
  ASSERT_TRUE(m.ok()) << m.status().message();
  std::vector<std::vector<int32_t>> prompts;
  for (const nlohmann::json& p : ref_["prompts"])
    prompts.push_back(p.at("prompt_ids").get<std::vector<int32_t>>());
  SamplingParams params;  // greedy, no stop token: as the reference was made
  params.max_new_tokens = ref_.at("max_new_tokens").get<int64_t>();
  // All prompts in one batch: batching must not change a sequence's tokens. The conv state in
  // float32 like transformers' cache (the engine's bf16 default rounds it).
  EngineOptions options;
  options.conv_dtype = DType::kF32;
  Result<std::vector<std::vector<int32_t>>> got = generate(*m.value(), prompts, params, options);
  ASSERT_TRUE(got.ok()) << got.status().message();

  for (size_t i = 0; i < prompts.size(); ++i) {
    const nlohmann::json& p = ref_["prompts"][i];
    SCOPED_TRACE("prompt " + p.at("text").get<std::string>());
    const auto want = p.at("tokens").get<std::vector<int32_t>>();
    const auto gaps = p.at("top1_top2_gaps").get<std::vector<double>>();
    ASSERT_EQ(want.size(), size_t(params.max_new_tokens));
    ASSERT_EQ(gaps.size(), want.size());
    ASSERT_EQ(got.value()[i].size(), want.size());
    for (size_t t = 0; t < want.size(); ++t) {
      if (got.value()[i][t] == want[t]) continue;
      if (gaps[t] >= kTieGap)
        ADD_FAILURE() << "step " << t << ": Hyla chose " << got.value()[i][t] << ", transformers "
                      << want[t] << " with a top1-top2 logit gap of " << gaps[t];
      else
        std::printf("note: prompt %zu diverges at step %zu, a near tie (gap %.2g)\n", i, t,
                    gaps[t]);
      break;
    }
  }
}

#ifdef HYLA_WITH_PCRE2
TEST_F(DemoModelTest, TokenizerMatchesTransformers) {
  Result<serve::Tokenizer> tokenizer = serve::Tokenizer::load(dir_ + "/tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  for (const nlohmann::json& p : ref_["prompts"]) {
    const std::string text = p.at("text").get<std::string>();
    SCOPED_TRACE("prompt " + text);
    EXPECT_EQ(tokenizer->encode(text), p.at("prompt_ids").get<std::vector<int32_t>>());
    EXPECT_EQ(tokenizer->decode(p.at("tokens").get<std::vector<int32_t>>()),
              p.at("continuation").get<std::string>());
  }
  EXPECT_EQ(tokenizer->token_id("<|endoftext|>"), ref_.at("eos_token_id").get<int32_t>());
}
#endif

}  // namespace
}  // namespace hyla::runtime
