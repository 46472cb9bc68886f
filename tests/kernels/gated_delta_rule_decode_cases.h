// Problems for the fused decode / verify / commit tests (header-only), shared by the CPU test
// (kernels/gated_delta_rule_decode_test.cpp) and the CUDA test
// (kernels/cuda/gated_delta_rule_decode_cuda_test.cpp): a case (gate, heads, dims, dtypes, fused
// norm), its random host tensors, deep copies to a device, and the params that view them.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/gated_delta_rule_decode.h"
#include "testing.h"

namespace hyla::testing {

enum class DecodeGate { kGdn, kKda, kKdaSafe };

inline const char* gate_name(DecodeGate gate) {
  switch (gate) {
    case DecodeGate::kGdn: return "gdn";
    case DecodeGate::kKda: return "kda";
    case DecodeGate::kKdaSafe: return "kda-safe";
  }
  return "?";
}

/// Conv kernel size of every decode case (the models' 4).
inline constexpr int64_t kDecodeConvKernel = 4;
/// The KDA safe gate's lower bound in these tests (K3's value).
inline constexpr float kSafeGateLowerBound = -5.0f;

struct DecodeCase {
  DecodeGate gate = DecodeGate::kGdn;
  int64_t H = 1, HV = 1, d_k = 32, d_v = 32;
  DType act = DType::kF32;   ///< qkv, a, b, o, norm_gate
  DType pool = DType::kF32;  ///< SSM state pool and step_states
  DType conv = DType::kF32;  ///< conv-state pool
  bool norm = false;         ///< fused gated RMSNorm (silu gate for GDN, sigmoid for KDA)
  float scale = 0.0f;        ///< 0 = d_k^-1/2

  bool kda() const { return gate != DecodeGate::kGdn; }
  /// "gdn_H1_HV2_dk32_dv32_act-bf16_pool-f32_conv-bf16_norm"
  std::string name() const {
    return str_cat(gate_name(gate), "_H", H, "_HV", HV, "_dk", d_k, "_dv", d_v, "_act-",
                   dtype_name(act), "_pool-", dtype_name(pool), "_conv-", dtype_name(conv),
                   norm ? "_norm" : "", scale != 0.0f ? str_cat("_scale", scale) : "");
  }
};

/// Every gate x GVA (1:1 as H = HV = 2, 2:1 as H = 1, HV = 2) x activation dtype x pool dtype x
/// fused norm, at d_k = d_v = `dim`; the conv pool has the activations' dtype.
inline std::vector<DecodeCase> decode_case_grid(int64_t dim) {
  std::vector<DecodeCase> cases;
  for (DecodeGate gate : {DecodeGate::kGdn, DecodeGate::kKda, DecodeGate::kKdaSafe})
    for (int64_t H : {2, 1})
      for (DType act : {DType::kF32, DType::kBF16})
        for (DType pool : {DType::kF32, DType::kBF16})
          for (bool norm : {false, true})
            cases.push_back({.gate = gate,
                             .H = H,
                             .HV = 2,
                             .d_k = dim,
                             .d_v = dim,
                             .act = act,
                             .pool = pool,
                             .conv = act,
                             .norm = norm});
  return cases;
}

/// The tensors of one problem: B sequences of T tokens over pools of `num_slots` slots. On the
/// host after make_decode_tensors; to(Device) deep-copies every tensor.
struct DecodeTensors {
  int64_t T = 1;
  std::optional<float> lower_bound;
  float scale = 0.0f;
  float norm_eps = 1e-6f;
  kernels::GateActivation norm_act = kernels::GateActivation::kSilu;
  Tensor qkv;          ///< [B T, conv_dim] act, uniform [-1, 1)
  Tensor conv_weight;  ///< [conv_dim, K] f32, N(0, 0.5)
  Tensor conv_state;   ///< [slots, conv_dim, K-1] conv dtype, uniform [-1, 1)
  Tensor a;            ///< GDN [B T, HV] / KDA [B T, HV, d_k] act
  Tensor b;            ///< [B T, HV] act
  Tensor A_log;        ///< [HV] f32
  Tensor dt_bias;      ///< GDN [HV] / KDA [HV, d_k] f32
  Tensor state_pool;   ///< [slots, HV, d_v, d_k] pool dtype, N(0, 0.5)
  Tensor slots;        ///< [B] i32
  Tensor accepted;     ///< [B] i32, for commit; all T until set
  Tensor step_states;  ///< out [B, T, HV, d_v, d_k] pool dtype (verify)
  Tensor o;            ///< out [B T, HV, d_v] act
  Tensor norm_weight;  ///< [d_v] f32 (norm cases only)
  Tensor norm_gate;    ///< [B T, HV, d_v] act (norm cases only)
  /// f32 scratch of gated_delta_rule_decode_workspace_bytes (the CUDA split kernels' workspace).
  Tensor workspace;
  /// Optional (fuse_projection): qkv, a, b and norm_gate copied into one fused projection [B T,
  /// total] as the model lays them out; the params then view its row-strided segments (element
  /// offsets within a row below) instead of the four tensors, which keep giving shapes and dtype.
  Tensor projection;
  int64_t proj_qkv = 0, proj_a = 0, proj_b = 0, proj_gate = 0;

