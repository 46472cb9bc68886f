// How CPU bodies read tensor views: dispatch from a runtime dtype to a typed body, row offsets over
// the leading dimensions of a strided view, scalar loads/stores of small parameter tensors whose
// dtype is only known at run time, and blocks of rows handed to parallel_for.
// Internal to src/kernels/cpu/; entry points have already validated dtypes and shapes.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/tensor.h"

namespace hyla::kernels::cpu {

/// Calls body(T{}) where T is the storage type of `dtype`: float or bf16, and f16 when kWithF16.
/// Use `[&]<typename T>(T) { ... }` or `[&](auto tag) { using T = decltype(tag); ... }`.
template <bool kWithF16 = false, typename Body>
void dispatch_float(DType dtype, Body&& body) {
  switch (dtype) {
    case DType::kF32: body(float{}); return;
    case DType::kBF16: body(bf16{}); return;
    case DType::kF16:
      if constexpr (kWithF16) {
        body(f16{});
        return;
      }
      break;
    default: break;
  }
  HYLA_CHECK(false, "dispatch_float: unexpected dtype ", dtype_name(dtype),
             " (the entry point should have rejected it)");
}

/// Number of rows of `t`: the product of every dimension but the last (1 for a 1-D view).
inline int64_t num_rows(const TensorView& t) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < t.ndim(); ++d) rows *= t.size(d);
  return rows;
}

/// Element offset of row `row` (row-major over every dimension but the last), strides honoured.
inline int64_t row_offset(const TensorView& t, int64_t row) {
  int64_t offset = 0;
  for (int d = t.ndim() - 2; d >= 0; --d) {
    offset += (row % t.size(d)) * t.stride(d);
    row /= t.size(d);
  }
  return offset;
}

/// Loads element `offset` of a float view of any floating dtype as fp32. For parameter tensors
/// (weights, biases, states read once per block), not for inner loops over activations.
inline float load_f32_at(const TensorView& t, int64_t offset) {
  switch (t.dtype()) {
    case DType::kF32: return static_cast<const float*>(t.raw())[offset];
    case DType::kBF16: return load_f32(static_cast<const bf16*>(t.raw()) + offset);
    case DType::kF16: return load_f32(static_cast<const f16*>(t.raw()) + offset);
    default: break;
  }
  HYLA_CHECK(false, "load_f32_at: ", dtype_name(t.dtype()), " is not a float dtype");
  return 0.0f;
}

/// Stores fp32 `x` into element `offset` of a float view, rounding to its dtype.
inline void store_f32_at(const TensorView& t, int64_t offset, float x) {
  switch (t.dtype()) {
    case DType::kF32: store_f32(static_cast<float*>(t.raw()) + offset, x); return;
    case DType::kBF16: store_f32(static_cast<bf16*>(t.raw()) + offset, x); return;
    case DType::kF16: store_f32(static_cast<f16*>(t.raw()) + offset, x); return;
    default: break;
  }
  HYLA_CHECK(false, "store_f32_at: ", dtype_name(t.dtype()), " is not a float dtype");
}

/// Rows per parallel task so that each task touches about `kElementsPerTask` elements: enough work
/// to hide the scheduling cost, small enough that a few thousand rows still spread over all cores.
inline int64_t rows_per_task(int64_t row_length) {
  constexpr int64_t kElementsPerTask = 16384;
  return std::max<int64_t>(1, kElementsPerTask / std::max<int64_t>(1, row_length));
}

/// Runs body(begin, end) over [0, n) in blocks of `block` items, the blocks in parallel.
template <typename Body>
void parallel_for_blocks(int64_t n, int64_t block, Body&& body) {
  const int64_t num_blocks = (n + block - 1) / block;
  parallel_for(num_blocks, [&](int64_t i) { body(i * block, std::min(n, (i + 1) * block)); });
}

}  // namespace hyla::kernels::cpu
