// The linear-attention backend choice on CUDA (model/linear_backends.h): the demo model decodes
// the same greedy tokens and logits with the fused decode kernel and with the separate ops; the
// golden models prefill the same logits with the chunk and the recurrent delta rule; `fused` on a
// shape the CUDA kernel does not take (golden d_k = 32) is an error naming it.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cuda_testing.h"
#include "model/architecture.h"
#include "model/cuda/logits_testing.h"
#include "model/model.h"
#include "testing.h"

namespace hyla::model {
namespace {

namespace fs = std::filesystem;
using testing::on_host;

// Both sides run on the GPU from the same weights and inputs; they differ only in how the linear
// layers group their fp32 sums (the fused decode kernel's tree reductions vs the separate ops';
// the chunk vs the recurrent rule). That is one regrouping of the same math, whose effect on the
// logits the golden generator measured per model (testing::reference_logits_spread); the
// CUDA-vs-CPU model test bounds a regrouping of every op over 8 steps by 8x it, and this is a
// smaller change, so the same bound holds. A wrong state, slot, gate or stride moves logits by
// >= 1e-2.
constexpr double kRegroupSpreads = 8;

LinearAttnBackends backends(LinearDecodeBackend d,
                            LinearPrefillBackend p = LinearPrefillBackend::kAuto) {
  LinearAttnBackends b;
  b.decode = d;
  b.prefill = p;
  return b;
}

TEST(LinearBackendsCuda, DemoModelFusedAndOpsDecodeAlike) {
  HYLA_SKIP_WITHOUT_CUDA();
  const std::string demo = std::string(HYLA_MODELS_DIR) + "/hyla-demo";
  if (!fs::exists(demo + "/model.safetensors")) GTEST_SKIP() << demo << " has no weights";
  Result<std::unique_ptr<Model>> loaded = load_model(demo);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  Result<std::unique_ptr<Model>> gpu = loaded.value()->to(Device::cuda());
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  Model& m = *gpu.value();
  const double spread = testing::logits_spread(demo);
  const std::vector<int32_t> prompt = testing::spaced_ids(3, 21, int32_t(m.config().vocab_size));
  Tensor ops_logits, fused_logits;
  m.set_linear_backends(backends(LinearDecodeBackend::kOps));
  Result<std::vector<int32_t>> ops = greedy_generate(m, prompt, 12, &ops_logits);
  ASSERT_TRUE(ops.ok()) << ops.status().message();
  m.set_linear_backends(backends(LinearDecodeBackend::kFused));
  Result<std::vector<int32_t>> fused = greedy_generate(m, prompt, 12, &fused_logits);
  ASSERT_TRUE(fused.ok()) << fused.status().message();
  // Equal tokens and logits up to the first step whose two best logits are within the bound of
  // each other (a tie either side may break; after it the continuations are different prompts).
  const testing::Tolerance tolerance{
      .atol = kRegroupSpreads * spread,
      .rtol = 0,
      .why =
          "fused vs separate decode ops on the GPU: a regrouping of the same fp32 math, "
          "kRegroupSpreads x the reference's path-to-path spread"};
  for (size_t i = 0; i < ops->size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    EXPECT_CLOSE(fused_logits.view().slice(int64_t(i), int64_t(i) + 1),
                 ops_logits.view().slice(int64_t(i), int64_t(i) + 1), tolerance);
    if ((*ops)[i] == (*fused)[i]) continue;
    EXPECT_LT(testing::top2_gap(ops_logits, int64_t(i)), 2 * kRegroupSpreads * spread)
        << "ops token " << (*ops)[i] << ", fused token " << (*fused)[i]
        << " with a clear gap between the two best logits";
    break;
  }
}

class LinearBackendsCudaGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(LinearBackendsCudaGolden, ChunkAndRecurrentPrefillAlike) {
  HYLA_SKIP_WITHOUT_CUDA();
  Result<std::unique_ptr<Model>> loaded = load_model(GetParam());
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  Result<std::unique_ptr<Model>> gpu = loaded.value()->to(Device::cuda());
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  Model& m = *gpu.value();
  // 70 tokens: one full 64-token chunk and a partial one
  const std::vector<int32_t> prompt = testing::spaced_ids(5, 70, int32_t(m.config().vocab_size));
  const auto prefill = [&](LinearPrefillBackend p) -> Result<Tensor> {
    m.set_linear_backends(backends(LinearDecodeBackend::kAuto, p));
    SequenceState s = m.new_sequence(int64_t(prompt.size()));
    HYLA_ASSIGN_OR_RETURN(Tensor logits, m.forward(prompt, s));
    return on_host(logits);
  };
  Result<Tensor> chunk = prefill(LinearPrefillBackend::kChunk);
  ASSERT_TRUE(chunk.ok()) << chunk.status().message();
  Result<Tensor> recurrent = prefill(LinearPrefillBackend::kRecurrent);
  ASSERT_TRUE(recurrent.ok()) << recurrent.status().message();
  const double spread = testing::logits_spread(GetParam());
  std::printf("%s chunk vs recurrent: max |diff| %.3g (%.2f x the spread %.3g)\n",
              fs::path(GetParam()).filename().c_str(),
              testing::max_abs_diff(chunk.value(), recurrent.value()),
              testing::max_abs_diff(chunk.value(), recurrent.value()) / spread, spread);
  EXPECT_CLOSE(chunk.value(), recurrent.value(),
               testing::Tolerance{.atol = kRegroupSpreads * spread,
                                  .rtol = 0,
                                  .why = "chunk vs recurrent delta rule on the GPU: a regrouping "
                                         "of the same fp32 math, kRegroupSpreads x the spread"});
}

TEST_P(LinearBackendsCudaGolden, FusedDecodeOnAShapeTheKernelLacksIsAnError) {
  HYLA_SKIP_WITHOUT_CUDA();
  Result<std::unique_ptr<Model>> loaded = load_model(GetParam());
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const LinearAttentionConfig& l = loaded.value()->config().linear;
  bool any_linear = false;
  for (MixerKind k : loaded.value()->config().mixers) any_linear |= is_linear_mixer(k);
  if (!any_linear || (l.head_k_dim == l.head_v_dim && (l.head_k_dim == 64 || l.head_k_dim == 128)))
    GTEST_SKIP() << "the fused CUDA kernel takes this model's linear layers";
  Result<std::unique_ptr<Model>> gpu = loaded.value()->to(Device::cuda());
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  Model& m = *gpu.value();
  m.set_linear_backends(backends(LinearDecodeBackend::kFused));
  const std::vector<int32_t> prompt = testing::spaced_ids(5, 9, int32_t(m.config().vocab_size));
  SequenceState s = m.new_sequence(10);
  ASSERT_TRUE(m.forward(prompt, s).ok());  // prefill: the decode backend plays no part
  EXPECT_ERROR_CONTAINS(m.forward(std::span(prompt.data(), 1), s).status(),
                        "decode backend 'fused' cannot run this layer on cuda");
}

TEST(LinearBackendsCudaGoldenSet, HasArchitectures) {
  EXPECT_TRUE(testing::expect_golden_archs(testing::golden_dir()));
}

INSTANTIATE_TEST_SUITE_P(Models, LinearBackendsCudaGolden,
                         ::testing::ValuesIn(testing::golden_arch_dirs(testing::golden_dir())),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return fs::path(param_info.param).filename().string();
                         });

}  // namespace
}  // namespace hyla::model
