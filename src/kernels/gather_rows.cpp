// Entry point of the row gather: argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/gather_rows.h"

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

Status check_gather_rows(const GatherRowsParams& p) {
  constexpr const char* op = "gather_rows";
  HYLA_RETURN_IF_ERROR(check_shape(op, "x", p.x, {kAnyDim, kAnyDim}, "N, W"));
  const int64_t N = p.x.size(0), W = p.x.size(1);
  HYLA_RETURN_IF_ERROR(check_shape(op, "index", p.index, {kAnyDim}, "M"));
  const int64_t M = p.index.size(0);
  HYLA_RETURN_IF_ERROR(check_shape(op, "y", p.y, {M, W}, "M (as index), W (as x)"));
  const Device device = p.x.device();
  for (const auto& [name, t] : {std::pair{"x", &p.x}, {"y", &p.y}}) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32, DType::kBF16}));
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  HYLA_RETURN_IF_ERROR(check_dtype(op, "index", p.index, {DType::kI32}));
  HYLA_RETURN_IF_ERROR(check_contiguous(op, "index", p.index));
  HYLA_RETURN_IF_ERROR(check_device(op, "index", p.index, device));
  if (p.y.raw() == p.x.raw() && M > 0)
    return invalid_argument(op, ": y aliases x (a gather cannot run in place)");
  if (device.is_cpu()) {
    const int32_t* index = p.index.host<int32_t>();
    for (int64_t i = 0; i < M; ++i)
      if (index[i] < 0 || index[i] >= N)
        return out_of_range(op, ": index[", i, "] is ", index[i], ", outside [0, ", N, ")");
  }
  return ok_status();
}

}  // namespace

Status gather_rows(const GatherRowsParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_gather_rows(p));
  return dispatch(
      "gather_rows", p.x.device(), stream, [&] { cpu::gather_rows(p); },
      HYLA_CUDA_BODY(cuda::gather_rows(p, stream)));
}

}  // namespace hyla::kernels
