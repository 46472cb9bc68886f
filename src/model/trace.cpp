// The forward step's tracer (see trace.h): trace points to ForwardTrace fields and LayerTimes
// parts.
#include "model/trace.h"

#include <optional>

namespace hyla::model {

namespace {

LayerPart mixer_part(MixerKind kind) {
  switch (kind) {
    case MixerKind::kGatedDeltaNet: return LayerPart::kGatedDeltaNet;
    case MixerKind::kKimiDelta: return LayerPart::kKimiDelta;
    case MixerKind::kFullAttention: return LayerPart::kFullAttention;
    case MixerKind::kLatentAttention: return LayerPart::kLatentAttention;
  }
  return LayerPart::kFullAttention;
}

/// The part that ends at `point` of `layer`, if one does.
std::optional<LayerPart> part_ending_at(const ModelConfig& c, TracePoint point, int64_t layer) {
  switch (point) {
    case TracePoint::kEmbedding: return LayerPart::kEmbedding;
    case TracePoint::kMixerInput:
    case TracePoint::kMlpInput: return LayerPart::kAttnResidual;
    case TracePoint::kMixerOut: return mixer_part(c.mixers[size_t(layer)]);
    case TracePoint::kMlpOut:
      return c.mlps[size_t(layer)] == MlpKind::kMoe ? LayerPart::kMoe : LayerPart::kDenseMlp;
    case TracePoint::kLogits: return LayerPart::kHead;  // the output mixture, final norm, lm_head
    default: return std::nullopt;
  }
}

}  // namespace

Tracer::Tracer(const ModelConfig& config, ForwardTrace* trace, LayerTimes* times, Device device)
    : config_(config), trace_(trace), times_(times) {
  if (trace_) *trace_ = ForwardTrace{};
  if (times_) times_->start(device);
}

void Tracer::operator()(const Tensor& t, TracePoint point, int64_t layer) const {
  if (trace_) record(t, point, layer);
  if (times_)
    if (const std::optional<LayerPart> part = part_ending_at(config_, point, layer))
      times_->mark(*part);
}

void Tracer::record(const Tensor& t, TracePoint point, int64_t layer) const {
  if (point == TracePoint::kLogits) return;  // the caller's result: nothing to keep
  ForwardTrace& tr = *trace_;
  Tensor copy = t.defined() ? t.clone() : Tensor();
  switch (point) {
    case TracePoint::kEmbedding:
    case TracePoint::kFinalNormed: tr.hidden_states.push_back(std::move(copy)); break;
    case TracePoint::kMixerInputProbs: tr.attn_res_probs_attn.push_back(std::move(copy)); break;
    case TracePoint::kMixerInput: tr.attn_in_mix.push_back(std::move(copy)); break;
    case TracePoint::kMixerOut: tr.mixer_out.push_back(std::move(copy)); break;
    case TracePoint::kMlpInputProbs: tr.attn_res_probs_mlp.push_back(std::move(copy)); break;
    case TracePoint::kMlpInput: tr.mlp_in_mix.push_back(std::move(copy)); break;
    case TracePoint::kRouterIds: tr.router_ids.push_back(std::move(copy)); break;
    case TracePoint::kRouterWeights: tr.router_weights.push_back(std::move(copy)); break;
    case TracePoint::kMlpOut: tr.mlp_out.push_back(std::move(copy)); break;
    case TracePoint::kLayerOut:
      // hidden_states[i + 1] is layer i's output, but the last slot holds the final-normed one
      if (layer + 1 < config_.num_layers)
        tr.hidden_states.push_back(std::move(copy));
      else
        tr.last_layer_out = std::move(copy);
      break;
    case TracePoint::kOutputProbs: tr.attn_res_probs_out = std::move(copy); break;
    case TracePoint::kOutput: tr.final_mix = std::move(copy); break;
    case TracePoint::kBlockSnapshots: tr.block_snapshots = std::move(copy); break;
    case TracePoint::kLogits: break;
  }
}

}  // namespace hyla::model
