// Attention Residuals: score folding, the block schedule and the per-call bank (see
// attn_residual.h).
#include "model/layers/attn_residual.h"

#include "kernels/attn_res.h"
#include "kernels/copy.h"

namespace hyla::model {

Tensor fold_attn_res_score(const Tensor& norm, const Tensor& proj) {
  HYLA_CHECK(norm.ndim() == 1 && proj.numel() == norm.numel(), "fold_attn_res_score: norm ",
             norm.view().shape_string(), ", proj ", proj.view().shape_string());
  Tensor cw = Tensor::empty({norm.numel()}, DType::kF32);
  for (int64_t i = 0; i < norm.numel(); ++i)
    cw.host<float>()[i] = norm.host<float>()[i] * proj.host<float>()[i];
  return cw;
}

bool attn_res_block_start(const ModelConfig& config, int64_t layer) {
  return config.attn_res_block_size > 0 && layer % config.attn_res_block_size == 0;
}

int64_t attn_res_scratch_bytes_per_token(const ModelConfig& config) {
  if (config.attn_res_block_size <= 0) return 0;
  return (config.attn_res_blocks() + 1) * config.hidden_size * int64_t(sizeof(float));
}

AttnResidualBank::AttnResidualBank(int64_t tokens, int64_t blocks, int64_t hidden, Device device)
    : bank_(Tensor::empty({tokens, blocks, hidden}, DType::kF32, device)) {}

Status AttnResidualBank::mix(const Tensor& partial, const Tensor& cw, float eps, const Tensor& y,
                             Tensor* probs) const {
  Tensor p;
  if (probs) p = Tensor::empty({partial.size(0), count_ + 1}, DType::kF32, partial.device());
  HYLA_RETURN_IF_ERROR(
      kernels::attn_res({.blocks = count_ > 0 ? bank_.view().narrow(1, 0, count_) : TensorView(),
                         .partial = partial,
                         .cw = cw,
                         .eps = eps,
                         .y = y,
                         .probs = p}));
  if (probs) *probs = p;
  return ok_status();
}

Status AttnResidualBank::snapshot(const Tensor& partial) {
  const int64_t T = bank_.size(0), NB = bank_.size(1), H = bank_.size(2);
  if (count_ >= NB)
    return internal_error("AttnResidualBank: snapshot ", count_ + 1, " exceeds the ", NB,
                          " blocks of the bank");
  // bank[:, count] = partial: a [T, H] view with the bank's token stride
  const int64_t shape[] = {T, H}, stride[] = {NB * H, 1};
  const TensorView slot(bank_.data<float>() + count_ * H, DType::kF32, 2, shape, stride,
                        bank_.device());
  HYLA_RETURN_IF_ERROR(kernels::copy({.x = partial, .y = slot}));
  Tensor(partial).fill_bytes(0);
  ++count_;
  return ok_status();
}

}  // namespace hyla::model
