// The whole model on CUDA against the same model on the CPU (the specification), for every golden
// architecture and the demo model: a varlen prefill of two sequences in one batch (37 and 70
// tokens: a partial and a > 64-token chunked sequence), then 8 decode steps of both, each fed the
// CPU's greedy token; logits of every step compared. Then greedy_generate on each device from one
// prompt: the same tokens. Pools are f32 on both sides. Skipped when no CUDA device is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "core/device_memory.h"
#include "cuda_testing.h"
#include "model/architecture.h"
#include "model/cuda/logits_testing.h"
#include "model/safetensors.h"
#include "runtime/memory/kv_page_pool.h"
#include "runtime/memory/state_pool.h"
#include "testing.h"

namespace hyla::model {
namespace {

namespace fs = std::filesystem;
using testing::on_host;

// Both devices compute in fp32 from the same weights (bf16 where the checkpoint's values are bf16
// numbers, on both sides) and f32 pools; they differ in summation order (tree reductions and
// cuBLASLt's blockings on the GPU, sequential and OpenBLAS blockings on the CPU) and in expf /
// log1pf by a few ulp. That is a regrouping of the same math, whose effect on the logits the golden
// generator measured on each model (testing::reference_logits_spread: the largest change between
// two groupings of one fp32 computation; the CPU batch-vs-alone test sees <= 1.5x it). The GPU
// regroups every reduction at once, and the errors of 8 decode steps carry through the recurrent
// state (non-expansive: they add, not grow), so the bound is a multiple of the spread: 8x. Pools
// and activations are f32; only a bf16 checkpoint's prefill GEMM inputs are rounded to bf16
// (bf16_gemm_bound). A real error (wrong slot, position, state or stride) moves logits by >= 1e-2
// on the f32 golden models, by O(1) where states or positions go wrong.
constexpr double kCudaVsCpuSpreads = 8;

/// A checkpoint stored in bf16 keeps its projections bf16 (exact), and the CUDA linear rounds the
/// input x of a bf16 GEMM (T > 16 rows: prefill) to bf16 for the tensor cores, which the CPU does
/// not: 2^-9 relative per input element. About 4 such GEMMs per layer feed the logits (mixer in and
/// out, MLP up and down) through a normalised residual stream, so independent roundings add in
/// quadrature: sqrt(4 L) 2^-9 of the logits' scale (max |logit| of the step). Decode steps (T <=
/// 16) read f32 x in the dense projections but carry the prefill's state; the routed experts'
/// grouped GEMMs (moe_grouped_linear) round x at every step, as the MLP up and down counted here.
double bf16_gemm_bound(int64_t layers, double max_abs_logit) {
  return std::sqrt(4.0 * double(layers)) * std::ldexp(1.0, -9) * max_abs_logit;
}

/// True when any tensor of the checkpoint's (first) safetensors file is bf16.
bool stored_in_bf16(const std::string& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors" ||
        entry.path().filename().string().starts_with("reference"))
      continue;
    Result<SafetensorsFile> f = SafetensorsFile::open(entry.path().string());
    if (!f.ok()) continue;
    for (const TensorEntry& e : f->tensors())
      if (e.dtype == DType::kBF16) return true;
  }
  return false;
}

/// The runtime's pools on one device for two sequences, and the views forward_batch takes.
struct Pools {
  std::optional<runtime::StatePool> states;
  std::optional<runtime::KvPagePool> pages;
  BatchMemory memory;
  std::vector<int32_t> slots;
  std::vector<std::vector<int32_t>> tables;
};

constexpr int64_t kPageSize = 16;

