// CUDA body of the partial NeoX rotary embedding (kernels/rope.h), in place:
//   angle = float(pos) * inv_freq[i];   (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)
// with x1 = x[i], x2 = x[i + rotary_dim / 2]. inv_freq comes from the host (rope_inv_freq, the
// CPU body's table) and every product / sum is rounded as the CPU body rounds it (no fused
// multiply-add), so the bodies differ only by the cosf / sinf of CUDA against the host libm.
// One block per (token, head) row, threads over i. Layouts: x [T, heads, head_dim] f32, last dim
// contiguous, T and heads strided; positions [T] i32 on the device.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rows.cuh"
#include "kernels/rope.h"

namespace hyla::kernels::cuda {

namespace {

struct RopeArgs {
  float* x;                  // [T heads, head_dim] f32, rows at x_rows
  const int32_t* positions;  // [T], stride stride_positions
  RowLayout x_rows;
  int64_t stride_positions, heads, half;
  float inv_freq[kRopeCudaMaxRotaryDim / 2];  // [half]
};

__global__ void rope_kernel(const __grid_constant__ RopeArgs a) {
  const int64_t row = blockIdx.x;  // t heads + h
  const int64_t t = row / a.heads;
  float* x = a.x + row_offset(a.x_rows, row);
  const float pos = float(a.positions[t * a.stride_positions]);
  // each pair (i, i + half) is read and written by one thread
  for (int64_t i = threadIdx.x; i < a.half; i += blockDim.x) {
    const float angle = __fmul_rn(pos, a.inv_freq[i]);
    const float c = cosf(angle), s = sinf(angle);
    const float x1 = x[i], x2 = x[i + a.half];
    x[i] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
    x[i + a.half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
  }
}

}  // namespace

Status rope(const RopeParams& p, Stream stream) {
  if (p.rotary_dim > kRopeCudaMaxRotaryDim)
    return unsupported("rope: rotary_dim is ", p.rotary_dim, " on CUDA, supported up to ",
                       kRopeCudaMaxRotaryDim);
  RopeArgs args{.x = static_cast<float*>(p.x.raw()),
                .positions = static_cast<const int32_t*>(p.positions.raw()),
                .x_rows = row_layout(p.x),
                .stride_positions = p.positions.stride(0),
                .heads = p.x.size(1),
                .half = p.rotary_dim / 2,
                .inv_freq = {}};
  for (int64_t i = 0; i < args.half; ++i)
    args.inv_freq[i] = rope_inv_freq(p.theta, p.rotary_dim, i);
  const int64_t rows = num_rows(args.x_rows);
  if (rows == 0) return ok_status();
  HYLA_RETURN_IF_ERROR(check_grid_rows("rope", rows));
  rope_kernel<<<unsigned(rows), row_block_threads(args.half), 0, to_cuda(stream)>>>(args);
  HYLA_CUDA_CHECK_LAUNCH();
  return ok_status();
}

}  // namespace hyla::kernels::cuda
