// CUDA body of the scaled residual add (kernels/add.h) against the CPU body: plain (scale 1: both
// exactly y + x), scaled, per-row sigmoid gate with a strided gate column, row-strided views, in
// place, odd widths. Fresh random inputs (seed in the trace; HYLA_TEST_SEED=<n> replays one).
// Skipped when no CUDA device is visible.
#include <random>

#include "cuda_testing.h"
#include "kernels/add.h"

namespace hyla::kernels {
namespace {

using testing::on_host;
using testing::Tolerance;
using testing::TwinView;

struct AddCudaCase {
  int64_t T, W;
  float scale;
  bool gate, in_place;
  int64_t pad;
};

TEST(AddCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  const AddCudaCase cases[] = {{1, 1, 1.0f, false, false, 0},    {37, 1029, 1.0f, false, false, 3},
                               {5, 300, -0.5f, false, false, 0}, {65, 257, 1.0f, true, false, 2},
                               {3, 64, 2.0f, true, true, 0},     {9, 33, 1.0f, false, true, 1}};
  for (const AddCudaCase& c : cases) {
    SCOPED_TRACE(str_cat("T", c.T, "_W", c.W, "_scale", c.scale, c.gate ? "_gate" : "",
                         c.in_place ? "_inplace" : "", "_pad", c.pad));
    const std::vector<int64_t> shape = {c.T, c.W};
    const TwinView x = testing::twin_uniform(shape, DType::kF32, rng, -1.0f, 1.0f, c.pad, 1);
    const TwinView y = testing::twin_uniform(shape, DType::kF32, rng, -1.0f, 1.0f, c.pad + 2, 0);
    // the gate: every other element of a [2T] buffer
    const TwinView gate = testing::twin_uniform({2 * c.T}, DType::kF32, rng, -6.0f, 6.0f);
    auto run = [&](const TensorView& xv, const TensorView& yv, const TensorView& gs) {
      const int64_t gate_shape[] = {c.T}, gate_stride[] = {2};
      const TensorView gv =
          c.gate ? TensorView(gs.raw(), DType::kF32, 1, gate_shape, gate_stride, gs.device())
                 : TensorView();
      return add({.x = xv, .gate = gv, .scale = c.scale, .y = c.in_place ? xv : yv});
    };
    ASSERT_OK(run(x.host, y.host, gate.host));
    ASSERT_OK(run(x.device, y.device, gate.device));
    const Tensor got_x = on_host(x.device_storage), got_y = on_host(y.device_storage);
    const Tolerance tolerance =
        c.gate ? Tolerance{.atol = 2e-6,
                           .rtol = 2.4e-7,
                           .why =
                               "expf differs by a few ulp (sigmoid of |gate| <= 6) times |x| "
                               "<= 1, then one fma rounding on each side"}
               : Tolerance{.atol = 0, .rtol = 0, .why = "one fma of the same fp32 inputs"};
    // the whole storage: the output rows and every element around them
    EXPECT_CLOSE(got_y, y.host_storage, tolerance);
    EXPECT_CLOSE(got_x, x.host_storage, tolerance);
  }
}

}  // namespace
}  // namespace hyla::kernels
