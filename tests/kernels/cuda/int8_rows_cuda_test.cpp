// CUDA body of the int8 row quantisation (kernels/int8_rows.h) against the CPU body: rows shorter
// and longer than a block, f32 and bf16 on both sides, strided rows, zero and non-finite rows.
// Both bodies divide with correct rounding and round half to even, so q, the scales and the
// dequantised rows are equal bit for bit. Fresh random inputs (seed in the trace;
// HYLA_TEST_SEED=<n> replays one), outputs poisoned beforehand. Skipped without a CUDA device.
#include <cmath>
#include <limits>
#include <random>

#include "cuda_testing.h"
#include "kernels/int8_rows.h"

namespace hyla::kernels {
namespace {

using testing::on_gpu;
using testing::on_host;
using testing::poisoned;
using testing::poisoned_gpu;
using testing::same_values;

TEST(Int8RowsCudaTest, MatchesCpuBitForBit) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  for (const DType x_dtype : {DType::kF32, DType::kBF16})
    for (const DType y_dtype : {DType::kF32, DType::kBF16})
      for (const auto& [R, C, pad] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 0},
                                      {4096, 128, 0},
                                      {37, 300, 3},
                                      {5, 1000, 1},
                                      {3, 31, 2}}) {
        SCOPED_TRACE(str_cat(dtype_name(x_dtype), " -> ", dtype_name(y_dtype), " ", R, "x", C,
                             " pad ", pad));
        // rows of mixed magnitude, a zero row, a NaN row and an inf row when there are enough
        Tensor wide = testing::random_normal({R, C + pad}, x_dtype, rng);
        std::vector<double> v = testing::to_f64(wide);
        for (int64_t r = 0; r < R; ++r)
          for (int64_t i = 0; i < C + pad; ++i)
            v[size_t(r * (C + pad) + i)] *= std::pow(10.0, double(r % 9) - 4);
        if (R >= 37) {
          for (int64_t i = 0; i < C; ++i) v[size_t(5 * (C + pad) + i)] = 0.0;
          v[size_t(6 * (C + pad) + C / 2)] = std::numeric_limits<double>::quiet_NaN();
          v[size_t(7 * (C + pad))] = -std::numeric_limits<double>::infinity();
        }
        wide = testing::tensor_from(v, {R, C + pad}, x_dtype);
        const TensorView x = TensorView(wide).narrow(1, 0, C);
        Tensor q = poisoned({R, C}, DType::kI8), scale = poisoned({R}, DType::kF32);
        ASSERT_OK(quantize_int8_rows({x, q, scale}));
        Tensor y = poisoned({R, C}, y_dtype);
        ASSERT_OK(dequantize_int8_rows({q, scale, y}));

        const Tensor wide_d = on_gpu(wide);
        Tensor q_d = poisoned_gpu({R, C}, DType::kI8), scale_d = poisoned_gpu({R}, DType::kF32);
        ASSERT_OK(quantize_int8_rows({TensorView(wide_d).narrow(1, 0, C), q_d, scale_d}));
        Tensor y_d = poisoned_gpu({R, C}, y_dtype);
        ASSERT_OK(dequantize_int8_rows({q_d, scale_d, y_d}));
        // equal values, NaN matching NaN (the GPU writes its own canonical NaN bits)
        EXPECT_TRUE(same_values(on_host(q_d), q)) << "q";
        EXPECT_TRUE(same_values(on_host(scale_d), scale)) << "scale";
        EXPECT_TRUE(same_values(on_host(y_d), y)) << "y";
      }
}

}  // namespace
}  // namespace hyla::kernels
