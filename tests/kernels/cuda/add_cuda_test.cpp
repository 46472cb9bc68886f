// CUDA body of the scaled residual add (kernels/add.h) against the CPU body: plain (scale 1: both
// exactly y + x), scaled, per-row sigmoid gate with a strided gate column, row-strided views, in
// place, odd widths. Fresh random inputs (seed in the trace; HYLA_TEST_SEED=<n> replays one).
// Skipped when no CUDA device is visible.
#include <cstdlib>
#include <random>

#include "kernels/add.h"
#include "kernels/cuda/cuda_testing.h"
#include "kernels/strided_views.h"

namespace hyla::kernels {
namespace {

using testing::on_gpu;
using testing::on_host;
using testing::padded_numel;
using testing::padded_view;
using testing::Tolerance;

uint32_t base_seed() {
  if (const char* env = std::getenv("HYLA_TEST_SEED"))
    return uint32_t(std::strtoul(env, nullptr, 10));
  return std::random_device{}();
}

struct AddCudaCase {
  int64_t T, W;
  float scale;
  bool gate, in_place;
  int64_t pad;
};

TEST(AddCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = base_seed();
  SCOPED_TRACE(str_cat("seed ", seed));
  std::mt19937 rng(seed);
  const AddCudaCase cases[] = {{1, 1, 1.0f, false, false, 0},    {37, 1029, 1.0f, false, false, 3},
                               {5, 300, -0.5f, false, false, 0}, {65, 257, 1.0f, true, false, 2},
                               {3, 64, 2.0f, true, true, 0},     {9, 33, 1.0f, false, true, 1}};
  for (const AddCudaCase& c : cases) {
    SCOPED_TRACE(str_cat("T", c.T, "_W", c.W, "_scale", c.scale, c.gate ? "_gate" : "",
                         c.in_place ? "_inplace" : "", "_pad", c.pad));
    const std::vector<int64_t> shape = {c.T, c.W};
    Tensor x = testing::random_uniform({padded_numel(shape, c.pad, 1)}, DType::kF32, rng);
    Tensor y = testing::random_uniform({padded_numel(shape, c.pad + 2, 0)}, DType::kF32, rng);
    Tensor gate = testing::random_uniform({2 * c.T}, DType::kF32, rng, -6.0f, 6.0f);
    auto run = [&](const Tensor& xs, const Tensor& ys, const Tensor& gs) {
      const TensorView xv = padded_view(xs, shape, c.pad, 1);
      const TensorView yv = c.in_place ? xv : padded_view(ys, shape, c.pad + 2, 0);
      const int64_t gate_shape[] = {c.T}, gate_stride[] = {2};
      const TensorView gv =
          c.gate ? TensorView(gs.view().raw(), DType::kF32, 1, gate_shape, gate_stride, gs.device())
                 : TensorView();
      return add({.x = xv, .gate = gv, .scale = c.scale, .y = yv});
    };
    Tensor x_gpu = on_gpu(x), y_gpu = on_gpu(y), gate_gpu = on_gpu(gate);
    ASSERT_OK(run(x, y, gate));
    ASSERT_OK(run(x_gpu, y_gpu, gate_gpu));
    const Tensor got_x = on_host(x_gpu), got_y = on_host(y_gpu);
    const Tolerance tolerance =
        c.gate ? Tolerance{.atol = 2e-6,
                           .rtol = 2.4e-7,
                           .why =
                               "expf differs by a few ulp (sigmoid of |gate| <= 6) times |x| "
                               "<= 1, then one fma rounding on each side"}
               : Tolerance{.atol = 0, .rtol = 0, .why = "one fma of the same fp32 inputs"};
    // the whole storage: the output rows and every element around them
    EXPECT_CLOSE(got_y, y, tolerance);
    EXPECT_CLOSE(got_x, x, tolerance);
  }
}

}  // namespace
}  // namespace hyla::kernels
