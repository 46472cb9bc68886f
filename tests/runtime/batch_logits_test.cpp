// Model::forward_batch over the runtime's pools equals running each sequence alone: for every
// golden architecture, a mixed step (one sequence decoding after a 70-token prefix, one prefilling
// 37 tokens from scratch, one extending a 5-token prefix by 60) gives each sequence's logits within
// kBatchVsAloneSpreads times the golden reference's own fp32 path-to-path spread of
// Model::forward on that sequence alone.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "model/architecture.h"
#include "runtime/memory/kv_page_pool.h"
#include "runtime/memory/state_pool.h"
#include "testing.h"

namespace hyla::runtime {
namespace {

namespace fs = std::filesystem;

// Same math, different grouping: the batched step runs every projection as one GEMM over all 98
// tokens where the single calls run M = 1 / 37 / 60 (other OpenBLAS kernels and blockings, chosen
// per CPU by OPENBLAS_CORETYPE), and the varlen kernels sum in another order. How far such a
// regrouping moves the logits is a property of the model, not of the code: rounding changes of
// u = 2^-24 relative per op are amplified by the layers (RMSNorm, softmax, AttnRes mixtures, MoE
// gates). The golden reference measured exactly that on this model: its generator recomputed the
// same logits through other groupings (prefix + rest vs one prefill, chunked vs full, token by
// token, cached vs uncached) and recorded the largest change in reference_meta.json; that spread is
// 6.7e-6..1.3e-5 on the Qwen / Kimi-Linear sets and 1.6e-4 on the 7-layer K3 (AttnRes + latent
// MoE), whose logits carry 10x the sensitivity. One such regrouping is one sample of the change;
// the batched step regroups every op at once and the core types pick different kernels, so the
// bound is a multiple of it. Measured on an AMD EPYC (AVX-512) over OPENBLAS_CORETYPE = Prescott,
// Haswell, SkylakeX x OMP_NUM_THREADS = 1, 2: at most 1.50x the spread (qwen3_5, 1.0e-5); K3 at
// most 1.84e-4 = 1.15x (Prescott, 2 threads; the figure another machine failed a fixed 1e-4 with).
// 4x leaves 2.7x above the worst seen; a real batching error (wrong slot, page, position or
// state) moves logits by >= 1e-2.
constexpr double kBatchVsAloneSpreads = 4;

struct Seq {
  std::vector<int32_t> prefix;  ///< processed in an earlier step
  std::vector<int32_t> step;    ///< processed in the checked step
};

std::vector<int32_t> ids(int32_t start, int64_t n, int32_t vocab) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(int32_t((start + 37 * i) % vocab));
  return v;
}

class BatchLogitsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchLogitsTest, MixedStepEqualsEachSequenceAlone) {
  Result<std::unique_ptr<model::Model>> loaded = model::load_model(GetParam());
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const model::Model& m = *loaded.value();
  const double spread = testing::reference_logits_spread(GetParam());
  const testing::Tolerance tolerance{
      .atol = kBatchVsAloneSpreads * spread,
      .rtol = 0,
      .why = "fp32 regrouping, kBatchVsAloneSpreads x the reference's own path-to-path spread"};
  const model::ModelConfig& c = m.config();
  const int32_t V = int32_t(c.vocab_size);
  const std::vector<Seq> seqs = {{ids(3, 70, V), ids(11, 1, V)},   // decode
                                 {{}, ids(5, 37, V)},              // prefill from scratch
                                 {ids(7, 5, V), ids(13, 60, V)}};  // extend
  // Pools: f32 everywhere, small pages so sequences span several.
  Result<StatePool> states = StatePool::create(c, 4, {.conv_dtype = DType::kF32});
  Result<KvPagePool> pages = KvPagePool::create(c, 64, {.page_size = 16, .dtype = DType::kF32});
  ASSERT_TRUE(states.ok() && pages.ok());
  model::BatchMemory memory;
  memory.page_size = 16;
  for (int layer = 0; layer < int(c.num_layers); ++layer) {
    const int li = states->linear_index(layer), ai = pages->attention_index(layer);
    memory.conv_state.push_back(li >= 0 ? states->conv_state(li) : TensorView());
    memory.ssm_state.push_back(li >= 0 ? states->ssm_state(li) : TensorView());
    memory.k_pages.push_back(ai >= 0 ? pages->k_cache(ai) : TensorView());
    memory.v_pages.push_back(ai >= 0 ? pages->v_cache(ai) : TensorView());
  }
  std::vector<int32_t> slots;
  std::vector<std::vector<int32_t>> tables;
  for (const Seq& s : seqs) {
    Result<int32_t> slot = states->allocate();
    ASSERT_TRUE(slot.ok());
    ASSERT_OK(states->zero(slot.value()));
    slots.push_back(slot.value());
    Result<std::vector<int32_t>> t =
        pages->allocate(pages->pages_for_tokens(int64_t(s.prefix.size() + s.step.size())));
    ASSERT_TRUE(t.ok());
    tables.push_back(t.value());
  }
  // Earlier step: each prefix alone (one batch per sequence that has one).
  for (size_t b = 0; b < seqs.size(); ++b) {
    if (seqs[b].prefix.empty()) continue;
    model::Batch pre;
    pre.tokens = seqs[b].prefix;
    pre.cu_seqlens = {0, int32_t(seqs[b].prefix.size())};
    pre.past = {0};
    pre.state_slots = {slots[b]};
    pre.page_tables = {tables[b]};
    ASSERT_TRUE(m.forward_batch(pre, memory).ok());
  }
  // The checked step: all three in one batch, logits of every token.
  model::Batch batch;
  batch.cu_seqlens = {0};
  for (size_t b = 0; b < seqs.size(); ++b) {
    batch.tokens.insert(batch.tokens.end(), seqs[b].step.begin(), seqs[b].step.end());
    batch.cu_seqlens.push_back(int32_t(batch.tokens.size()));
    batch.past.push_back(int64_t(seqs[b].prefix.size()));
  }
  batch.state_slots = slots;
  batch.page_tables = tables;
  batch.logits_all = true;
  EXPECT_FALSE(batch.is_decode());
  Result<Tensor> got = m.forward_batch(batch, memory);
  ASSERT_TRUE(got.ok()) << got.status().message();
  for (size_t b = 0; b < seqs.size(); ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    model::SequenceState alone =
        m.new_sequence(int64_t(seqs[b].prefix.size() + seqs[b].step.size()));
    if (!seqs[b].prefix.empty()) {
      ASSERT_TRUE(m.forward(seqs[b].prefix, alone).ok());
    }
    Result<Tensor> want = m.forward(seqs[b].step, alone);
    ASSERT_TRUE(want.ok());
    const TensorView got_b = got->view().slice(batch.cu_seqlens[b], batch.cu_seqlens[b + 1]);
    std::printf("%s sequence %zu: max |diff| %.3g (%.2f x the reference spread %.3g)\n",
                fs::path(GetParam()).filename().c_str(), b,
                testing::max_abs_diff(got_b, want.value()),
                testing::max_abs_diff(got_b, want.value()) / spread, spread);
    EXPECT_CLOSE(got_b, want.value(), tolerance);
  }
}

std::string golden_root() { return testing::golden_root(HYLA_TEST_DATA_DIR "/golden"); }

// An empty list (a wrong $HYLA_GOLDEN_DIR) must fail, not pass by running nothing.
TEST(BatchLogitsGolden, HasArchitectures) {
  EXPECT_TRUE(testing::expect_golden_archs(golden_root()));
}

INSTANTIATE_TEST_SUITE_P(Golden, BatchLogitsTest,
                         ::testing::ValuesIn(testing::golden_arch_dirs(golden_root())),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           return fs::path(param.param).filename().string();
                         });

}  // namespace
}  // namespace hyla::runtime
