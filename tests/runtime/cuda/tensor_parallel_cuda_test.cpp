// Tensor parallelism over GPUs: NcclGroup (runtime/tp/nccl_group) and the engine's rank loop with a
// rank per GPU. NCCL's sums over every visible GPU (up to 4; on one GPU a group of one, whose sum
// leaves x as it is) are exact on small integers; an aborted group refuses later sums; with two
// GPUs or more, greedy tokens of every golden architecture split over 2 GPUs are the CPU's (up to
// a near tie, as the one-GPU engine's). Skips without a device or NCCL in the build, and the
// engine test with fewer than two GPUs.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "core/device_memory.h"
#include "cuda_testing.h"
#include "model/tensor_parallel.h"
#include "runtime/engine_testing.h"
#include "runtime/tp/nccl_group.h"

namespace hyla::runtime {
namespace {

using namespace engine_testing;  // NOLINT: the shared helpers are this file's vocabulary

/// GPUs 0 .. n-1 that are visible, at most `limit`.
std::vector<Device> visible_gpus(int limit) {
  std::vector<Device> gpus;
  for (int i = 0; i < limit && device_free_memory(Device::cuda(i)).ok(); ++i)
    gpus.push_back(Device::cuda(i));
  return gpus;
}

#define HYLA_SKIP_WITHOUT_NCCL() \
  if (!nccl_built()) GTEST_SKIP() << "this build has no NCCL"

// Rank r adds x_r[i] = r + 1 + i / 2: every value and sum is exact in f32, so every rank must
// hold sum_r (r + 1) + N i / 2 exactly.
TEST(NcclGroupTest, SumsOverEveryGpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  HYLA_SKIP_WITHOUT_NCCL();
  const std::vector<Device> gpus = visible_gpus(4);
  const int N = int(gpus.size());
  Result<std::unique_ptr<NcclGroup>> group = NcclGroup::create(gpus);
  ASSERT_TRUE(group.ok()) << group.status().message();
  constexpr int64_t kN = 4099;
  std::vector<std::vector<float>> got(static_cast<size_t>(N));
  std::vector<Status> status(static_cast<size_t>(N));
  std::vector<std::thread> threads;
  for (int r = 0; r < N; ++r)
    threads.emplace_back([&, r] {
      const CurrentDevice on(gpus[size_t(r)]);
      Tensor host = Tensor::empty({kN}, DType::kF32);
      for (int64_t i = 0; i < kN; ++i) host.host<float>()[i] = float(r + 1) + float(i) * 0.5f;
      Tensor x = host.to(gpus[size_t(r)]);
      status[size_t(r)] = group.value()->rank(r).sum(x.view());
      device_synchronize(gpus[size_t(r)]);
      const Tensor back = x.to(Device::cpu());
      got[size_t(r)].assign(back.host<float>(), back.host<float>() + kN);
    });
  for (std::thread& t : threads) t.join();
  const float ranks_sum = float(N * (N + 1) / 2);
  for (int r = 0; r < N; ++r) {
    ASSERT_TRUE(status[size_t(r)].ok()) << "rank " << r << ": " << status[size_t(r)].message();
    for (int64_t i = 0; i < kN; ++i)
      ASSERT_EQ(got[size_t(r)][size_t(i)], ranks_sum + float(N) * float(i) * 0.5f)
          << "rank " << r << " of " << N << ", element " << i;
  }
}

TEST(NcclGroupTest, AbortedGroupRefusesLaterSums) {
  HYLA_SKIP_WITHOUT_CUDA();
  HYLA_SKIP_WITHOUT_NCCL();
  Result<std::unique_ptr<NcclGroup>> group = NcclGroup::create({Device::cuda(0)});
  ASSERT_TRUE(group.ok()) << group.status().message();
  group.value()->fail(0);
  Tensor x = Tensor::zeros({16}, DType::kF32, Device::cuda(0));
  const Status s = group.value()->rank(0).sum(x.view());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("aborted"), std::string::npos) << s.message();
  // A host tensor is refused by name.
  Tensor host = Tensor::zeros({16}, DType::kF32);
  const Status wrong = group.value()->rank(0).sum(host.view());
  EXPECT_NE(wrong.message().find("cpu"), std::string::npos) << wrong.message();
}

class TensorParallelCudaTest : public ::testing::TestWithParam<std::string> {};

// Each rank's slice on its own GPU, the sums by NCCL: the tokens of the whole model on the CPU,
// up to a near tie (the check the one-GPU engine passes).
TEST_P(TensorParallelCudaTest, GreedyTokensOverTwoGpus) {
  HYLA_SKIP_WITHOUT_CUDA();
  HYLA_SKIP_WITHOUT_NCCL();
  const std::vector<Device> gpus = visible_gpus(2);
  if (gpus.size() < 2) GTEST_SKIP() << "one GPU visible; this test needs two";
  const Golden& g = golden(GetParam());
  ASSERT_TRUE(model::shard_config(g.model->config(), 0, 2).ok());
  EngineOptions options = test_options(Device::cuda(0));
  options.tensor_parallel.ranks = 2;
  options.tensor_parallel.devices = gpus;
  options.tensor_parallel.group = nccl_group_factory();
  const std::vector<Tokens> prompts = mixed_prompts(g);
  const int64_t n = int64_t(g.a_tokens.size());
  Result<std::unique_ptr<Engine>> engine = Engine::create(*g.model, options);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  const std::vector<Tokens> got = run(*engine.value(), prompts, greedy(n), /*one_by_one=*/false);
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    expect_cpu_greedy_tokens(g, prompts[i], got[i], n, Device::cuda(0));
  }
  expect_pools_full(*engine.value());
}

INSTANTIATE_TEST_SUITE_P(Golden, TensorParallelCudaTest, ::testing::ValuesIn(golden_archs()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           return param.param;
                         });

}  // namespace
}  // namespace hyla::runtime
