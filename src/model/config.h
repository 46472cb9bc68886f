// Typed model configuration: what every architecture file fills in from config.json, and what the
// layers and the runner read. Variation is described with enums, not subclasses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/rmsnorm.h"

namespace hyla::model {

/// The token mixer of a decoder layer.
enum class MixerKind : uint8_t {
  kGatedDeltaNet,   ///< GDN linear attention (Qwen3-Next, Qwen3.5)
  kKimiDelta,       ///< KDA linear attention (Kimi-Linear, Kimi K3)
  kFullAttention,   ///< gated softmax attention with q/k norm and partial RoPE (Qwen)
  kLatentAttention  ///< MLA without RoPE (Kimi-Linear, Kimi K3)
};
/// The feed-forward block of a decoder layer.
enum class MlpKind : uint8_t { kDense, kMoe };
/// The gated activation of every MLP and expert: silu(gate) * up (SwiGLU) or Kimi K3's SiTU-GLU
/// beta tanh(gate / beta) sigmoid(gate) * linear_beta tanh(up / linear_beta).
enum class GluKind : uint8_t { kSilu, kSitu };
struct GluActivation {
  GluKind kind = GluKind::kSilu;
  float beta = 4.0f;          ///< SiTU only: activation_situ_beta
  float linear_beta = 25.0f;  ///< SiTU only: activation_situ_linear_beta
};

/// Bounds on config.json integers (IntRange in config_json.h). Each is at least 16x what released
/// models use; together they keep every derived size (tensor elements, parameter totals, the
/// mapping table's length) inside int64 and far inside memory, so a corrupt config fails while it
/// is parsed instead of in an allocation.
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxHidden = int64_t{1} << 18;
constexpr int64_t kMaxWidth = int64_t{1} << 20;  ///< MLP / expert widths, LoRA ranks, latent MoE
constexpr int64_t kMaxHeads = int64_t{1} << 12;
constexpr int64_t kMaxHeadDim = int64_t{1} << 12;
constexpr int64_t kMaxLayers = int64_t{1} << 12;
constexpr int64_t kMaxExperts = int64_t{1} << 16;
constexpr int64_t kMaxSharedExperts = int64_t{1} << 10;
constexpr int64_t kMaxConvKernel = 8;              ///< what the short-conv kernels support
constexpr int64_t kMaxContext = int64_t{1} << 40;  ///< max_position_embeddings
constexpr int64_t kMaxCheckpointTensors = int64_t{1} << 20;  ///< mapping table entries

const char* mixer_kind_name(MixerKind kind);
bool is_linear_mixer(MixerKind kind);

/// GDN / KDA layer geometry and gates.
struct LinearAttentionConfig {
  int64_t num_k_heads = 0;  ///< H
  int64_t num_v_heads = 0;  ///< HV (GVA: a multiple of H)
  int64_t head_k_dim = 0;   ///< d_k
  int64_t head_v_dim = 0;   ///< d_v
  int64_t conv_kernel = 4;  ///< K of the depthwise causal conv
  /// KDA only: safe gate g = lower_bound * sigmoid(...) when set (Kimi K3: -5).
  std::optional<float> gate_lower_bound;
  /// KDA only: one full-rank output gate g_proj (K3) instead of low-rank g_a / g_b.
  bool full_rank_output_gate = false;
  /// KDA only: rank of the low-rank forget gate f_a -> f_b (and output gate g_a -> g_b).
  int64_t gate_rank = 0;
  /// KDA only: entries of A_log stored in the checkpoint (K3 stores head_dim, uses num_heads).
  int64_t a_log_stored = 0;

