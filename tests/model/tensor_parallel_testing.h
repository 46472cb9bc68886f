// Random decoder layers of a config's shapes, for the tensor-parallel tests
// (tests/model/tensor_parallel_test.cpp, tests/runtime/tensor_parallel_group_test.cpp): the
// sharding is a function of the layout, not of the values.
#pragma once

#include <cmath>
#include <random>

#include "model/config.h"
#include "model/decoder_layer.h"
#include "model/model.h"
#include "testing.h"

namespace hyla::model {

/// Normal(0, 1/sqrt(fan_in)) weights [rows, fan_in] (unit-scale outputs for unit-scale inputs).
inline Tensor proj(std::initializer_list<int64_t> shape, std::mt19937& rng) {
  const int64_t fan_in = *(shape.end() - 1);
  return testing::random_normal(shape, DType::kF32, rng, 0.0f, 1.0f / std::sqrt(float(fan_in)));
}

/// A layer of `c`'s kinds at index i with random weights of the config's shapes.
inline DecoderLayer random_layer(const ModelConfig& c, int64_t i, std::mt19937& rng) {
  const int64_t hidden = c.hidden_size;
  DecoderLayer w;
  w.input_norm = testing::random_uniform({hidden}, DType::kF32, rng, -0.1f, 0.1f);
  w.post_norm = testing::random_uniform({hidden}, DType::kF32, rng, -0.1f, 0.1f);
  if (c.mixers[size_t(i)] == MixerKind::kGatedDeltaNet) {
    const LinearAttentionConfig& l = c.linear;
    const int64_t HV = l.num_v_heads;
    w.gdn.in_proj =
        proj({2 * l.num_k_heads * l.head_k_dim + 2 * HV * l.head_v_dim + 2 * HV, hidden}, rng);
    w.gdn.conv =
        testing::random_uniform({l.conv_dim(), l.conv_kernel}, DType::kF32, rng, -0.5f, 0.5f);
    w.gdn.A_log = testing::random_uniform({HV}, DType::kF32, rng, -1.0f, 1.0f);
    w.gdn.dt_bias = testing::random_uniform({HV}, DType::kF32, rng, -1.0f, 1.0f);
    w.gdn.norm = testing::random_uniform({l.head_v_dim}, DType::kF32, rng, 0.5f, 1.5f);
    w.gdn.out_proj = proj({hidden, HV * l.head_v_dim}, rng);
  } else {
    const FullAttentionConfig& a = c.attention;
    const int64_t hd = a.head_dim, per_head = a.output_gate ? 2 * hd : hd;
    w.attention.qkv_proj = proj({a.num_heads * per_head + 2 * a.num_kv_heads * hd, hidden}, rng);
    w.attention.q_norm = testing::random_uniform({hd}, DType::kF32, rng, -0.1f, 0.1f);
    w.attention.k_norm = testing::random_uniform({hd}, DType::kF32, rng, -0.1f, 0.1f);
    w.attention.o_proj = proj({hidden, a.num_heads * hd}, rng);
  }
  if (c.mlps[size_t(i)] == MlpKind::kDense) {
    w.dense.gate_up = proj({2 * c.intermediate_size, hidden}, rng);
    w.dense.down = proj({hidden, c.intermediate_size}, rng);
  } else {
    const MoeConfig& m = c.moe;
    const int64_t E = m.num_experts, I = m.expert_intermediate;
    w.moe.router = proj({E, hidden}, rng);
    w.moe.experts_gate_up = proj({E, 2 * I, hidden}, rng);
    w.moe.experts_down = proj({E, hidden, I}, rng);
    if (m.shared_intermediate > 0) {
      w.moe.shared.gate_up = proj({2 * m.shared_intermediate, hidden}, rng);
      w.moe.shared.down = proj({hidden, m.shared_intermediate}, rng);
      if (m.shared_expert_gate) w.moe.shared_gate = proj({1, hidden}, rng);
    }
  }
  return w;
}

/// A model of `c`'s kinds with the linear layers widened to H key heads and HV value heads (the
/// Qwen goldens have H = 2, too few for 4 ranks) and random weights drawn from `seed`.
inline std::unique_ptr<Model> widened_random_model(ModelConfig c, int64_t H, int64_t HV,
                                                   unsigned seed) {
  c.linear.num_k_heads = H;
  c.linear.num_v_heads = HV;
  std::mt19937 rng(seed);
  std::vector<DecoderLayer> layers;
  for (int64_t i = 0; i < c.num_layers; ++i) layers.push_back(random_layer(c, i, rng));
  const int64_t hidden = c.hidden_size, V = c.vocab_size;
  Tensor embedding = proj({V, hidden}, rng);
  Tensor norm = testing::random_uniform({hidden}, DType::kF32, rng, -0.1f, 0.1f);
  Tensor lm_head = proj({V, hidden}, rng);
  return std::make_unique<Model>(std::move(c), std::move(embedding), std::move(layers),
                                 std::move(norm), std::move(lm_head));
}

}  // namespace hyla::model
