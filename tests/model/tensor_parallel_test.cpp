// Tensor parallelism by head (model/tensor_parallel.h), without a communicator: for the golden
// Qwen configs (qwen3_next, qwen3_5, qwen3_5_moe; H = 2 key heads, HV = 4, 4 query heads, 2 KV
// heads), N logical ranks each run the ordinary layer function on shard_layer's slice with
// shard_config's config and their own state, and the SUM of their outputs must equal the unsharded
// layer's output: every mixer (GDN, gated attention) on a 3-token and a 70-token prefill (the CPU
// delta rule runs the recurrent form below 16 tokens, the chunk form from there: 70 crosses a
// 64-token chunk) followed by a decode step, every MLP / MoE on the same inputs. The ranks' final
// GDN states, their conv channels and SSM value heads, must equal the unsharded state's slices.
// N = 2 on the golden configs; N = 4 on a golden config widened to H = 4, HV = 8 (the golden H = 2
// cannot split 4 ways; its attention then runs with one query head per rank and each KV head
// replicated on two ranks). Weights are random, of the shapes the configs give (the sharding is a
// function of the layout, not of the values), so no checkpoint is read.
#include "model/tensor_parallel.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/add.h"
#include "model/architecture.h"
#include "model/batch.h"
#include "model/tensor_parallel_testing.h"
#include "test_files.h"
#include "testing.h"

namespace hyla::model {
namespace {

using hyla::testing::all_close;
using hyla::testing::int32_tensor;
using hyla::testing::random_normal;
using hyla::testing::random_uniform;
using hyla::testing::Tolerance;

// The ranks' sum regroups each output's final projection (out_proj / o_proj / down over K = 128
// products, split into N partial sums added afterwards); everything before it is per head and
// per channel, the same arithmetic in both runs. f32 rounding of a K-term sum is bounded by about
// K * eps * sum |terms|: outputs here are O(1) with terms O(1/sqrt(K)), so
// 128 * 6e-8 * sqrt(128) ~ 1e-4 in the worst case; measured at most 2.3e-6 (mixers) and 1.4e-6
// (MLPs) over every case here, so 2e-5 + 1e-5 |want| leaves ~10x room without hiding a wrong slice
// (a misplaced head or row moves outputs by O(0.1)).
constexpr Tolerance kSumTol{2e-5, 1e-5, "f32 K=128 projection regrouped into N partial sums"};
// States are per head and computed by the same per-head arithmetic on every rank, so they agree to
// f32 rounding of the input projection (the same dot products, possibly blocked differently);
// measured at most 1.2e-7.
constexpr Tolerance kStateTol{1e-6, 1e-6, "per-head state, same arithmetic; f32 rounding only"};

ModelConfig golden_config(const std::string& arch) {
  Result<LoadedConfig> loaded = load_config(testing::golden_dir() + "/" + arch);
  HYLA_CHECK(loaded.ok(), loaded.status().message());
  return loaded->config;
}

/// One runner of a layer: its weights, config and its own memory (GDN pools of one slot, KV pages).
struct Runner {
  ModelConfig config;
  DecoderLayer layer;
  Tensor conv_pool, ssm_pool;  // GDN
  Tensor k_pages, v_pages;     // attention
  int64_t past = 0;

  static constexpr int64_t kPageSize = 16, kPages = 6;  // room for 70 + 1 tokens

  Runner(ModelConfig c, DecoderLayer w) : config(std::move(c)), layer(std::move(w)) {
    const LinearAttentionConfig& l = config.linear;
    conv_pool = Tensor::zeros({1, l.conv_dim(), l.conv_kernel - 1}, DType::kF32);
    ssm_pool = Tensor::zeros({1, l.num_v_heads, l.head_v_dim, l.head_k_dim}, DType::kF32);
    const FullAttentionConfig& a = config.attention;
    k_pages = Tensor::zeros({kPages, kPageSize, a.num_kv_heads, a.head_dim}, DType::kF32);
    v_pages = Tensor::zeros({kPages, kPageSize, a.num_kv_heads, a.head_dim}, DType::kF32);
  }

