// The MTP draft head on CUDA against the same head on the CPU (the specification), on the MTP
// golden sets (model/mtp_testing.h's scene): the target step's final-hidden export (into a
// poisoned device buffer) and logits, then forward_mtp's prefill, single row and deeper draft,
// each device fed the same input hidden (the CPU's), over NaN-poisoned KV pages. Skipped when no
// CUDA device is visible.
#include <gtest/gtest.h>

#include <cstdio>

#include "cuda_testing.h"
#include "model/architecture.h"
#include "model/mtp_testing.h"

namespace hyla::model {
namespace {

using testing::MtpScene;
using testing::on_host;
using testing::PooledMemory;

// Both devices compute in fp32 from the same weights and f32 pages; they differ in summation
// order (tree reductions and cuBLASLt's blockings against sequential and OpenBLAS ones) and in
// expf by a few ulp: a regrouping of the same math, whose effect on the logits the golden
// generator measured on the plain set (testing::reference_logits_spread). The target step is
// the whole model, as tests/model/cuda/model_cuda_test.cpp's prefill (8x the spread there); the
// MTP head is one decoder layer plus fc on inputs both sides share, so it is inside the same bound.
constexpr double kCudaVsCpuSpreads = 8;

TEST(MtpCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  for (const std::string& arch : testing::mtp_arch_names()) {
    SCOPED_TRACE(arch);
    Result<std::unique_ptr<Model>> loaded = load_model(testing::mtp_model_dir(arch));
    ASSERT_OK(loaded.status());
    const Model& cpu = **loaded;
    Result<std::unique_ptr<Model>> moved = cpu.to(Device::cuda());
    ASSERT_OK(moved.status());
    const Model& gpu = **moved;
    ASSERT_TRUE(gpu.has_mtp());
    const ModelConfig& c = cpu.config();
    const double spread =
        testing::reference_logits_spread(str_cat(testing::test_data_dir(), "/golden/", arch));
    const testing::Tolerance tolerance{
        .atol = kCudaVsCpuSpreads * spread,
        .rtol = 0,
        .why =
            "fp32 on both, every reduction regrouped: kCudaVsCpuSpreads x the reference's own "
            "path-to-path spread"};
    const MtpScene scene;
    PooledMemory on_cpu(c, 2, MtpScene::kPages, MtpScene::kPageSize, Device::cpu());
    PooledMemory on_cuda(c, 2, MtpScene::kPages, MtpScene::kPageSize, Device::cuda());

    const Batch target = scene.target(false);
    const int64_t T = int64_t(target.tokens.size());
    Tensor want_hidden, got_hidden = testing::poisoned_gpu({T, c.hidden_size}, DType::kF32);
    const void* buffer = got_hidden.view().raw();
    on_cpu.memory.final_hidden = &want_hidden;
    on_cuda.memory.final_hidden = &got_hidden;
    Result<Tensor> want = cpu.forward_batch(target, on_cpu.memory);
    ASSERT_OK(want.status());
    Result<Tensor> got = gpu.forward_batch(target, on_cuda.memory);
    ASSERT_OK(got.status());
    EXPECT_EQ(got_hidden.view().raw(), buffer);
    EXPECT_CLOSE(on_host(*got), *want, tolerance);
    EXPECT_CLOSE(on_host(got_hidden), want_hidden, tolerance);

    auto compare = [&](const char* what, const Batch& batch, const Tensor& hidden, int64_t depth,
                       Tensor* out_hidden) {
      SCOPED_TRACE(what);
      Result<MtpOutput> w = cpu.forward_mtp(batch, hidden, on_cpu.memory, depth);
      ASSERT_OK(w.status());
      Result<MtpOutput> g =
          gpu.forward_mtp(batch, hidden.to(Device::cuda()), on_cuda.memory, depth);
      ASSERT_OK(g.status());
      ASSERT_TRUE(g->logits.device().is_cuda() && g->hidden.device().is_cuda());
      std::printf("%s %s: max |diff| logits %.3g, hidden %.3g (reference spread %.3g)\n",
                  arch.c_str(), what, testing::max_abs_diff(on_host(g->logits), w->logits),
                  testing::max_abs_diff(on_host(g->hidden), w->hidden), spread);
      EXPECT_CLOSE(on_host(g->logits), w->logits, tolerance);
      EXPECT_CLOSE(on_host(g->hidden), w->hidden, tolerance);
      if (out_hidden) *out_hidden = w->hidden;
    };
    compare("prefill", scene.mtp_prefill(), scene.prefill_hidden(want_hidden), 0, nullptr);
    Tensor row_out;
    compare("single row", scene.mtp_row(), scene.row_hidden(want_hidden), 0, &row_out);
    if (HasFatalFailure()) return;
    compare("deeper draft", scene.mtp_deeper(), row_out, 1, nullptr);
  }
}

}  // namespace
}  // namespace hyla::model
