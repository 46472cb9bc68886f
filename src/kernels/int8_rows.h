// Symmetric int8 quantisation of rows, one fp32 scale per row: the prefix cache's int8 state
// snapshots (a slot's SSM state [HV, d_v, d_k] as HV * d_v rows of d_k; conv windows stay native).
//   quantize:   s = max_i |x_i| / 127;  q_i = round_half_even(x_i / s), in [-127, 127]
//   dequantize: y_i = q_i * s, rounded to y's dtype
// Error bound: |q_i s - x_i| <= s / 2 = max_i |x_i| / 254 (half a step), before y's rounding.
// A zero row has s = 0 and q = 0 (dequantises to zeros); a row holding NaN or inf gets a NaN scale
// and q = 0, so it dequantises to NaN and never to plausible numbers.
// s and x_i / s are correctly rounded fp32 divisions on both bodies, so CPU and CUDA agree bit for
// bit.
#pragma once

#include "core/tensor.h"

namespace hyla::kernels {

struct QuantizeInt8RowsParams {
  TensorView x;      ///< [R, C] f32|bf16, C contiguous (any row stride)
  TensorView q;      ///< out [R, C] i8, C contiguous
  TensorView scale;  ///< out [R] f32, contiguous
};

struct DequantizeInt8RowsParams {
  TensorView q;      ///< [R, C] i8, C contiguous
  TensorView scale;  ///< [R] f32, contiguous
  TensorView y;      ///< out [R, C] f32|bf16, C contiguous
};

Status quantize_int8_rows(const QuantizeInt8RowsParams& p, Stream stream = {});
Status dequantize_int8_rows(const DequantizeInt8RowsParams& p, Stream stream = {});

namespace cpu {
void quantize_int8_rows(const QuantizeInt8RowsParams& p);
void dequantize_int8_rows(const DequantizeInt8RowsParams& p);
}  // namespace cpu

namespace cuda {
Status quantize_int8_rows(const QuantizeInt8RowsParams& p, Stream stream);
Status dequantize_int8_rows(const DequantizeInt8RowsParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
