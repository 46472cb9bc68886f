// The engine on checkpoints with an MTP draft head (tests/data/golden/<arch>_mtp, the golden
// decoder plus mtp.*): its KV pool also holds the head's attention layer and the step's memory
// lists it after the model's layers; the model's own steps are untouched by it, so greedy output
// is HF's golden tokens, as on the plain set.
#include <gtest/gtest.h>

#include "engine_testing.h"

namespace hyla::runtime {
namespace {

using namespace engine_testing;

TEST(EngineMtp, GreedyTokensAsWithoutTheHead) {
  for (const char* arch : {"qwen3_next", "qwen3_5"}) {
    SCOPED_TRACE(arch);
    const Golden& g = golden(arch);
    Result<std::unique_ptr<model::Model>> with_head =
        model::load_model(std::string(HYLA_TEST_DATA_DIR) + "/golden/" + arch + "_mtp");
    ASSERT_OK(with_head.status());
    ASSERT_TRUE((*with_head)->has_mtp());
    Result<std::vector<Tokens>> out = generate(**with_head, {g.a_prompt, g.b_prompt},
                                               greedy(int64_t(g.a_tokens.size())), test_options());
    ASSERT_OK(out.status());
    EXPECT_EQ(out.value()[0], g.a_tokens);
    EXPECT_EQ(out.value()[1], g.b_tokens);
  }
}

}  // namespace
}  // namespace hyla::runtime
