// Attention Residuals (Kimi K3 Block AttnRes; ../notes/kimi_k3.md §2, the reference's
// _apply_attn_res): the decoder keeps no plain residual stream. Layers [k bs, (k+1) bs) form block
// k; the bank holds one snapshot per finished block (the embedding first), and `partial` is the
// running sum of the current block's attention and MLP outputs. Every sublayer input, and the final
// output, is the per-token softmax mixture over [snapshots..., partial] (kernels/attn_res.h).
//   layer i: attn_in = mix(bank, partial, cw_attn[i]); if i % bs == 0: bank += partial, partial = 0
//            partial += attn(norm(attn_in));  mlp_in = mix(bank, partial, cw_mlp[i])
//            partial += mlp(norm(mlp_in))
//   output:  norm(mix(bank, partial, cw_out)) -> lm_head
// Nothing is kept across forward calls: the bank is per-token scratch of one call.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "model/config.h"

namespace hyla::model {

/// The folded score vector of one *_res_norm / *_res_proj pair: cw = norm.weight * proj.weight.
/// norm: [hidden]; proj: [1, hidden]; returns [hidden] f32.
Tensor fold_attn_res_score(const Tensor& norm, const Tensor& proj);

/// True when layer `layer` starts a new block (snapshots the previous one before its attention).
bool attn_res_block_start(const ModelConfig& config, int64_t layer);

/// Bytes per token (on the model's device) of one forward call's Attention-Residual scratch: the
/// bank [attn_res_blocks, hidden] f32 and the mixture [hidden] f32 (0 without Attention Residuals).
int64_t attn_res_scratch_bytes_per_token(const ModelConfig& config);

/// The bank of block snapshots of one forward call: [T, NB, hidden] f32, NB = attn_res_blocks().
class AttnResidualBank {
 public:
  AttnResidualBank(int64_t tokens, int64_t blocks, int64_t hidden, Device device = Device::cpu());

  /// Snapshots written so far.
  int64_t count() const { return count_; }
  /// [T, NB, hidden]; rows >= count() are unwritten.
  const Tensor& snapshots() const { return bank_; }

  /// y = the mixture over the written snapshots and `partial` with score vector `cw` (RMSNorm
  /// eps `eps`); `probs`, when given, receives the weights [T, count() + 1].
  Status mix(const Tensor& partial, const Tensor& cw, float eps, const Tensor& y,
             Tensor* probs = nullptr) const;
  /// Appends `partial` [T, hidden] (on the bank's device) as the next snapshot and zeroes it (a
  /// new block starts).
  Status snapshot(const Tensor& partial);

 private:
  Tensor bank_;
  int64_t count_ = 0;
};

}  // namespace hyla::model