void make_pools(const ModelConfig& c, Device device, const std::vector<int64_t>& lengths,
                Pools& p) {
  bool any_linear = false, any_attention = false;
  for (MixerKind k : c.mixers) (is_linear_mixer(k) ? any_linear : any_attention) = true;
  if (any_linear) {
    Result<runtime::StatePool> s = runtime::StatePool::create(
        c, 4, {.conv_dtype = DType::kF32, .ssm_dtype = DType::kF32, .device = device});
    ASSERT_TRUE(s.ok()) << s.status().message();
    p.states.emplace(std::move(s.value()));
  }
  if (any_attention) {
    Result<runtime::KvPagePool> k = runtime::KvPagePool::create(
        c, 64, {.page_size = kPageSize, .dtype = DType::kF32, .device = device});
    ASSERT_TRUE(k.ok()) << k.status().message();
    p.pages.emplace(std::move(k.value()));
  }
  p.memory.page_size = kPageSize;
  for (int layer = 0; layer < int(c.num_layers); ++layer) {
    const int li = p.states ? p.states->linear_index(layer) : -1;
    const int ai = p.pages ? p.pages->attention_index(layer) : -1;
    p.memory.conv_state.push_back(li >= 0 ? p.states->conv_state(li) : TensorView());
    p.memory.ssm_state.push_back(li >= 0 ? p.states->ssm_state(li) : TensorView());
    p.memory.k_pages.push_back(ai >= 0 ? p.pages->k_cache(ai) : TensorView());
    p.memory.v_pages.push_back(ai >= 0 ? p.pages->v_cache(ai) : TensorView());
  }
  for (int64_t n : lengths) {
    if (p.states) {
      Result<int32_t> slot = p.states->allocate();
      ASSERT_TRUE(slot.ok());
      ASSERT_OK(p.states->zero(slot.value()));
      p.slots.push_back(slot.value());
    } else {
      p.slots.push_back(int32_t(p.slots.size()));
    }
    if (p.pages) {
      Result<std::vector<int32_t>> t = p.pages->allocate(p.pages->pages_for_tokens(n));
      ASSERT_TRUE(t.ok());
      p.tables.push_back(t.value());
    } else {
      p.tables.push_back({});
    }
  }
}

/// Row-wise argmax of host logits [rows, V].
std::vector<int32_t> argmax_rows(const Tensor& logits) {
  const int64_t V = logits.size(1);
  std::vector<int32_t> out;
  for (int64_t r = 0; r < logits.size(0); ++r) {
    const float* row = logits.host<float>() + r * V;
    out.push_back(int32_t(std::max_element(row, row + V) - row));
  }
  return out;
}

class ModelCudaTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelCudaTest, PrefillAndDecodeMatchCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  Result<std::unique_ptr<Model>> loaded = load_model(GetParam());
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const Model& cpu = *loaded.value();
  Result<std::unique_ptr<Model>> moved = cpu.to(Device::cuda());
  ASSERT_TRUE(moved.ok()) << moved.status().message();
  const Model& gpu = *moved.value();
  ASSERT_TRUE(gpu.device().is_cuda());
  const double spread = testing::logits_spread(GetParam());
  const bool bf16_gemms = stored_in_bf16(GetParam());
  const ModelConfig& c = cpu.config();
  const int32_t V = int32_t(c.vocab_size);
  constexpr int kDecodeSteps = 8;
  const std::vector<std::vector<int32_t>> prompts = {testing::spaced_ids(5, 37, V),
                                                     testing::spaced_ids(11, 70, V)};
  const std::vector<int64_t> capacity = {37 + kDecodeSteps, 70 + kDecodeSteps};
  Pools on_cpu, on_cuda;
  make_pools(c, Device::cpu(), capacity, on_cpu);
  make_pools(c, Device::cuda(), capacity, on_cuda);
  if (HasFatalFailure()) return;
  ASSERT_EQ(on_cpu.slots, on_cuda.slots);
  ASSERT_EQ(on_cpu.tables, on_cuda.tables);

  Batch batch;
  batch.cu_seqlens = {0};
  for (const std::vector<int32_t>& p : prompts) {
    batch.tokens.insert(batch.tokens.end(), p.begin(), p.end());
    batch.cu_seqlens.push_back(int32_t(batch.tokens.size()));
    batch.past.push_back(0);
  }
  batch.state_slots = on_cpu.slots;
  batch.page_tables = on_cpu.tables;
  batch.logits_all = true;
  for (int step = 0; step <= kDecodeSteps; ++step) {
    SCOPED_TRACE(step == 0 ? std::string("prefill") : str_cat("decode step ", step));
    Result<Tensor> want = cpu.forward_batch(batch, on_cpu.memory);
    ASSERT_TRUE(want.ok()) << want.status().message();
    Result<Tensor> got = gpu.forward_batch(batch, on_cuda.memory);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_TRUE(got->device().is_cuda());
    const Tensor got_host = on_host(got.value());
    std::printf("%s %s: max |diff| %.3g (%.2f x the reference spread %.3g)\n",
                fs::path(GetParam()).filename().c_str(), step == 0 ? "prefill" : "decode",
                testing::max_abs_diff(got_host, want.value()),
                testing::max_abs_diff(got_host, want.value()) / spread, spread);
    double max_abs = 0;
    for (double x : testing::to_f64(want.value())) max_abs = std::max(max_abs, std::abs(x));
    const testing::Tolerance tolerance{
        .atol = kCudaVsCpuSpreads * spread +
                (bf16_gemms ? bf16_gemm_bound(cpu.config().num_layers, max_abs) : 0.0),
        .rtol = 0,
        .why = bf16_gemms ? "fp32 reductions regrouped (kCudaVsCpuSpreads x the reference's "
                            "spread) plus bf16 GEMM inputs on the GPU (bf16_gemm_bound)"
                          : "fp32 on both, every reduction regrouped: kCudaVsCpuSpreads x the "
                            "reference's own path-to-path spread"};
    EXPECT_CLOSE(got_host, want.value(), tolerance);
    // next: one token per sequence, the CPU's greedy choice after its last token
    const std::vector<int32_t> next = argmax_rows(want.value());
    Batch decode;
    decode.cu_seqlens = {0, 1, 2};
    for (size_t b = 0; b < prompts.size(); ++b) {
      const int64_t last_row = batch.logits_all ? batch.cu_seqlens[b + 1] - 1 : int64_t(b);
      decode.tokens.push_back(next[size_t(last_row)]);
      decode.past.push_back(batch.past[b] + batch.cu_seqlens[b + 1] - batch.cu_seqlens[b]);
    }
    decode.state_slots = batch.state_slots;
    decode.page_tables = batch.page_tables;
    ASSERT_TRUE(decode.is_decode());
    batch = decode;
  }
}

