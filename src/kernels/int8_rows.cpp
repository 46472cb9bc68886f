// Entry points of the int8 row quantisation: argument checks, then dispatch to the CPU or CUDA
// body.
#include "kernels/int8_rows.h"

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

/// The checks both directions share: `rows` [R, C] f32|bf16 (C contiguous), `q` [R, C] i8 (C
/// contiguous), `scale` [R] f32 contiguous, all on rows' device.
Status check_int8_rows(const char* op, const char* rows_name, const TensorView& rows,
                       const TensorView& q, const TensorView& scale) {
  HYLA_RETURN_IF_ERROR(check_shape(op, rows_name, rows, {kAnyDim, kAnyDim}, "R, C"));
  HYLA_RETURN_IF_ERROR(check_dtype(op, rows_name, rows, {DType::kF32, DType::kBF16}));
  HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, rows_name, rows));
  const int64_t R = rows.size(0), C = rows.size(1);
  HYLA_RETURN_IF_ERROR(check_shape(op, "q", q, {R, C}, "R, C"));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "q", q, {DType::kI8}));
  HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, "q", q));
  HYLA_RETURN_IF_ERROR(check_shape(op, "scale", scale, {R}, "R"));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "scale", scale, {DType::kF32}));
  HYLA_RETURN_IF_ERROR(check_contiguous(op, "scale", scale));
  HYLA_RETURN_IF_ERROR(check_device(op, "q", q, rows.device()));
  return check_device(op, "scale", scale, rows.device());
}

}  // namespace

Status quantize_int8_rows(const QuantizeInt8RowsParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_int8_rows("quantize_int8_rows", "x", p.x, p.q, p.scale));
  return dispatch(
      "quantize_int8_rows", p.x.device(), stream, [&] { cpu::quantize_int8_rows(p); },
      HYLA_CUDA_BODY(cuda::quantize_int8_rows(p, stream)));
}

Status dequantize_int8_rows(const DequantizeInt8RowsParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_int8_rows("dequantize_int8_rows", "y", p.y, p.q, p.scale));
  return dispatch(
      "dequantize_int8_rows", p.y.device(), stream, [&] { cpu::dequantize_int8_rows(p); },
      HYLA_CUDA_BODY(cuda::dequantize_int8_rows(p, stream)));
}

}  // namespace hyla::kernels
