// The layouts every gated-linear-unit op ([T, 2I] gate | up -> [T, I]) is tested in, and the run
// that checks one layout against a float64 reference (header-only; swiglu_test, situ_glu_test).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "strided_views.h"
#include "testing.h"

namespace hyla::testing {

/// Packed x and y; x and y as row-strided, misaligned views of larger buffers; y written in place
/// over x's gate half (same rows).
enum class GluLayout { kContiguous, kStrided, kInPlace };

inline const char* glu_layout_suffix(GluLayout layout) {
  return layout == GluLayout::kStrided   ? "_strided"
         : layout == GluLayout::kInPlace ? "_inplace"
                                         : "";
}

/// Random normal x [T, 2I] (standard deviation `stddev`) in `layout`, then run(x, y) -> Status;
/// y (of `y_dtype`; in place it is x's f32) must match reference(x as float64) within `tolerance`
/// and, out of place, the rest of its buffer must keep its poison.
template <typename Run, typename Reference>
void expect_glu_matches_reference(int64_t T, int64_t I, GluLayout layout, float stddev,
                                  std::mt19937& rng, const Tolerance& tolerance, Run run,
                                  Reference reference, DType y_dtype = DType::kF32) {
  const bool strided = layout == GluLayout::kStrided;
  const int64_t x_pad = strided ? 3 : 0, x_offset = strided ? 1 : 0;
  // strided y: columns [3, 3 + I) of a [T, I + 7] buffer
  const int64_t y_pad = strided ? 7 : 0, y_offset = strided ? 3 : 0;
  Tensor x_storage =
      random_normal({padded_numel({T, 2 * I}, x_pad, x_offset)}, DType::kF32, rng, 0.0f, stddev);
  const TensorView x = padded_view(x_storage, {T, 2 * I}, x_pad, x_offset);
  const std::vector<double> want = reference(to_f64(x));
  if (layout == GluLayout::kInPlace) {
    // y = x[:, :I] over the same rows
    const int64_t y_shape[] = {T, I}, y_strides[] = {x.stride(0), 1};
    const TensorView y(x.raw(), DType::kF32, 2, y_shape, y_strides);
    ASSERT_OK(run(x, y));
    EXPECT_CLOSE(y, want, tolerance);
    return;
  }
  Tensor y_storage = poisoned({padded_numel({T, I}, y_pad, y_offset)}, y_dtype);
  const TensorView y = padded_view(y_storage, {T, I}, y_pad, y_offset);
  ASSERT_OK(run(x, y));
  EXPECT_CLOSE(y, want, tolerance);
  EXPECT_TRUE(untouched_outside(y_storage, y));
}

}  // namespace hyla::testing
