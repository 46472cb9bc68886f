// Row addressing for the row-wise CUDA bodies (rmsnorm, gated_rmsnorm, l2norm, activations, the
// GLUs, gates, rope, attn_res): a view of up to 4 dims whose last dimension is contiguous is a list
// of rows; row r's first element sits at the offset cpu/tensor_access.h's row_offset gives.
// CUDA code only (include from .cu files).
#pragma once

#include <cstdint>
#include <limits>

#include "core/error.h"
#include "core/tensor.h"

namespace hyla::kernels::cuda {

/// The leading dimensions (every dimension but the last) of a view, right-aligned into three
/// slots: a 2-D view [T, d] has sizes {1, 1, T}. Strides are in elements.
struct RowLayout {
  int64_t size[3] = {1, 1, 1};
  int64_t stride[3] = {0, 0, 0};
};

/// Rows of `t` (1 to 4 dims, checked by the entry): the product of its leading sizes.
inline RowLayout row_layout(const TensorView& t) {
  RowLayout l;
  const int lead = t.ndim() - 1;
  for (int d = 0; d < lead; ++d) {
    l.size[3 - lead + d] = t.size(d);
    l.stride[3 - lead + d] = t.stride(d);
  }
  return l;
}

inline int64_t num_rows(const RowLayout& l) { return l.size[0] * l.size[1] * l.size[2]; }

/// Element offset of row `row`, row-major over the leading dimensions, strides honoured.
__device__ __forceinline__ int64_t row_offset(const RowLayout& l, int64_t row) {
  int64_t offset = 0;
#pragma unroll
  for (int d = 2; d >= 0; --d) {
    offset += (row % l.size[d]) * l.stride[d];
    row /= l.size[d];
  }
  return offset;
}

/// One block per row: the grid's x dimension holds at most 2^31 - 1 blocks.
inline Status check_grid_rows(const char* op, int64_t rows) {
  if (rows > std::numeric_limits<int32_t>::max())
    return unsupported(op, ": ", rows, " rows on CUDA, supported up to 2^31 - 1 (one block each)");
  return ok_status();
}

/// Threads of a block that walks one row of `n` elements: a whole number of warps, up to 256
/// (rows longer than that are walked in strides of the block).
inline int row_block_threads(int64_t n) {
  const int64_t warps = (n + 31) / 32;
  return int(warps < 1 ? 32 : warps > 8 ? 256 : warps * 32);
}

}  // namespace hyla::kernels::cuda
