// The residual stream of one forward step: what each sublayer reads and what its output is added
// to. Plain: h, and h += branch. With Attention Residuals (Kimi K3, layers/attn_residual.h) h is
// the current block's partial sum, each sublayer reads the mixture over the bank of block
// snapshots and h, and the first mixer of a block snapshots h into the bank and restarts it at 0:
//   input(kMixer, i): mix(bank, h, cw_attn[i]); if i starts a block: bank += h, h = 0
//   add(branch):      h += branch
//   input(kMlp, i):   mix(bank, h, cw_mlp[i])
//   output():         mix(bank, h, cw_out)
// The bank is scratch of the step: nothing is kept across forward calls.
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"
#include "model/config.h"
#include "model/layers/attn_residual.h"
#include "model/trace.h"

namespace hyla::model {

class ResidualStream {
 public:
  enum class Sublayer : uint8_t { kMixer, kMlp };

  /// `embedded`: the step's embedded tokens [T, hidden] f32, taken as the stream. The
  /// Attention-Residual mixtures go to `tracer` (with their weights when it keeps values).
  ResidualStream(const ModelConfig& config, Tensor embedded, const Tracer& tracer);

  /// The input of layer `layer`'s mixer or MLP: the stream, or the mixture with score vector `cw`
  /// [hidden] f32 (the layer's attn_res_cw / mlp_res_cw). Valid until the next call.
  Result<Tensor> input(Sublayer sublayer, int64_t layer, const Tensor& cw);
  /// stream += branch [T, hidden] f32 (one rounding per element: exactly the fp32 sum).
  Status add(const Tensor& branch);
  /// The stream after the last layer, or the mixture over every snapshot and the last block's
  /// partial sum with the output's score vector `cw`.
  Result<Tensor> output(const Tensor& cw);

  /// The stream itself: with Attention Residuals the current block's partial sum.
  const Tensor& stream() const { return h_; }

 private:
  /// mix_ = the mixture of the bank and h_ with `cw`; returns its weights when the tracer keeps
  /// values (else an undefined tensor).
  Result<Tensor> mix(const Tensor& cw);

  const ModelConfig& config_;
  const Tracer& tracer_;
  Tensor h_;
  std::optional<AttnResidualBank> bank_;  ///< Attention Residuals only
  Tensor mix_;                            ///< the last mixture [T, hidden]
};

}  // namespace hyla::model
