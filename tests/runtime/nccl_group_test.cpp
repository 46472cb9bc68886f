// NcclGroup's refusals, which need no GPU: ranks on the host, two ranks on one GPU, and (in a
// build without NCCL) any group, each named. Its sums are tested on the GPUs
// (cuda/tensor_parallel_cuda_test.cpp).
#include "runtime/tp/nccl_group.h"

#include <gtest/gtest.h>

namespace hyla::runtime {
namespace {

TEST(NcclGroupTest, RefusesRanksItCannotServe) {
  const auto message = [](const std::vector<Device>& devices) {
    Result<std::unique_ptr<NcclGroup>> group = NcclGroup::create(devices);
    EXPECT_FALSE(group.ok());
    return group.ok() ? std::string() : group.status().message();
  };
  EXPECT_NE(message({}).find("no devices"), std::string::npos);
  EXPECT_NE(message({Device::cuda(0), Device::cpu()}).find("rank 1 is on cpu"), std::string::npos);
  EXPECT_NE(message({Device::cuda(1), Device::cuda(1)}).find("two ranks on cuda:1"),
            std::string::npos);
  if (!nccl_built()) {
    EXPECT_NE(message({Device::cuda(0)}).find("no NCCL"), std::string::npos);
  }
}

}  // namespace
}  // namespace hyla::runtime