  /// Channels of the short conv, [q | k | v]: 2 H d_k + HV d_v (KDA: 3 H d).
  int64_t conv_dim() const { return 2 * num_k_heads * head_k_dim + num_v_heads * head_v_dim; }
};

/// Qwen gated full attention.
struct FullAttentionConfig {
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;  ///< int(head_dim * partial_rotary_factor); the rest is not rotated
  float rope_theta = 10000.0f;
  bool output_gate = true;  ///< q_proj also yields a per-head sigmoid gate on the output
};

/// Multi-head latent attention without RoPE (Kimi).
struct LatentAttentionConfig {
  int64_t num_heads = 0;
  int64_t q_lora_rank = 0;  ///< 0 = plain q_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;  ///< never rotated (NoPE); part of the q/k dot product
  int64_t v_head_dim = 0;
  float kv_a_norm_eps = 1e-6f;
  bool output_gate = false;  ///< K3: sigmoid output gate
};

/// Mixture of experts.
enum class MoeScoringKind : uint8_t { kSoftmax, kSigmoid };
struct MoeConfig {
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t expert_intermediate = 0;
  MoeScoringKind scoring = MoeScoringKind::kSoftmax;
  bool renormalize = false;
  float routed_scaling = 1.0f;
  bool correction_bias = false;  ///< e_score_correction_bias used for selection (Kimi)
  int64_t num_groups = 1;
  int64_t topk_groups = 1;
  int64_t shared_intermediate = 0;  ///< 0 = no shared expert
  bool shared_expert_gate = false;  ///< Qwen: shared output scaled by sigmoid(x . w)
  /// Latent MoE (K3 routed_expert_hidden_size): routed experts run at this width between
  /// routed_expert_down_proj [latent, hidden] and routed_expert_up_proj [hidden, latent]; 0 = the
  /// experts read and write the hidden width directly.
  int64_t latent_dim = 0;
  bool latent_norm = false;  ///< latent_moe_use_norm: RMSNorm (routed_expert_norm) before the up
};

struct ModelConfig {
  std::string model_type;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t intermediate_size = 0;  ///< dense MLP width
  float rms_norm_eps = 1e-6f;
  /// Form of the decoder norms (input, post-attention, final, q/k norms): Qwen (1 + w), Kimi w.
  kernels::RmsNormForm norm_form = kernels::RmsNormForm::kWeight;
  bool tie_word_embeddings = false;
  /// The longest sequence (prompt + generated tokens, in tokens) the config declares the model
  /// for: max_position_embeddings (Kimi-Linear: or model_max_length when that is all it has).
  /// 0 = the config does not say. The runtime refuses longer requests.
  int64_t max_context = 0;
  GluActivation mlp_activation;  ///< dense MLPs, routed and shared experts
  /// Attention Residuals (K3 attn_res_block_size): layers [k bs, (k+1) bs) form block k; every
  /// sublayer input and the final output are softmax mixtures over the finished blocks'
  /// snapshots (the embedding first) and the current block's partial sum. 0 = plain residual.
  int64_t attn_res_block_size = 0;
  std::vector<MixerKind> mixers;  ///< per layer
  std::vector<MlpKind> mlps;      ///< per layer
  /// Multi-token-prediction draft layers (Qwen3-Next / Qwen3.5 config.json mtp_num_hidden_layers;
  /// 0 = none): full-attention decoder layers of the MTP head (model/mtp.h), global KV layer ids
  /// num_layers .. num_layers + num_mtp_layers - 1.
  int64_t num_mtp_layers = 0;
  std::vector<MlpKind> mtp_mlps;  ///< per MTP layer
  LinearAttentionConfig linear;
  FullAttentionConfig attention;
  LatentAttentionConfig latent;
  MoeConfig moe;

  /// What the parser and the loader could not honour but did not refuse (a vision tower, a
  /// checkpoint detail), one sentence each; tools print them as warnings.
  std::vector<std::string> warnings;

  int64_t num_layers_of(MixerKind kind) const;
  /// Block snapshots of the Attention Residuals: cdiv(num_layers, attn_res_block_size) (the
  /// embedding and every block but the last, which is only ever a partial sum); 0 without them.
  int64_t attn_res_blocks() const;
};

/// Checks cross-field consistency (sizes > 0, GVA divisibility, layer lists of num_layers, at most
/// kMaxCheckpointTensors tensors in the mapping table, ...).
/// `source` names the file for messages.
Status validate(const ModelConfig& config, const std::string& source);

}  // namespace hyla::model
