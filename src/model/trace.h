// The named intermediates of a forward step and the one callback that sees them: forward_batch
// calls its Tracer with (tensor, point, layer) at each point of its recipe, and the tracer hands
// the tensor to whichever listener is set: a ForwardTrace keeps a copy of its values (tests against
// Hugging Face), LayerTimes marks the part that just ended (`hyla bench --profile`). With neither
// set, every call returns at once.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/layer_times.h"

namespace hyla::model {

/// Intermediate values of one forward call, for tests against Hugging Face (all f32 [T, ...]).
struct ForwardTrace {
  /// HF convention: [0] embeddings, [i] layer i-1 output (with Attention Residuals: the current
  /// block's partial sum after layer i-1), [L] final-normed output
  std::vector<Tensor> hidden_states;
  Tensor last_layer_out;               ///< raw output of the last layer [T, hidden]
  std::vector<Tensor> mixer_out;       ///< per layer [T, hidden]
  std::vector<Tensor> mlp_out;         ///< per layer [T, hidden]
  std::vector<Tensor> router_ids;      ///< per layer [T, top_k] i32 (undefined for dense layers)
  std::vector<Tensor> router_weights;  ///< per layer [T, top_k] f32
  // Attention Residuals only (empty / undefined otherwise):
  std::vector<Tensor> attn_in_mix;  ///< per layer: the attention's input mixture [T, hidden]
  std::vector<Tensor> mlp_in_mix;   ///< per layer: the MLP's input mixture [T, hidden]
  std::vector<Tensor> attn_res_probs_attn;  ///< per layer [T, candidates] mixture weights
  std::vector<Tensor> attn_res_probs_mlp;   ///< per layer [T, candidates]
  Tensor attn_res_probs_out;                ///< [T, blocks + 1] of the final output mixture
  Tensor final_mix;        ///< the final output mixture (before the norm) [T, hidden]
  Tensor block_snapshots;  ///< the bank at the end [T, blocks, hidden]
};

/// The points of forward_batch's recipe, in the order a step reaches them. The Attention-Residual
/// points (residual_stream.h) come only with Attention Residuals.
enum class TracePoint : uint8_t {
  kEmbedding,        ///< embed(tokens) [T, hidden]
  kMixerInputProbs,  ///< Attention Residuals: the mixer input's mixture weights [T, candidates]
  kMixerInput,       ///< Attention Residuals: the mixer's input mixture [T, hidden]
  kMixerOut,         ///< the mixer's output [T, hidden] (summed over the ranks)
  kMlpInputProbs,    ///< Attention Residuals: the MLP input's mixture weights [T, candidates]
  kMlpInput,         ///< Attention Residuals: the MLP's input mixture [T, hidden]
  kRouterIds,        ///< [T, top_k] i32 (undefined for a dense MLP)
  kRouterWeights,    ///< [T, top_k] f32 (undefined for a dense MLP)
  kMlpOut,           ///< the MLP's output [T, hidden] (summed over the ranks)
  kLayerOut,         ///< the residual stream after the layer [T, hidden]
  kOutputProbs,      ///< Attention Residuals: the output mixture's weights [T, blocks + 1]
  kOutput,           ///< Attention Residuals: the output mixture, before the norm [T, hidden]
  kBlockSnapshots,   ///< Attention Residuals: the bank at the end [T, blocks, hidden]
  kFinalNormed,      ///< the final-normed rows that get logits [rows, hidden]
  kLogits,           ///< [rows, vocab]
};

class Tracer {
 public:
  /// Resets `trace` and starts `times`' clock on `device` (either may be null).
  Tracer(const ModelConfig& config, ForwardTrace* trace, LayerTimes* times, Device device);

  /// Whether values are kept: the Attention-Residual mixtures compute their weights only then.
  bool keeps_values() const { return trace_ != nullptr; }

  /// `t` at `point` of layer `layer` (-1 outside the layers). The trace copies `t` (an undefined
  /// tensor stays undefined); the times mark the part a point ends: the embedding, a layer's
  /// mixer or MLP by kind (after its residual add), an Attention-Residual input mixture, the head
  /// (at the logits).
  void operator()(const Tensor& t, TracePoint point, int64_t layer = -1) const;

 private:
  void record(const Tensor& t, TracePoint point, int64_t layer) const;

  const ModelConfig& config_;
  ForwardTrace* trace_;
  LayerTimes* times_;
};

}  // namespace hyla::model
