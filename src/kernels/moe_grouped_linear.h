// Grouped projection of a mixture of experts: each expert's block of rows (moe_align's order)
// times that expert's weight, all experts in one call, the row blocks read from the device.
//   y[p, n] = sum_k x[p, k] * W[e, n, k]   for p in [expert_offsets[e], expert_offsets[e + 1])
// Rows outside [expert_offsets[0], expert_offsets[E]) are left untouched (moe_align leaves
// out-of-range ids there; nothing reads them back).
// CPU: kernels::linear on each non-empty expert's rows (the same numbers as one linear per expert).
// CUDA (cuda/moe_grouped_linear.cu), no host sync and a fixed number of launches: a one-block
// kernel turns the offsets into a table of row tiles (BM rows of one expert) in the workspace,
// then one GEMM kernel runs over (tile, column block); blocks past the table's end exit.
//   bf16 W (K a multiple of 8, 16-byte aligned rows of W and x): tensor cores (wmma bf16, fp32
//     accumulate) with x rounded to bf16 (nearest even) as it is staged, as kernels::linear's
//     cuBLASLt path does for bf16 weights: each x element moves by <= 2^-8 of itself, so y moves
//     by <= 2^-8 sum_k |x w| (about 2^-8 sqrt(sum_k (x w)^2) for independent roundings).
//   otherwise (f32 W, odd K): a CUDA-core kernel with fp32 sums of the values as given.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace hyla::kernels {

struct MoeGroupedLinearParams {
  /// [N, K] f32, rows in moe_align's sorted order, last dim contiguous, any row stride
  TensorView x;
  /// [E, Nout, K] f32|bf16, each expert's [Nout, K] block contiguous, any expert stride
  TensorView weight;
  /// [E + 1] i32 on x's device (moe_align's): expert e owns rows [offsets[e], offsets[e + 1])
  TensorView expert_offsets;
  /// CUDA: scratch of at least moe_grouped_linear_workspace_bytes(E, N) bytes, i32, contiguous,
  /// 16-byte aligned (the tile table); CPU: unused, may be left out (`{}`, so designated
  /// initialisers may skip it without a warning). Calls that run at the same time need their own.
  TensorView workspace{};
  /// out [N, Nout] f32, last dim contiguous, any row stride; must not overlap x
  TensorView y;
};

/// The fewest rows a CUDA row tile holds: the tile table has at most
/// min(E, N) + ceil(N / kMoeGroupedLinearMinTileRows) entries.
inline constexpr int64_t kMoeGroupedLinearMinTileRows = 16;

/// Bytes of MoeGroupedLinearParams::workspace a CUDA call with E experts and N rows needs.
int64_t moe_grouped_linear_workspace_bytes(int64_t E, int64_t N);

/// The offsets' VALUES (0 <= offsets[e] <= offsets[e + 1] <= N) are checked on the host for CPU
/// calls only (no device sync on CUDA); the CUDA body clamps them into [0, N] so bad offsets give
/// wrong rows, never an access out of bounds.
Status moe_grouped_linear(const MoeGroupedLinearParams& p, Stream stream = {});

namespace cpu {
void moe_grouped_linear(const MoeGroupedLinearParams& p);
}  // namespace cpu

namespace cuda {
Status moe_grouped_linear(const MoeGroupedLinearParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