  int64_t B() const { return qkv.size(0) / T; }

  /// Deep copy of every tensor onto `device`.
  DecodeTensors to(Device device) const {
    DecodeTensors t = *this;
    for (Tensor* x : t.all())
      if (x->defined()) *x = x->to(device);
    return t;
  }
  /// Fills o and step_states with 0xff (NaN), on whichever device they live.
  void poison_outputs() {
    o.fill_bytes(0xff);
    step_states.fill_bytes(0xff);
  }

  /// t itself, or its segment of the projection at `offset`: t's shape, rows projection.size(1)
  /// elements apart, contiguous within a row.
  TensorView in_projection(const Tensor& t, int64_t offset) const {
    if (!projection.defined() || !t.defined()) return t;
    int64_t stride[kMaxDims];
    stride[t.ndim() - 1] = 1;
    for (int d = t.ndim() - 2; d >= 1; --d) stride[d] = stride[d + 1] * t.size(d + 1);
    stride[0] = projection.size(1);
    char* base = static_cast<char*>(projection.view().raw()) + offset * dtype_size(t.dtype());
    return TensorView(base, t.dtype(), t.ndim(), t.view().shape(), stride, projection.device());
  }

  kernels::GatedDeltaRuleDecodeParams decode_params(bool commit) const {
    return {.tokens_per_seq = T,
            .qkv = in_projection(qkv, proj_qkv),
            .conv_weight = conv_weight,
            .conv_state = conv_state,
            .a = in_projection(a, proj_a),
            .b = in_projection(b, proj_b),
            .A_log = A_log,
            .dt_bias = dt_bias,
            .lower_bound = lower_bound,
            .state_pool = state_pool,
            .slots = slots,
            .scale = scale,
            .commit = commit,
            .step_states = commit ? TensorView() : step_states.view(),
            .o = o,
            .norm_weight = norm_weight,
            .norm_gate = in_projection(norm_gate, proj_gate),
            .norm_eps = norm_eps,
            .norm_act = norm_act,
            .arrivals = {},
            .workspace = workspace};
  }
  kernels::GatedDeltaRuleCommitParams commit_params() const {
    return {.tokens_per_seq = T,
            .qkv = in_projection(qkv, proj_qkv),
            .conv_state = conv_state,
            .step_states = step_states,
            .state_pool = state_pool,
            .slots = slots,
            .accepted = accepted};
  }

