// Entry point of the Attention-Residual mixture: argument checks, then dispatch to the CPU or CUDA
// body.
#include "kernels/attn_res.h"

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

Status check_attn_res(const AttnResParams& p) {
  constexpr const char* op = "attn_res";
  HYLA_RETURN_IF_ERROR(check_shape(op, "partial", p.partial, {kAnyDim, kAnyDim}, "T, d"));
  const int64_t T = p.partial.size(0), d = p.partial.size(1);
  int64_t n = 0;
  if (p.blocks.defined()) {
    HYLA_RETURN_IF_ERROR(check_shape(op, "blocks", p.blocks, {T, kAnyDim, d}, "T, n, d"));
    n = p.blocks.size(1);
    if (n < 1)
      return invalid_argument(op, ": blocks has shape ", p.blocks.shape_string(),
                              ", expected n >= 1 (leave blocks undefined for none)");
  }
  HYLA_RETURN_IF_ERROR(check_shape(op, "cw", p.cw, {d}, "d"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "y", p.y, {T, d}, "T, d"));
  if (p.probs.defined())
    HYLA_RETURN_IF_ERROR(check_shape(op, "probs", p.probs, {T, n + 1}, "T, n + 1"));
  const Device device = p.partial.device();
  for (const auto& [name, t] : {std::pair{"blocks", &p.blocks},
                                {"partial", &p.partial},
                                {"y", &p.y},
                                {"probs", &p.probs}}) {
    if (!t->defined()) continue;
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32}));
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  HYLA_RETURN_IF_ERROR(check_dtype(op, "cw", p.cw, {DType::kF32, DType::kBF16}));
  HYLA_RETURN_IF_ERROR(check_device(op, "cw", p.cw, device));
  for (const auto& [name, t] : {std::pair{"blocks", &p.blocks}, {"partial", &p.partial}})
    for (const auto& [out_name, out] : {std::pair{"y", &p.y}, {"probs", &p.probs}})
      if (spans_overlap(*out, *t))
        return invalid_argument(op, ": ", out_name, " overlaps ", name,
                                "; the mixture is written to its own buffer");
  return check_positive_finite(op, "eps", p.eps, "keeps zero rows finite");
}

}  // namespace

Status attn_res(const AttnResParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_attn_res(p));
  return dispatch(
      "attn_res", p.partial.device(), stream, [&] { cpu::attn_res(p); },
      HYLA_CUDA_BODY(cuda::attn_res(p, stream)));
}

}  // namespace hyla::kernels
