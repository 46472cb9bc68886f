// The multi-token-prediction (MTP) draft head of Qwen3-Next and Qwen3.5 checkpoints (mtp.*), as
// vLLM's Qwen3NextMultiTokenPredictor / Qwen3_5MultiTokenPredictor run it. For the row of
// position i, with h_i the target model's hidden at i AFTER its final norm (what the target's
// model forward returns and its lm_head reads; vLLM hands exactly that to the drafter) and
// token_{i+1} the token that follows:
//   x   = fc([pre_fc_norm_embedding(embed(token_{i+1})) | pre_fc_norm_hidden(h_i)])   embedding
//   first x  += attention(input_norm(x))  at rope position i, over the MTP layer's own KV
//   (positions <= i) x  += mlp(post_norm(x))          MoE or dense, as the model's layers out =
//   norm(x);   logits = lm_head(out)        (embedding and lm_head: the main model's)
// Every norm is Qwen's (1 + w) RMSNorm. A deeper draft feeds `out` back as the hidden with the
// previous draft as the token at position i + 1; with several MTP layers depth d runs layer
// d % num_mtp_layers (vLLM's spec_step_idx). Model::forward_mtp runs it (model.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/decoder_layer.h"
#include "model/weights.h"

namespace hyla::model {

struct MtpWeights {
  Tensor fc;                     ///< [hidden, 2 hidden]: input columns [embedding | hidden]
  Tensor pre_fc_norm_embedding;  ///< [hidden]
  Tensor pre_fc_norm_hidden;     ///< [hidden]
  /// config.num_mtp_layers full-attention layers (input_norm, post_norm, attention, and dense or
  /// moe by config.mtp_mlps), checkpoint mtp.layers.{k}.* named as model.layers.{i}.*.
  std::vector<DecoderLayer> layers;
  Tensor norm;  ///< [hidden]
};

/// "mtp.layers.{k}.": the checkpoint prefix of MTP layer k (the rest mirrors model.layers.{i}.).
std::string mtp_layer_prefix(int64_t k);

/// The MTP head's own mapping-table entries: fc, the two pre-fc norms, the final norm, and each
/// layer's input / post-attention norms (model level, layer -1). The layers' attention and MLP
/// entries come from the architecture (they mirror its model.layers.* entries).
std::vector<WeightSpec> mtp_module_specs(const ModelConfig& config);

/// Loads what mtp_module_specs lists through `get` (by checkpoint name), and each layer's
/// attention and MLP through `fill_layer(k, prefix, layer)`.
Result<MtpWeights> load_mtp(const ModelConfig& config,
                            const std::function<Result<Tensor>(const std::string&)>& get,
                            const std::function<Status(int64_t k, const std::string& prefix,
                                                       DecoderLayer& out)>& fill_layer);

}  // namespace hyla::model
