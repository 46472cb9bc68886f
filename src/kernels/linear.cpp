// Entry point of the dense projection: argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/linear.h"

#include <climits>

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

/// Whether two [rows, cols] views with contiguous rows share a byte. Exact when both have the
/// same dtype and row stride (e.g. two column slices of one buffer); otherwise any overlap of their
/// byte spans counts.
bool views_overlap(const TensorView& a, const TensorView& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const char* a_begin = static_cast<const char*>(a.raw());
  const char* b_begin = static_cast<const char*>(b.raw());
  if (a_begin + a.span_bytes() <= b_begin || b_begin + b.span_bytes() <= a_begin) return false;
  const int64_t element = dtype_size(a.dtype());
  const int64_t stride = a.stride(0);
  if (b.dtype() != a.dtype() || b.stride(0) != stride || (b_begin - a_begin) % element != 0)
    return true;
  // row r_a of a covers [r_a s, r_a s + cols_a), row r_b of b covers [d + r_b s, d + r_b s +
  // cols_b) (elements from a's start); they meet iff -cols_b < d + m s < cols_a, m = r_b - r_a
  const int64_t d = (b_begin - a_begin) / element;
  for (int64_t m = -(a.size(0) - 1); m <= b.size(0) - 1; ++m) {
    const int64_t e = d + m * stride;
    if (-b.size(1) < e && e < a.size(1)) return true;
  }
  return false;
}

Status check_linear(const LinearParams& p) {
  constexpr const char* op = "linear";
  HYLA_RETURN_IF_ERROR(check_shape(op, "x", p.x, {kAnyDim, kAnyDim}, "T, K"));
  const int64_t T = p.x.size(0), K = p.x.size(1);
  HYLA_RETURN_IF_ERROR(check_shape(op, "weight", p.weight, {kAnyDim, K}, "N, K"));
  const int64_t N = p.weight.size(0);
  HYLA_RETURN_IF_ERROR(check_shape(op, "y", p.y, {T, N}, "T, N"));
  if (p.bias.defined()) HYLA_RETURN_IF_ERROR(check_shape(op, "bias", p.bias, {N}, "N"));
  // bf16 activations only on CUDA (the CPU body reads and writes f32)
  for (const auto& [name, t] : {std::pair{"x", &p.x}, {"y", &p.y}}) {
    HYLA_RETURN_IF_ERROR(p.x.device().is_cuda()
                             ? check_dtype(op, name, *t, {DType::kF32, DType::kBF16})
                             : check_dtype(op, name, *t, {DType::kF32}));
  }
  HYLA_RETURN_IF_ERROR(
      check_dtype(op, "weight", p.weight, {DType::kF32, DType::kBF16, DType::kF16}));
  if (p.bias.defined()) HYLA_RETURN_IF_ERROR(check_dtype(op, "bias", p.bias, {DType::kF32}));
  const Device device = p.x.device();
  for (const auto& [name, t] :
       {std::pair{"x", &p.x}, {"weight", &p.weight}, {"bias", &p.bias}, {"y", &p.y}}) {
    if (!t->defined()) continue;
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  HYLA_RETURN_IF_ERROR(check_contiguous(op, "weight", p.weight));
  if (N < 1 || K < 1)
    return invalid_argument(op, ": weight has shape ", p.weight.shape_string(),
                            ", expected N >= 1 output and K >= 1 input features");
  // BLAS takes rows as int with a leading dimension of at least the row length
  if (T > 1 && p.x.stride(0) < K)
    return invalid_argument(op, ": x has row stride ", p.x.stride(0), ", expected >= K = ", K,
                            " (rows must not overlap)");
  if (T > 1 && p.y.stride(0) < N)
    return invalid_argument(op, ": y has row stride ", p.y.stride(0), ", expected >= N = ", N,
                            " (rows must not overlap)");
  for (const auto& [name, value] : {std::pair{"T", T},
                                    {"N", N},
                                    {"K", K},
                                    {"x row stride", p.x.stride(0)},
                                    {"y row stride", p.y.stride(0)}}) {
    if (value > INT_MAX)
      return invalid_argument(op, ": ", name, " is ", value, ", above the BLAS limit ", INT_MAX);
  }
  if (views_overlap(p.x, p.y))
    return invalid_argument(op, ": y overlaps x; the output must not share memory with the input");
  return ok_status();
}

}  // namespace

Status linear(const LinearParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_linear(p));
  return dispatch(
      "linear", p.x.device(), stream, [&] { cpu::linear(p); },
      HYLA_CUDA_BODY(cuda::linear(p, stream)));
}

}  // namespace hyla::kernels
