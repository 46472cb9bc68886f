// Entry point of SiTU-GLU: argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/situ_glu.h"

#include "core/check.h"
#include "kernels/dispatch.h"
#include "kernels/swiglu.h"  // check_glu_layout

namespace hyla::kernels {

namespace {

Status check_situ_glu(const SituGluParams& p) {
  constexpr const char* op = "situ_glu";
  HYLA_RETURN_IF_ERROR(check_glu_layout(op, p.x, p.y));
  for (const auto& [name, value] : {std::pair{"beta", p.beta}, {"linear_beta", p.linear_beta}})
    HYLA_RETURN_IF_ERROR(check_positive_finite(op, name, value));
  return ok_status();
}

}  // namespace

Status situ_glu(const SituGluParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_situ_glu(p));
  return dispatch(
      "situ_glu", p.x.device(), stream, [&] { cpu::situ_glu(p); },
      HYLA_CUDA_BODY(cuda::situ_glu(p, stream)));
}

}  // namespace hyla::kernels
