// The cases every gated-linear-unit op ([T, 2I] gate | up -> [T, I]) runs on CUDA against its CPU
// body, and the run that checks them (header-only; swiglu_cuda_test, situ_glu_cuda_test): f32 and
// bf16 y, T in {0, 1, 7, 300}, I in {1, 33, 129, 2048}, row-strided and misaligned x and y, in
// place over x's gate half.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "cuda_testing.h"

namespace hyla::testing {

struct GluCudaCase {
  int64_t T, I;
  DType y_dtype;
  bool strided = false;   // x and y row-strided and misaligned
  bool in_place = false;  // y = x[:, :I] with x's row stride

  std::string name() const {
    return str_cat("T", T, "_I", I, "_y", dtype_name(y_dtype), strided ? "_strided" : "",
                   in_place ? "_inplace" : "");
  }
};

inline const GluCudaCase kGluCudaCases[] = {
    {0, 8, DType::kF32},
    {1, 1, DType::kF32},
    {1, 33, DType::kBF16},
    {7, 129, DType::kF32, true},
    {7, 129, DType::kBF16, true},
    {300, 96, DType::kF32},
    {3, 2048, DType::kBF16},
    {5, 64, DType::kF32, false, true},
    {1, 33, DType::kF32, true, true},
};

/// Every case: x [T, 2I] normal with standard deviation `x_stddev`, y poisoned (or x's gate half),
/// as twins; run(x, y) -> Status on the host views, then on the device views; y within
/// `f32_output` rounded to y's dtype, its storage outside the view unchanged.
template <typename Run>
void expect_glu_cuda_matches_cpu(float x_stddev, const Tolerance& f32_output, Run run) {
  const uint32_t seed = base_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const GluCudaCase& c : kGluCudaCases) {
    SCOPED_TRACE(c.name());
    const int64_t pad = c.strided ? 3 : 0, offset = c.strided ? 1 : 0;
    TwinView x = twin_random({c.T, 2 * c.I}, DType::kF32, rng, 0.0f, x_stddev, pad, offset);
    TwinView y = twin_poisoned({c.T, c.I}, c.y_dtype, c.strided ? 7 : 0, offset);
    if (c.in_place) {
      // y = the gate half of x: the first I columns of every row, x's row stride
      y = x;
      y.shape = {c.T, c.I};
      const int64_t y_shape[] = {c.T, c.I}, y_strides[] = {x.host.stride(0), 1};
      y.host = TensorView(x.host.raw(), DType::kF32, 2, y_shape, y_strides);
      y.device = TensorView(x.device.raw(), DType::kF32, 2, y_shape, y_strides, x.device.device());
      y.pad = c.I + pad;  // padded_view of y's shape over x's storage gives the same view
    }
    ASSERT_OK(run(x.host, y.host));
    ASSERT_OK(run(x.device, y.device));
    expect_twin_close(y, rounded_to(c.y_dtype, f32_output));
  }
}

}  // namespace hyla::testing
