// CUDA body of the dense projection (kernels/linear.h) against the CPU body, which is the
// specification. Fresh random inputs every run (the seed is in each failure's trace;
// HYLA_TEST_SEED=<n> replays one). Cases: T in {0, 1, 2, 7, 16} (the direct kernel: 16-byte and
// element loads, one and several K chunks) and {17, 64, 300} (cuBLASLt, or the direct kernel 16
// tokens at a time for f16 weights), K and N odd and large (K up to 4104, N = 151, 300, 4096),
// f32 / bf16 / f16 weights, f32 / bf16 x and y, with and without bias, x and y as padded,
// misaligned row-strided views. Every output element is compared; everything outside y's view
// must keep its poison. Skipped when no CUDA device is visible.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda_testing.h"
#include "kernels/linear.h"

namespace hyla::kernels {
namespace {

using testing::padded_numel;
using testing::padded_view;
using testing::Tolerance;
using testing::TwinView;

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16, kF16 = DType::kF16;

struct CudaLinearCase {
  int64_t T, K, N;
  DType w, x, y;
  bool bias;
  bool strided;  // x rows padded by 3 and 1 element in, y columns [2, 2 + N) of a wider buffer

  std::string name() const {
    return str_cat("T", T, "_K", K, "_N", N, "_w", dtype_name(w), "_x", dtype_name(x), "_y",
                   dtype_name(y), bias ? "_bias" : "", strided ? "_strided" : "");
  }
  /// The path multiplies x rounded to bf16 (kernels/linear.h).
  bool rounds_x() const { return T > kLinearCudaDirectMaxTokens && w == kBF16 && x == kF32; }
};

const CudaLinearCase kCases[] = {
    {0, 64, 8, kBF16, kF32, kF32, true, false},
    // the direct kernel
    {1, 2048, 4096, kBF16, kF32, kF32, false, false},
    {1, 2047, 151, kBF16, kF32, kF32, true, true},  // odd K: element loads
    {1, 2048, 151, kF32, kBF16, kBF16, true, true},
    {1, 1000, 300, kF16, kF32, kF32, false, true},
    {2, 2048, 4096, kF32, kBF16, kF32, true, false},
    {2, 2047, 151, kF16, kF32, kBF16, false, true},
    {7, 2048, 151, kBF16, kF32, kBF16, true, true},
    {7, 4104, 300, kBF16, kBF16, kF32, false, true},  // three K chunks
    {16, 2048, 4096, kBF16, kF32, kF32, true, true},
    {16, 2049, 151, kF32, kF32, kF32, false, false},
    // cuBLASLt (f16 weights: the direct kernel in groups of 16 tokens)
    {17, 2048, 4096, kBF16, kF32, kF32, true, false},
    {17, 2048, 151, kF32, kF32, kBF16, false, true},
    {64, 2047, 151, kBF16, kF32, kF32, false, true},  // odd leading dimension of the weight
    {64, 2048, 4096, kF32, kBF16, kF32, true, true},
    {64, 513, 300, kF16, kF32, kF32, true, true},
    {300, 2048, 4096, kBF16, kBF16, kBF16, false, false},
    {300, 2048, 151, kBF16, kF32, kBF16, true, true},
    {300, 2048, 4096, kF32, kF32, kF32, false, true},
    {300, 2048, 151, kBF16, kBF16, kF32, false, true},  // misaligned bf16 x straight to cuBLASLt
};

/// A contiguous host f32 tensor of shape `shape` holding f(every element of `t`) (exact for f32,
/// bf16 and f16 values).
template <typename F>
Tensor f32_copy(const TensorView& t, std::initializer_list<int64_t> shape, F&& f) {
  std::vector<double> values = testing::to_f64(t);
  for (double& v : values) v = f(v);
  return testing::tensor_from(values, shape, kF32);
}
double identity(double v) { return v; }
double magnitude(double v) { return std::fabs(v); }
/// v rounded to bf16 (nearest even, as the CUDA body rounds x) and back.
double bf16_rounded(double v) { return bf16_to_f32(f32_to_bf16(float(v))); }

/// The CPU body's y [T, N] f32 for contiguous f32 x (bias may be undefined).
Tensor cpu_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Tensor y = testing::poisoned({x.size(0), weight.size(0)}, kF32);
  HYLA_CHECK(linear({.x = x, .weight = weight, .bias = bias, .y = y}).ok(), "cpu linear failed");
  return y;
}

double max_element(const Tensor& t) {
  double m = 0;
  for (double v : testing::to_f64(t)) m = std::max(m, v);
  return m;
}

constexpr double kF32Unit = 1.0 / (1 << 24);  // unit roundoff of fp32
constexpr double kBf16Unit = 1.0 / (1 << 8);  // unit roundoff of bf16 (8 significant bits)

/// The GPU's y against the CPU's on the same x values. `sum_abs` = max over outputs of
/// sum_k |x w|.
Tolerance summation_tolerance(const CudaLinearCase& c, double sum_abs) {
  // each side's fp32 dot product of K terms rounds by ~sqrt(K) 2^-24 sum |x w| (independent
  // roundings add as a random walk; the worst case K 2^-24 sum |x w| is never approached, and
  // sqrt(K) is still tens of standard deviations above it), both sides; the bias addition
  // rounds once per side (2^-23 |y|)
  const double atol = 2 * std::sqrt(double(c.K)) * kF32Unit * sum_abs;
  if (c.y == kBF16)
    return {.atol = atol * (1 + kBf16Unit),
            .rtol = kBf16Unit + 2 * kF32Unit,
            .why =
                "fp32 sums of K terms in two orders (2 sqrt(K) 2^-24 max sum|x w|), then the "
                "GPU's y rounded to bf16 (<= 2^-8 |y|, nearest even)"};
  return {.atol = atol,
          .rtol = 2 * kF32Unit,
          .why =
              "fp32 sums of K terms in two orders: 2 sqrt(K) 2^-24 max sum|x w|, and one "
              "rounding of + bias per side"};
}

void expect_cuda_matches_cpu(const CudaLinearCase& c, uint32_t seed, Stream stream = {}) {
  SCOPED_TRACE(str_cat(c.name(), " seed ", seed));
  std::mt19937 rng(seed);
  const int64_t x_pad = c.strided ? 3 : 0, x_offset = c.strided ? 1 : 0;
  const int64_t y_pad = c.strided ? 5 : 0, y_offset = c.strided ? 2 : 0;
  const TwinView x = testing::twin_uniform({c.T, c.K}, c.x, rng, -1.0f, 1.0f, x_pad, x_offset);
  const Tensor weight = testing::random_uniform({c.N, c.K}, c.w, rng, -0.05f, 0.05f);
  Tensor bias;
  if (c.bias) bias = testing::random_uniform({c.N}, kF32, rng);

  // CPU: contiguous f32 copies of x (rounded to bf16 where the CUDA path rounds it)
  const Tensor x_exact = f32_copy(x.host, {c.T, c.K}, identity);
  const Tensor x_ref = c.rounds_x() ? f32_copy(x.host, {c.T, c.K}, bf16_rounded) : x_exact;
  const Tensor want = cpu_linear(x_ref, weight, bias);
  const Tensor sum_abs_xw = cpu_linear(f32_copy(x_ref, {c.T, c.K}, magnitude),
                                       f32_copy(weight, {c.N, c.K}, magnitude), Tensor());
  const double sum_abs = max_element(sum_abs_xw);

  // CUDA: the same bytes on the device, y poisoned
  const Tensor weight_gpu = testing::on_gpu(weight);
  Tensor bias_gpu;
  if (c.bias) bias_gpu = testing::on_gpu(bias);
  const Tensor y_gpu_storage =
      testing::poisoned_gpu({padded_numel({c.T, c.N}, y_pad, y_offset)}, c.y);
  const TensorView y_gpu = padded_view(y_gpu_storage, {c.T, c.N}, y_pad, y_offset);
  ASSERT_OK(linear({.x = x.device, .weight = weight_gpu, .bias = bias_gpu, .y = y_gpu}, stream));
  ASSERT_EQ(cudaStreamSynchronize(static_cast<cudaStream_t>(stream.handle)), cudaSuccess);

  const Tensor y_storage = testing::on_host(y_gpu_storage);
  const TensorView got = padded_view(y_storage, {c.T, c.N}, y_pad, y_offset);
  EXPECT_TRUE(testing::untouched_outside(y_storage, got));
  if (c.T == 0) return;
  EXPECT_CLOSE(got, want, summation_tolerance(c, sum_abs));
  if (c.rounds_x()) {
    // the documented gap to the CPU body on the unrounded x: each x element moved by <= 2^-8 of
    // itself, so y by <= 2^-8 sum_k |x w| (worst case), plus the summation-order difference
    const Tensor want_exact = cpu_linear(x_exact, weight, bias);
    Tolerance tol = summation_tolerance(c, sum_abs);
    tol.atol += kBf16Unit * sum_abs * (1 + kBf16Unit);
    tol.why = "x rounded to bf16 (<= 2^-8 max sum|x w|) besides the summation order";
    EXPECT_CLOSE(got, want_exact, tol);
  }
}

TEST(LinearCudaTest, MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  uint32_t n = 0;
  for (const CudaLinearCase& c : kCases) expect_cuda_matches_cpu(c, seed + n++);
}

TEST(LinearCudaTest, MatchesCpuOnAStream) {
  // the cuBLASLt path keeps its scratch per stream; a second stream gets its own
  HYLA_SKIP_WITHOUT_CUDA();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  expect_cuda_matches_cpu({300, 2048, 151, kBF16, kF32, kBF16, true, true}, seed, {stream});
  expect_cuda_matches_cpu({1, 2048, 4096, kBF16, kF32, kF32, true, false}, seed + 1, {stream});
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(LinearCudaTest, RejectsWhatTheCudaBodyCannotTake) {
  HYLA_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(3);
  const Tensor x = testing::on_gpu(testing::random_uniform({4, 8}, kF32, rng));
  const Tensor x_f16 = testing::on_gpu(testing::random_uniform({4, 8}, kF16, rng));
  const Tensor weight = testing::on_gpu(testing::random_uniform({5, 8}, kBF16, rng));
  const Tensor weight_host = testing::random_uniform({5, 8}, kBF16, rng);
  const Tensor bias_bf16 = testing::on_gpu(testing::random_uniform({5}, kBF16, rng));
  const Tensor y = testing::poisoned_gpu({4, 5}, kF32);
  const Tensor y_f16 = testing::poisoned_gpu({4, 5}, kF16);
  EXPECT_ERROR_CONTAINS(linear({.x = x_f16, .weight = weight, .y = y}),
                        "linear: x has dtype f16, expected f32 or bf16");
  EXPECT_ERROR_CONTAINS(linear({.x = x, .weight = weight, .y = y_f16}),
                        "linear: y has dtype f16, expected f32 or bf16");
  EXPECT_ERROR_CONTAINS(linear({.x = x, .weight = weight, .bias = bias_bf16, .y = y}),
                        "linear: bias has dtype bf16, expected f32");
  EXPECT_ERROR_CONTAINS(linear({.x = x, .weight = weight_host, .y = y}),
                        "linear: weight is on cpu, expected cuda:0");
  // x and y of different dtypes over overlapping bytes: bf16 x over the first 16 bytes of each
  // 32-byte row, f32 y [4, 5] from byte 8 of the same rows
  const Tensor shared = testing::poisoned_gpu({4, 8}, kF32);
  const int64_t x_shape[] = {4, 8}, x_strides[] = {16, 1}, y_shape[] = {4, 5}, y_strides[] = {8, 1};
  char* base = static_cast<char*>(shared.view().raw());
  const TensorView x_bf16(base, kBF16, 2, x_shape, x_strides, Device::cuda());
  const TensorView y_over_x(base + 8, kF32, 2, y_shape, y_strides, Device::cuda());
  EXPECT_ERROR_CONTAINS(linear({.x = x_bf16, .weight = weight, .y = y_over_x}),
                        "linear: y overlaps x");
  EXPECT_OK(linear({.x = x, .weight = weight, .y = y}));
}

}  // namespace
}  // namespace hyla::kernels