  /// The mixer's output for x [T, hidden], the tokens after what this runner consumed.
  Result<Tensor> mixer(int64_t i, const Tensor& x) {
    const int64_t T = x.size(0);
    Tensor out = Tensor::empty({T, config.hidden_size}, DType::kF32);
    if (config.mixers[size_t(i)] == MixerKind::kGatedDeltaNet) {
      const Tensor slots = int32_tensor({0}), cu = int32_tensor({0, int32_t(T)});
      LinearMemory memory;
      memory.conv_pool = conv_pool;
      memory.ssm_pool = ssm_pool;
      memory.slots = slots;
      memory.cu_seqlens = cu;
      memory.decode = T == 1;
      HYLA_RETURN_IF_ERROR(gdn_forward(layer.gdn, config, x, memory, out));
    } else {
      Batch batch;
      batch.tokens.assign(size_t(T), 0);
      batch.cu_seqlens = {0, int32_t(T)};
      batch.past = {past};
      batch.state_slots = {0};
      batch.page_tables = {{0, 1, 2, 3, 4, 5}};
      HYLA_ASSIGN_OR_RETURN(const PagedBatch paged, paged_batch(batch, Device::cpu()));
      HYLA_RETURN_IF_ERROR(
          attention_forward(layer.attention, config, x, paged, {.k = k_pages, .v = v_pages}, out));
    }
    past += T;
    return out;
  }

