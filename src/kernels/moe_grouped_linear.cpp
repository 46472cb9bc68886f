// Entry point of the grouped expert projection: argument checks, then dispatch to the CPU or CUDA
// body (see moe_grouped_linear.h).
#include "kernels/moe_grouped_linear.h"

#include <algorithm>
#include <climits>

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

int64_t moe_grouped_linear_workspace_bytes(int64_t E, int64_t N) {
  // a 16-byte header (the tile count) and 16 bytes per tile (expert, first row, end row, pad)
  const int64_t tiles =
      std::min(E, N) + (N + kMoeGroupedLinearMinTileRows - 1) / kMoeGroupedLinearMinTileRows;
  return 16 * (1 + tiles);
}

namespace {

Status check_moe_grouped_linear(const MoeGroupedLinearParams& p) {
  constexpr const char* op = "moe_grouped_linear";
  HYLA_RETURN_IF_ERROR(check_shape(op, "x", p.x, {kAnyDim, kAnyDim}, "N, K"));
  const int64_t N = p.x.size(0), K = p.x.size(1);
  HYLA_RETURN_IF_ERROR(check_shape(op, "weight", p.weight, {kAnyDim, kAnyDim, K}, "E, Nout, K"));
  const int64_t E = p.weight.size(0), Nout = p.weight.size(1);
  HYLA_RETURN_IF_ERROR(check_shape(op, "expert_offsets", p.expert_offsets, {E + 1}, "E + 1"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "y", p.y, {N, Nout}, "N, Nout"));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "x", p.x, {DType::kF32}));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "weight", p.weight, {DType::kF32, DType::kBF16}));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "expert_offsets", p.expert_offsets, {DType::kI32}));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "y", p.y, {DType::kF32}));
  if (E < 1 || Nout < 1 || K < 1)
    return invalid_argument(op, ": weight has shape ", p.weight.shape_string(),
                            ", expected E >= 1 experts, Nout >= 1 outputs and K >= 1 inputs");
  const Device device = p.x.device();
  for (const auto& [name, t] : {std::pair{"x", &p.x},
                                {"weight", &p.weight},
                                {"expert_offsets", &p.expert_offsets},
                                {"y", &p.y}}) {
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
  }
  if (p.weight.stride(1) != K)
    return invalid_argument(op, ": weight has strides [", p.weight.stride(0), ", ",
                            p.weight.stride(1),
                            ", 1], expected each expert's [Nout, K] block "
                            "contiguous (stride ",
                            K, " between rows)");
  if (N > 1 && p.x.stride(0) < K)
    return invalid_argument(op, ": x has row stride ", p.x.stride(0), ", expected >= K = ", K,
                            " (rows must not overlap)");
  if (N > 1 && p.y.stride(0) < Nout)
    return invalid_argument(op, ": y has row stride ", p.y.stride(0), ", expected >= Nout = ", Nout,
                            " (rows must not overlap)");
  // the CPU body hands each expert to BLAS (int sizes); the CUDA body indexes rows with i32
  for (const auto& [name, value] : {std::pair{"N", N},
                                    {"Nout", Nout},
                                    {"K", K},
                                    {"x row stride", p.x.stride(0)},
                                    {"y row stride", p.y.stride(0)}}) {
    if (value > INT_MAX)
      return invalid_argument(op, ": ", name, " is ", value, ", expected at most ", INT_MAX);
  }
  if (p.x.numel() > 0 && p.y.numel() > 0) {
    const char* x0 = static_cast<const char*>(p.x.raw());
    const char* y0 = static_cast<const char*>(p.y.raw());
    if (x0 < y0 + p.y.span_bytes() && y0 < x0 + p.x.span_bytes())
      return invalid_argument(op, ": y shares memory with x; the output needs its own buffer");
  }
  if (device.is_cpu()) {
    // offsets' values on the host only (no device sync on CUDA)
    const int32_t* offsets = p.expert_offsets.host<int32_t>();
    for (int64_t e = 0; e < E; ++e)
      if (offsets[e] < 0 || offsets[e] > offsets[e + 1] || offsets[e + 1] > N)
        return invalid_argument(op, ": expert ", e, " has rows [", offsets[e], ", ", offsets[e + 1],
                                "), expected 0 <= begin <= end <= N = ", N);
    return ok_status();
  }
  const int64_t need = moe_grouped_linear_workspace_bytes(E, N);
  if (!p.workspace.defined())
    return invalid_argument(op, ": workspace is missing; CUDA calls need ", need,
                            " bytes (moe_grouped_linear_workspace_bytes)");
  HYLA_RETURN_IF_ERROR(check_dtype(op, "workspace", p.workspace, {DType::kI32}));
  HYLA_RETURN_IF_ERROR(check_contiguous(op, "workspace", p.workspace));
  HYLA_RETURN_IF_ERROR(check_device(op, "workspace", p.workspace, device));
  const int64_t have = p.workspace.numel() * int64_t(sizeof(int32_t));
  if (have < need)
    return invalid_argument(op, ": workspace holds ", have, " bytes, expected at least ", need,
                            " (moe_grouped_linear_workspace_bytes)");
  if (reinterpret_cast<uintptr_t>(p.workspace.raw()) % 16 != 0)
    return invalid_argument(op, ": workspace is not 16-byte aligned");
  if (Nout > int64_t(65535) * 64)
    return invalid_argument(op, ": Nout = ", Nout, ", expected at most ", int64_t(65535) * 64,
                            " (grid rows of 64 columns)");
  return ok_status();
}

}  // namespace

Status moe_grouped_linear(const MoeGroupedLinearParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_moe_grouped_linear(p));
  return dispatch(
      "moe_grouped_linear", p.x.device(), stream, [&] { cpu::moe_grouped_linear(p); },
      HYLA_CUDA_BODY(cuda::moe_grouped_linear(p, stream)));
}

}  // namespace hyla::kernels
