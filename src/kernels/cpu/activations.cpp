// CPU bodies of l2norm and the elementwise activations (see kernels/activations.h): fp32 compute,
// rows of the last dimension split into parallel blocks.
#include "kernels/activations.h"

#include <cmath>

#include "kernels/cpu/tensor_access.h"

namespace hyla::kernels::cpu {

namespace {

// Runs body(x_row, y_row, n) for every row of x / y, typed by their dtypes, rows in parallel
// blocks.
template <typename RowBody>
void for_each_row(const TensorView& x, const TensorView& y, RowBody&& body) {
  const int64_t n = x.size(-1);
  const int64_t rows = num_rows(x);
  dispatch_float<true>(x.dtype(), [&]<typename TX>(TX) {
    dispatch_float<true>(y.dtype(), [&]<typename TY>(TY) {
      const TX* x_base = static_cast<const TX*>(x.raw());
      TY* y_base = static_cast<TY*>(y.raw());
      parallel_for_blocks(rows, rows_per_task(n), [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row)
          body(x_base + row_offset(x, row), y_base + row_offset(y, row), n);
      });
    });
  });
}

template <typename Fn>
void map_rows(const TensorView& x, const TensorView& y, Fn fn) {
  for_each_row(x, y, [&](const auto* x_row, auto* y_row, int64_t n) {
    for (int64_t i = 0; i < n; ++i) store_f32(y_row + i, fn(load_f32(x_row + i)));
  });
}

}  // namespace

void l2norm(const TensorView& x, const TensorView& y, float eps) {
  for_each_row(x, y, [&](const auto* x_row, auto* y_row, int64_t n) {
    // y = x * rsqrt(sum_i x_i^2 + eps); the sum is read in full before y (which may be x) is
    // written
    float sum_sq = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float v = load_f32(x_row + i);
      sum_sq += v * v;
    }
    const float inv_norm = 1.0f / std::sqrt(sum_sq + eps);
    for (int64_t i = 0; i < n; ++i) store_f32(y_row + i, load_f32(x_row + i) * inv_norm);
  });
}

void activation(Activation act, const TensorView& x, const TensorView& y) {
  switch (act) {
    case Activation::kSigmoid: map_rows(x, y, [](float v) { return sigmoid(v); }); return;
    case Activation::kSoftplus: map_rows(x, y, [](float v) { return softplus(v); }); return;
    case Activation::kSilu: map_rows(x, y, [](float v) { return silu(v); }); return;
  }
}

}  // namespace hyla::kernels::cpu
