// The draft-model drafter on CUDA (pools and weights on the device, greedy picks there): on every
// golden architecture the checks of draft_model_testing.h that the CPU passes, against the CPU's
// greedy_generate (equal up to a near tie of the CPU's two best logits). Each test skips without
// a device.
#include <gtest/gtest.h>

#include <string>

#include "cuda_testing.h"
#include "runtime/draft_model_testing.h"

namespace hyla::runtime {
namespace {

using namespace engine_testing;       // NOLINT: the shared helpers are this file's vocabulary
using namespace draft_model_testing;  // NOLINT

class DraftModelCudaTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    HYLA_SKIP_WITHOUT_CUDA();
    ASSERT_EQ(model_on(golden(GetParam()), Device::cuda()).device(), Device::cuda())
        << "Model::to(cuda:0) left the weights on the host";
  }
};

TEST_P(DraftModelCudaTest, ProposalsEqualCpuGreedy) {
  expect_drafts_equal_greedy(GetParam(), Device::cuda());
}

TEST_P(DraftModelCudaTest, EvictionsKeepProposalsExact) {
  expect_evictions_keep_drafts_exact(GetParam(), Device::cuda());
}

INSTANTIATE_TEST_SUITE_P(Golden, DraftModelCudaTest, ::testing::ValuesIn(golden_archs()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST(DraftModelCuda, GoldenArchitecturesPresent) {
  EXPECT_TRUE(testing::expect_golden_archs(golden_root()));
}

}  // namespace
}  // namespace hyla::runtime
