// CUDA body of the strided copy (kernels/copy.h) against the CPU body: 1-4 dims, every f32/bf16
// pair, padded / misaligned / transposed views, a broadcast source (stride 0), more elements than
// one grid covers (the grid-stride loop). Both sides round to nearest even, so results are equal
// bit for bit. Fresh random inputs (seed in the trace; HYLA_TEST_SEED=<n> replays one). Skipped
// when no CUDA device is visible.
#include <random>
#include <vector>

#include "cuda_testing.h"
#include "kernels/copy.h"

namespace hyla::kernels {
namespace {

using testing::on_gpu;
using testing::on_host;
using testing::padded_numel;
using testing::padded_view;
using testing::TwinView;

struct CopyCudaCase {
  std::vector<int64_t> shape;
  DType x_dtype, y_dtype;
  int64_t x_pad, y_pad, y_offset;
  bool transpose_x;  ///< x's last two dimensions swapped
  bool broadcast_x;  ///< x's dimension 0 has stride 0
};

/// x as the case describes it over `storage` (which holds the stored layout).
TensorView x_view(const CopyCudaCase& c, const Tensor& storage) {
  std::vector<int64_t> stored = c.shape;
  if (c.transpose_x) std::swap(stored[stored.size() - 1], stored[stored.size() - 2]);
  if (c.broadcast_x) stored[0] = 1;
  const TensorView v = padded_view(storage, stored, c.x_pad, 0);
  std::vector<int64_t> shape(v.shape(), v.shape() + v.ndim());
  std::vector<int64_t> stride(v.strides(), v.strides() + v.ndim());
  if (c.transpose_x) {
    std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
    std::swap(stride[stride.size() - 1], stride[stride.size() - 2]);
  }
  if (c.broadcast_x) {
    shape[0] = c.shape[0];
    stride[0] = 0;
  }
  return TensorView(v.raw(), v.dtype(), v.ndim(), shape.data(), stride.data(), v.device());
}

TEST(CopyCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;
  const CopyCudaCase cases[] = {
      {{1}, kF32, kBF16, 0, 0, 0, false, false},
      {{1001}, kBF16, kF32, 0, 0, 1, false, false},
      {{33, 65}, kF32, kBF16, 3, 1, 1, false, false},
      {{7, 5, 129}, kBF16, kBF16, 0, 2, 0, false, false},
      {{3, 4, 9, 31}, kF32, kF32, 1, 0, 3, true, false},
      {{6, 2, 3, 17}, kBF16, kF32, 0, 1, 0, false, true},
      {{4100, 4097}, kF32, kBF16, 0, 0, 0, false, false},  // > 65536 blocks of 256 elements
  };
  for (const CopyCudaCase& c : cases) {
    std::string name = "shape";
    for (size_t i = 0; i < c.shape.size(); ++i) name += str_cat(i ? "x" : "", c.shape[i]);
    SCOPED_TRACE(str_cat(name, "_", dtype_name(c.x_dtype), "_to_", dtype_name(c.y_dtype),
                         c.transpose_x ? "_transposed" : "", c.broadcast_x ? "_broadcast" : ""));
    std::vector<int64_t> stored = c.shape;  // as x_view lays it out
    if (c.transpose_x) std::swap(stored[stored.size() - 1], stored[stored.size() - 2]);
    if (c.broadcast_x) stored[0] = 1;
    Tensor x = testing::random_uniform({padded_numel(stored, c.x_pad, 0)}, c.x_dtype, rng);
    const TwinView y = testing::twin_poisoned(c.shape, c.y_dtype, c.y_pad, c.y_offset);
    const Tensor x_gpu = on_gpu(x);
    ASSERT_OK(copy({.x = x_view(c, x), .y = y.host}));
    ASSERT_OK(copy({.x = x_view(c, x_gpu), .y = y.device}));
    // the whole storage, bit for bit: the copied elements and the untouched poison around them
    EXPECT_TRUE(testing::bitwise_equal(on_host(y.device_storage), y.host_storage));
  }
}

}  // namespace
}  // namespace hyla::kernels
