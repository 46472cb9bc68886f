// Speculative decoding in the engine: greedy with n-gram drafts equals plain greedy decoding for
// every golden architecture, both rollback modes, the prefix cache on and off
// (speculative_testing.h; the same checks run on CUDA in runtime/cuda/engine_cuda_test.cpp).
#include "speculative_testing.h"

namespace hyla::runtime {
namespace {

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

INSTANTIATE_TEST_SUITE_P(Golden, SpeculativeTest, ::testing::ValuesIn(golden_archs()),
                         [](const auto& info) { return info.param; });

TEST(Speculative, GoldenArchitecturesPresent) {
  EXPECT_TRUE(testing::expect_golden_archs(golden_root()));
}

}  // namespace
}  // namespace hyla::runtime