 private:
  std::vector<Tensor*> all() {
    return {&qkv,         &conv_weight, &conv_state, &a,         &b,           &A_log,
            &dt_bias,     &state_pool,  &slots,      &accepted,  &step_states, &o,
            &norm_weight, &norm_gate,   &workspace,  &projection};
  }
};

/// Random inputs of case c (ranges chosen so that the gates span strong and weak decay: g in about
/// [-5, 0]), NaN-poisoned outputs, slots and `accepted` = T for every sequence.
inline DecodeTensors make_decode_tensors(const DecodeCase& c, int64_t B, int64_t T,
                                         const std::vector<int32_t>& slots, int64_t num_slots,
                                         std::mt19937& rng) {
  const int64_t H = c.H, HV = c.HV, d_k = c.d_k, d_v = c.d_v, rows = B * T;
  const int64_t conv_dim = 2 * H * d_k + HV * d_v, K = kDecodeConvKernel;
  DecodeTensors t;
  t.T = T;
  t.scale = c.scale;
  if (c.gate == DecodeGate::kKdaSafe) t.lower_bound = kSafeGateLowerBound;
  t.norm_act = c.kda() ? kernels::GateActivation::kSigmoid : kernels::GateActivation::kSilu;
  t.norm_eps = c.kda() ? 1e-5f : 1e-6f;  // Kimi / Qwen3-Next rms_norm_eps
  t.qkv = random_uniform({rows, conv_dim}, c.act, rng);
  t.conv_weight = random_normal({conv_dim, K}, DType::kF32, rng, 0.0f, 0.5f);
  t.conv_state = random_uniform({num_slots, conv_dim, K - 1}, c.conv, rng);
  if (c.kda()) {
    t.a = random_uniform({rows, HV, d_k}, c.act, rng, -2.0f, 2.0f);
    t.dt_bias = random_uniform({HV, d_k}, DType::kF32, rng, -0.5f, 0.5f);
  } else {
    t.a = random_uniform({rows, HV}, c.act, rng, -2.0f, 2.0f);
    t.dt_bias = random_uniform({HV}, DType::kF32, rng, -0.5f, 0.5f);
  }
  t.b = random_uniform({rows, HV}, c.act, rng, -3.0f, 3.0f);
  t.A_log = random_uniform({HV}, DType::kF32, rng, -1.5f, 0.5f);
  t.state_pool = random_normal({num_slots, HV, d_v, d_k}, c.pool, rng, 0.0f, 0.5f);
  t.slots = int32_tensor(slots);
  t.accepted = int32_tensor(std::vector<int32_t>(size_t(B), int32_t(T)));
  t.step_states = poisoned({B, T, HV, d_v, d_k}, c.pool);
  t.o = poisoned({rows, HV, d_v}, c.act);
  if (c.norm) {
    t.norm_weight = random_uniform({d_v}, DType::kF32, rng, 0.5f, 1.5f);
    t.norm_gate = random_uniform({rows, HV, d_v}, c.act, rng, -2.0f, 2.0f);
  }
  const int64_t workspace_bytes = kernels::gated_delta_rule_decode_workspace_bytes(
      kernels::decode_shape(t.decode_params(true)));
  t.workspace = poisoned({workspace_bytes / 4}, DType::kF32);
  return t;
}

/// Moves t's (host) qkv, a, b and norm_gate into one fused projection [B T, total], as the model's
/// input projection holds them: segments in that order, each starting 16-byte aligned (the first
/// one 16 bytes in), `gap` more 16-byte units between segments, bytes outside them NaN (0xff).
inline void fuse_projection(DecodeTensors& t, int64_t gap = 1) {
  const int64_t rows = t.qkv.size(0), elem = dtype_size(t.qkv.dtype()), unit = 16 / elem;
  auto row_elems = [](const Tensor& x) { return x.defined() ? x.numel() / x.size(0) : 0; };
  auto round_up = [unit](int64_t n) { return (n + unit - 1) / unit * unit; };
  t.proj_qkv = unit;
  t.proj_a = round_up(t.proj_qkv + row_elems(t.qkv)) + gap * unit;
  t.proj_b = round_up(t.proj_a + row_elems(t.a)) + gap * unit;
  t.proj_gate = round_up(t.proj_b + row_elems(t.b)) + gap * unit;
  const int64_t total = round_up(t.proj_gate + row_elems(t.norm_gate)) + gap * unit;
  t.projection = poisoned({rows, total}, t.qkv.dtype());
  auto* dst = static_cast<char*>(t.projection.view().raw());
  for (const auto& [x, offset] : {std::pair{&t.qkv, t.proj_qkv},
                                  {&t.a, t.proj_a},
                                  {&t.b, t.proj_b},
                                  {&t.norm_gate, t.proj_gate}}) {
    if (!x->defined()) continue;
    const int64_t n = row_elems(*x);
    const auto* src = static_cast<const char*>(x->view().raw());
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + (r * total + offset) * elem, src + r * n * elem, size_t(n * elem));
  }
}

}  // namespace hyla::testing
