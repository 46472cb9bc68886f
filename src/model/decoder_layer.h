// The weights of one decoder layer: its two RMSNorms, the mixer of its kind (GDN, KDA, full
// attention, MLA) and its MLP (dense or MoE); the fields of the other kinds stay undefined. The
// model's layers and the MTP head's (mtp.h) are both of this type.
#pragma once

#include "core/tensor.h"
#include "model/layers/attention.h"
#include "model/layers/gdn.h"
#include "model/layers/kda.h"
#include "model/layers/latent_attention.h"
#include "model/layers/mlp.h"

namespace hyla::model {

struct DecoderLayer {
  Tensor input_norm;              ///< [hidden]
  Tensor post_norm;               ///< [hidden]
  GdnWeights gdn;                 ///< MixerKind::kGatedDeltaNet
  KdaWeights kda;                 ///< MixerKind::kKimiDelta
  AttentionWeights attention;     ///< MixerKind::kFullAttention
  LatentAttentionWeights latent;  ///< MixerKind::kLatentAttention
  DenseMlpWeights dense;          ///< MlpKind::kDense
  MoeWeights moe;                 ///< MlpKind::kMoe
  /// Attention Residuals: folded score vectors [hidden] f32 of the attention and MLP inputs
  /// (self_attention_res_* and mlp_res_*); undefined without them.
  Tensor attn_res_cw;
  Tensor mlp_res_cw;
};

}  // namespace hyla::model
