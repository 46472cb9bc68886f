// Entry point of SiTU-GLU (situ_and_mul): argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/situ_glu.h"

#include "core/check.h"
#include "kernels/dispatch.h"
#include "kernels/swiglu.h"  // check_glu_layout

namespace hyla::kernels {

namespace {

Status check_situ_and_mul(const SituAndMulParams& p) {
  constexpr const char* op = "situ_and_mul";
  HYLA_RETURN_IF_ERROR(check_glu_layout(op, p.x, p.y));
  for (const auto& [name, value] : {std::pair{"beta", p.beta}, {"linear_beta", p.linear_beta}})
    HYLA_RETURN_IF_ERROR(check_positive_finite(op, name, value));
  return ok_status();
}

}  // namespace

Status situ_and_mul(const SituAndMulParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_situ_and_mul(p));
  return dispatch(
      "situ_and_mul", p.x.device(), stream, [&] { cpu::situ_and_mul(p); },
      HYLA_CUDA_BODY(cuda::situ_and_mul(p, stream)));
}

}  // namespace hyla::kernels