  Result<Tensor> mlp(int64_t i, const Tensor& x) {
    Tensor out = Tensor::empty({x.size(0), config.hidden_size}, DType::kF32);
    if (config.mlps[size_t(i)] == MlpKind::kDense) {
      HYLA_RETURN_IF_ERROR(dense_mlp_forward(layer.dense, config.mlp_activation, x, out));
    } else {
      HYLA_RETURN_IF_ERROR(moe_forward(layer.moe, config, x, out));
    }
    return out;
  }
};

/// sum over ranks of f(rank)
template <typename F>
Result<Tensor> rank_sum(std::vector<Runner>& ranks, F f) {
  Tensor sum;
  for (Runner& r : ranks) {
    HYLA_ASSIGN_OR_RETURN(Tensor part, f(r));
    if (!sum.defined()) {
      sum = part;
    } else {
      HYLA_RETURN_IF_ERROR(kernels::add({.x = part, .gate = {}, .scale = 1.0f, .y = sum}));
    }
  }
  return sum;
}

/// Every layer of `c`, N ranks: prefill of `prefill` tokens then one decode token.
void check_layers(const ModelConfig& c, int N, int64_t prefill) {
  std::mt19937 rng(1234 + uint32_t(N) * 100 + uint32_t(prefill));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    SCOPED_TRACE(::testing::Message()
                 << c.model_type << " layer " << i << " N=" << N << " prefill=" << prefill);
    const DecoderLayer whole = random_layer(c, i, rng);
    Runner ref(c, whole);
    std::vector<Runner> ranks;
    for (int r = 0; r < N; ++r) {
      Result<ModelConfig> rc = shard_config(c, r, N);
      ASSERT_OK(rc.status());
      Result<DecoderLayer> rw = shard_layer(c, i, whole, r, N);
      ASSERT_OK(rw.status());
      ranks.emplace_back(*rc, *rw);
    }
    for (int64_t T : {prefill, int64_t(1)}) {
      SCOPED_TRACE(::testing::Message() << "step of " << T << " tokens");
      const Tensor x = random_normal({T, c.hidden_size}, DType::kF32, rng);
      Result<Tensor> want = ref.mixer(i, x);
      ASSERT_OK(want.status());
      Result<Tensor> got = rank_sum(ranks, [&](Runner& r) { return r.mixer(i, x); });
      ASSERT_OK(got.status());
      EXPECT_CLOSE(*got, *want, kSumTol);

      Result<Tensor> mlp_want = ref.mlp(i, x);
      ASSERT_OK(mlp_want.status());
      Result<Tensor> mlp_got = rank_sum(ranks, [&](Runner& r) { return r.mlp(i, x); });
      ASSERT_OK(mlp_got.status());
      EXPECT_CLOSE(*mlp_got, *mlp_want, kSumTol);

      if (c.mixers[size_t(i)] != MixerKind::kGatedDeltaNet) continue;
      for (int r = 0; r < N; ++r) {
        Result<Tensor> ssm = shard_gdn_ssm_state(c, ref.ssm_pool, r, N);
        ASSERT_OK(ssm.status());
        EXPECT_CLOSE(ranks[size_t(r)].ssm_pool, *ssm, kStateTol) << "SSM state of rank " << r;
        Result<Tensor> conv = shard_gdn_conv_state(c, ref.conv_pool, r, N);
        ASSERT_OK(conv.status());
        EXPECT_CLOSE(ranks[size_t(r)].conv_pool, *conv, kStateTol) << "conv window of rank " << r;
      }
    }
  }
}

const char* const kArchs[] = {"qwen3_next", "qwen3_5", "qwen3_5_moe"};

TEST(TensorParallel, RankSumsMatchEveryLayerTwoRanks) {
  for (const char* arch : kArchs) {
    const ModelConfig c = golden_config(arch);
    check_layers(c, 2, 3);
    check_layers(c, 2, 70);
  }
}

TEST(TensorParallel, RankSumsMatchEveryLayerFourRanks) {
  for (const char* arch : kArchs) {
    ModelConfig c = golden_config(arch);
    c.linear.num_k_heads = 4;  // the golden H = 2, HV = 4 widened so that 4 ranks divide it
    c.linear.num_v_heads = 8;
    check_layers(c, 4, 70);
  }
}

TEST(TensorParallel, ShardConfigGivesPerRankCounts) {
  const ModelConfig c = golden_config("qwen3_5_moe");
  Result<ModelConfig> r = shard_config(c, 1, 2);
  ASSERT_OK(r.status());
  EXPECT_EQ(r->linear.num_k_heads, c.linear.num_k_heads / 2);
  EXPECT_EQ(r->linear.num_v_heads, c.linear.num_v_heads / 2);
  EXPECT_EQ(r->attention.num_heads, c.attention.num_heads / 2);
  EXPECT_EQ(r->attention.num_kv_heads, c.attention.num_kv_heads / 2);
  EXPECT_EQ(r->moe.expert_intermediate, c.moe.expert_intermediate / 2);
  EXPECT_EQ(r->moe.shared_intermediate, c.moe.shared_intermediate / 2);
  EXPECT_EQ(r->moe.num_experts, c.moe.num_experts);  // every rank holds every expert
  EXPECT_EQ(r->hidden_size, c.hidden_size);
  // A 1-rank split is the whole.
  Result<ModelConfig> one = shard_config(c, 0, 1);
  ASSERT_OK(one.status());
  EXPECT_EQ(one->linear.num_k_heads, c.linear.num_k_heads);
}

TEST(TensorParallel, RefusesCountsTheRanksDoNotDivide) {
  const ModelConfig c = golden_config("qwen3_next");  // H = 2, nh = 4, nkv = 2
  std::mt19937 rng(7);
  const DecoderLayer gdn = random_layer(c, 0, rng);
  EXPECT_ERROR_CONTAINS(shard_config(c, 0, 4).status(),
                        "layer 0 (gated delta net) has linear_num_key_heads H = 2, which N = 4");
  EXPECT_ERROR_CONTAINS(shard_layer(c, 0, gdn, 0, 3).status(),
                        "layer 0 (gated delta net) has linear_num_key_heads H = 2, which N = 3");
  EXPECT_ERROR_CONTAINS(
      shard_gdn_ssm_state(c, Tensor::zeros({1, 4, 32, 32}, DType::kF32), 0, 4).status(),
      "linear_num_key_heads H = 2 cannot be split over N = 4");

  ModelConfig attention_only = c;  // only the attention layer's rules apply
  for (MixerKind& m : attention_only.mixers) m = MixerKind::kFullAttention;
  EXPECT_ERROR_CONTAINS(shard_config(attention_only, 0, 8).status(),
                        "layer 0 (full attention) has num_heads = 4, which N = 8");
  attention_only.attention.num_heads = 6;
  attention_only.attention.num_kv_heads = 3;
  EXPECT_ERROR_CONTAINS(shard_config(attention_only, 0, 2).status(),
                        "layer 0 (full attention) has num_key_value_heads = 3 for N = 2");

  EXPECT_ERROR_CONTAINS(shard_config(c, 2, 2).status(), "rank 2 outside [0, 2)");
  EXPECT_ERROR_CONTAINS(shard_config(c, 0, 0).status(), "0 ranks");
  EXPECT_ERROR_CONTAINS(shard_layer(c, 9, gdn, 0, 2).status(), "layer 9 outside [0, 4)");
  // Weights that do not match the config are named.
  DecoderLayer wrong = gdn;
  wrong.gdn.out_proj = Tensor::zeros({c.hidden_size, 7}, DType::kF32);
  EXPECT_ERROR_CONTAINS(shard_layer(c, 0, wrong, 0, 2).status(), "layer 0 gdn.out_proj");
}

}  // namespace
}  // namespace hyla::model