TEST_P(ModelCudaTest, GreedyTokensMatchCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  Result<std::unique_ptr<Model>> loaded = load_model(GetParam());
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  Result<std::unique_ptr<Model>> gpu = loaded.value()->to(Device::cuda());
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  const double tie = 2 * kCudaVsCpuSpreads * testing::logits_spread(GetParam());  // both sides move
  const std::vector<int32_t> prompt =
      testing::spaced_ids(3, 21, int32_t(loaded.value()->config().vocab_size));
  Tensor want_logits, got_logits;
  Result<std::vector<int32_t>> want = greedy_generate(*loaded.value(), prompt, 12, &want_logits);
  ASSERT_TRUE(want.ok()) << want.status().message();
  Result<std::vector<int32_t>> got = greedy_generate(*gpu.value(), prompt, 12, &got_logits);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_TRUE(got_logits.device().is_cpu());
  // Equal tokens, up to the first step whose two best CPU logits are within the tolerance of each
  // other (a tie either side may break; after it the continuations are different prompts).
  for (size_t i = 0; i < want->size(); ++i) {
    if ((*want)[i] == (*got)[i]) continue;
    EXPECT_LT(testing::top2_gap(want_logits, int64_t(i)), tie)
        << "step " << i << ": CPU token " << (*want)[i] << ", CUDA token " << (*got)[i]
        << " with a clear gap between the CPU's two best logits";
    break;
  }
}

std::vector<std::string> model_dirs() {
  std::vector<std::string> dirs = testing::golden_arch_dirs(testing::golden_dir());
  const std::string demo = str_cat(HYLA_MODELS_DIR, "/hyla-demo");
  if (fs::exists(str_cat(demo, "/model.safetensors"))) dirs.push_back(demo);
  return dirs;
}

TEST(ModelCudaGolden, HasArchitectures) {
  EXPECT_TRUE(testing::expect_golden_archs(testing::golden_dir()));
}

INSTANTIATE_TEST_SUITE_P(Models, ModelCudaTest, ::testing::ValuesIn(model_dirs()),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string name = fs::path(param_info.param).filename().string();
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace hyla::model
