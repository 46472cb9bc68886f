// ModelConfig helpers and validation (see config.h).
#include "model/config.h"

#include <algorithm>
#include <cmath>

namespace hyla::model {

const char* mixer_kind_name(MixerKind kind) {
  switch (kind) {
    case MixerKind::kGatedDeltaNet: return "gated_deltanet";
    case MixerKind::kKimiDelta: return "kimi_delta_attention";
    case MixerKind::kFullAttention: return "full_attention";
    case MixerKind::kLatentAttention: return "latent_attention";
  }
  return "?";
}

bool is_linear_mixer(MixerKind kind) {
  return kind == MixerKind::kGatedDeltaNet || kind == MixerKind::kKimiDelta;
}

int64_t ModelConfig::num_layers_of(MixerKind kind) const {
  int64_t n = 0;
  for (MixerKind m : mixers) n += m == kind;
  return n;
}

int64_t ModelConfig::attn_res_blocks() const {
  return attn_res_block_size > 0 ? (num_layers + attn_res_block_size - 1) / attn_res_block_size : 0;
}

Status validate(const ModelConfig& c, const std::string& source) {
  auto bad = [&](const auto&... what) {
    return invalid_argument(source, ": inconsistent config (", c.model_type, "): ", what...);
  };
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.num_layers <= 0)
    return bad("vocab_size, hidden_size and num_hidden_layers must be > 0, got ", c.vocab_size,
               ", ", c.hidden_size, ", ", c.num_layers);
  if (int64_t(c.mixers.size()) != c.num_layers || int64_t(c.mlps.size()) != c.num_layers)
    return bad("num_hidden_layers is ", c.num_layers, " but the layer lists have ", c.mixers.size(),
               " mixers and ", c.mlps.size(), " MLP kinds");
  if (!(c.rms_norm_eps > 0.0f) || !std::isfinite(c.rms_norm_eps))
    return bad("rms_norm_eps must be a finite number > 0, got ", c.rms_norm_eps);
  const LinearAttentionConfig& l = c.linear;
  if (c.num_layers_of(MixerKind::kGatedDeltaNet) + c.num_layers_of(MixerKind::kKimiDelta) > 0) {
    if (l.num_k_heads <= 0 || l.num_v_heads <= 0 || l.head_k_dim <= 0 || l.head_v_dim <= 0)
      return bad("linear attention heads and head dims must be > 0");
    if (l.num_v_heads % l.num_k_heads != 0)
      return bad("linear value heads (", l.num_v_heads, ") must be a multiple of key heads (",
                 l.num_k_heads, ")");
    if (l.conv_kernel < 1 || l.conv_kernel > kMaxConvKernel)
      return bad("conv kernel size ", l.conv_kernel, " is outside [1, ", kMaxConvKernel, "]");
  }
  if (c.num_mtp_layers < 0 || int64_t(c.mtp_mlps.size()) != c.num_mtp_layers)
    return bad("num_mtp_layers is ", c.num_mtp_layers, " with ", c.mtp_mlps.size(),
               " MTP MLP kinds; expected >= 0 and one kind per MTP layer");
  if (c.num_layers_of(MixerKind::kFullAttention) > 0 || c.num_mtp_layers > 0) {
    const FullAttentionConfig& a = c.attention;
    if (a.num_heads <= 0 || a.num_kv_heads <= 0 || a.head_dim <= 0 || a.num_heads % a.num_kv_heads)
      return bad("attention heads ", a.num_heads, " must be a positive multiple of kv heads ",
                 a.num_kv_heads, " with head_dim > 0");
    if (a.rotary_dim < 0 || a.rotary_dim > a.head_dim || a.rotary_dim % 2)
      return bad("rotary dim ", a.rotary_dim, " must be even and within head_dim ", a.head_dim);
  }
  if (c.num_layers_of(MixerKind::kLatentAttention) > 0) {
    const LatentAttentionConfig& m = c.latent;
    if (m.num_heads <= 0 || m.kv_lora_rank <= 0 || m.qk_nope_head_dim + m.qk_rope_head_dim <= 0 ||
        m.v_head_dim <= 0)
      return bad("MLA heads, kv_lora_rank, q/k head dims and v_head_dim must be > 0");
  }
  bool any_moe = false;
  for (MlpKind k : c.mlps) any_moe |= k == MlpKind::kMoe;
  for (MlpKind k : c.mtp_mlps) any_moe |= k == MlpKind::kMoe;
  if (any_moe) {
    const MoeConfig& m = c.moe;
    if (m.num_experts <= 0 || m.top_k <= 0 || m.top_k > m.num_experts || m.expert_intermediate <= 0)
      return bad("MoE needs experts > 0, 0 < top_k <= experts and an intermediate size, got ",
                 m.num_experts, " experts, top_k ", m.top_k, ", intermediate ",
                 m.expert_intermediate);
    if (m.latent_dim < 0)
      return bad("routed_expert_hidden_size is ", m.latent_dim, ", expected >= 0");
    if (m.num_groups < 1 || m.num_experts % m.num_groups || m.topk_groups < 1 ||
        m.topk_groups > m.num_groups)
      return bad("expert groups: ", m.num_experts, " experts in ", m.num_groups, " groups, keep ",
                 m.topk_groups);
  }
  if (c.attn_res_block_size < 0)
    return bad("attn_res_block_size is ", c.attn_res_block_size, ", expected >= 0 (0 = none)");
  if (c.mlp_activation.kind == GluKind::kSitu &&
      !(c.mlp_activation.beta > 0.0f && c.mlp_activation.linear_beta > 0.0f &&
        std::isfinite(c.mlp_activation.beta) && std::isfinite(c.mlp_activation.linear_beta)))
    return bad("SiTU betas must be > 0 and finite, got activation_situ_beta ",
               c.mlp_activation.beta, " and activation_situ_linear_beta ",
               c.mlp_activation.linear_beta);
  // The mapping table has at most ~32 tensors per layer plus 3 per routed expert of each MoE
  // layer; bounding it keeps building the table (and `hyla inspect` of a config alone) small.
  int64_t tensors = 8, moe_layers = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (c.mlps[size_t(i)] == MlpKind::kDense && c.intermediate_size <= 0)
      return bad("layer ", i, " has a dense MLP but intermediate_size is ", c.intermediate_size);
    const bool moe = c.mlps[size_t(i)] == MlpKind::kMoe;
    moe_layers += moe;
    tensors += 32 + (moe ? 3 * std::max<int64_t>(c.moe.num_experts, 0) : 0);
    if (tensors > kMaxCheckpointTensors)
      return bad("num_hidden_layers ", c.num_layers, " with ", c.moe.num_experts,
                 " experts per MoE layer describes more than ", kMaxCheckpointTensors,
                 " checkpoint tensors (already ", tensors, " in the first ", i + 1, " layers, ",
                 moe_layers, " of them MoE), more than any real model has");
  }
  for (int64_t k = 0; k < c.num_mtp_layers; ++k) {
    if (c.mtp_mlps[size_t(k)] == MlpKind::kDense && c.intermediate_size <= 0)
      return bad("MTP layer ", k, " has a dense MLP but intermediate_size is ",
                 c.intermediate_size);
    const bool moe = c.mtp_mlps[size_t(k)] == MlpKind::kMoe;
    tensors += 32 + (moe ? 3 * std::max<int64_t>(c.moe.num_experts, 0) : 0);
    if (tensors > kMaxCheckpointTensors)
      return bad("mtp_num_hidden_layers ", c.num_mtp_layers, " with ", c.moe.num_experts,
                 " experts per MoE layer describes more than ", kMaxCheckpointTensors,
                 " checkpoint tensors, more than any real model has");
  }
  if (c.max_context < 0)
    return bad("max_context is ", c.max_context, ", expected >= 0 (0 = unknown)");
  return ok_status();
}

}  // namespace hyla::model
