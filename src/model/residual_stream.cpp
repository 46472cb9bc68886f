// The residual stream, plain or Attention Residuals (see residual_stream.h).
#include "model/residual_stream.h"

#include "kernels/add.h"

namespace hyla::model {

ResidualStream::ResidualStream(const ModelConfig& config, Tensor embedded, const Tracer& tracer)
    : config_(config), tracer_(tracer), h_(std::move(embedded)) {
  if (config_.attn_res_block_size > 0) {
    const int64_t T = h_.size(0), H = h_.size(1);
    bank_.emplace(T, config_.attn_res_blocks(), H, h_.device());
    mix_ = Tensor::empty({T, H}, DType::kF32, h_.device());
  }
}

Result<Tensor> ResidualStream::mix(const Tensor& cw) {
  Tensor probs;
  HYLA_RETURN_IF_ERROR(
      bank_->mix(h_, cw, config_.rms_norm_eps, mix_, tracer_.keeps_values() ? &probs : nullptr));
  return probs;
}

Result<Tensor> ResidualStream::input(Sublayer sublayer, int64_t layer, const Tensor& cw) {
  if (!bank_) return h_;
  HYLA_ASSIGN_OR_RETURN(const Tensor probs, mix(cw));
  const bool mixer = sublayer == Sublayer::kMixer;
  if (mixer && attn_res_block_start(config_, layer)) HYLA_RETURN_IF_ERROR(bank_->snapshot(h_));
  tracer_(probs, mixer ? TracePoint::kMixerInputProbs : TracePoint::kMlpInputProbs, layer);
  tracer_(mix_, mixer ? TracePoint::kMixerInput : TracePoint::kMlpInput, layer);
  return mix_;
}

Status ResidualStream::add(const Tensor& branch) {
  return kernels::add({.x = branch, .gate = {}, .scale = 1.0f, .y = h_});
}

Result<Tensor> ResidualStream::output(const Tensor& cw) {
  if (!bank_) return h_;
  HYLA_ASSIGN_OR_RETURN(const Tensor probs, mix(cw));
  tracer_(probs, TracePoint::kOutputProbs);
  tracer_(mix_, TracePoint::kOutput);
  tracer_(bank_->snapshots(), TracePoint::kBlockSnapshots);
  return mix_;
}

}  // namespace hyla::model
