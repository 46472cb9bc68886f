// GPU benchmark of the dense projection (kernels/linear.h) on one device:
// - decode (T = 1, the direct kernel): GB/s of weight bytes read, for bf16 W [4096, 2048] and the
//   lm_head shape [151936, 2048], x and y f32; beside it the device-to-device copy rate measured
//   in the same run (bytes read + written), the practical ceiling of a read-bound kernel;
// - prefill (T = 4096, cuBLASLt): TFLOP/s (2 T N K per call) for bf16 W with bf16 x, bf16 W with
//   f32 x (the conversion included), and f32 W with f32 x.
// Weights rotate over enough copies to exceed L2 (each call reads its weight from HBM).
// Prints a table and one JSON line.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_memory.h"
#include "core/tensor.h"
#include "gpu_timing.cuh"
#include "kernels/linear.h"

namespace hyla {
namespace {

using bench::time_calls;

constexpr int64_t kRotationBytes = 512ll << 20;  // well past the H200's 50 MB L2

struct Row {
  std::string name;
  double ms;    // per call
  double rate;  // GB/s or TFLOP/s
  const char* unit;
};

/// Weight copies [N, K] of `dtype` whose total exceeds kRotationBytes (at least one), filled with
/// a small finite value (bytes 0x3c: 0.0115 as bf16 and as f32).
std::vector<Tensor> weight_copies(int64_t N, int64_t K, DType dtype) {
  const int64_t bytes = N * K * dtype_size(dtype);
  const int64_t copies = std::max<int64_t>(1, (kRotationBytes + bytes - 1) / bytes);
  std::vector<Tensor> w;
  for (int64_t i = 0; i < copies; ++i) {
    w.push_back(Tensor::empty({N, K}, dtype, Device::cuda()));
    w.back().fill_bytes(0x3c);
  }
  return w;
}

Tensor filled(std::initializer_list<int64_t> shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, Device::cuda());
  t.fill_bytes(0x3c);
  return t;
}

void run_linear(const Tensor& x, const Tensor& w, const Tensor& y) {
  const Status s = kernels::linear({.x = x, .weight = w, .y = y});
  HYLA_CHECK(s.ok(), s.message());
}

Row decode_row(int64_t N, int64_t K) {
  const std::vector<Tensor> w = weight_copies(N, K, DType::kBF16);
  const Tensor x = filled({1, K}, DType::kF32);
  const Tensor y = Tensor::empty({1, N}, DType::kF32, Device::cuda());
  const double ms =
      time_calls(int(w.size()), 200, [&](int i) { run_linear(x, w[size_t(i) % w.size()], y); });
  const double bytes = double(N * K * 2);
  return {str_cat("decode T=1 bf16 W [", N, ", ", K, "], x/y f32"), ms, bytes / ms / 1e6, "GB/s"};
}

Row gemm_row(int64_t T, int64_t N, int64_t K, DType w_dtype, DType x_dtype) {
  const std::vector<Tensor> w = weight_copies(N, K, w_dtype);
  const Tensor x = filled({T, K}, x_dtype);
  const Tensor y = Tensor::empty({T, N}, DType::kF32, Device::cuda());
  const double ms = time_calls(2, 20, [&](int i) { run_linear(x, w[size_t(i) % w.size()], y); });
  const double flop = 2.0 * double(T) * double(N) * double(K);
  return {str_cat("gemm T=", T, " W ", dtype_name(w_dtype), " [", N, ", ", K, "], x ",
                  dtype_name(x_dtype), ", y f32"),
          ms, flop / ms / 1e9, "TFLOP/s"};
}

/// Device-to-device copy of kRotationBytes: GB/s of bytes read + written.
Row copy_row() {
  const Tensor a = filled({kRotationBytes}, DType::kU8);
  Tensor b = Tensor::empty({kRotationBytes}, DType::kU8, Device::cuda());
  const double ms = time_calls(2, 20, [&](int) {
    HYLA_CUDA_CHECK(cudaMemcpyAsync(b.view().raw(), a.view().raw(), size_t(kRotationBytes),
                                    cudaMemcpyDeviceToDevice));
  });
  return {"reference: device-to-device copy, read + write", ms,
          2.0 * double(kRotationBytes) / ms / 1e6, "GB/s"};
}

int run() {
  if (!cuda_available()) {
    std::fprintf(stderr, "hyla_bench_linear: no CUDA device visible\n");
    return 1;
  }
  cudaDeviceProp prop{};
  HYLA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s\n", prop.name);
  std::vector<Row> rows;
  rows.push_back(copy_row());
  rows.push_back(decode_row(4096, 2048));
  rows.push_back(decode_row(151936, 2048));
  rows.push_back(gemm_row(4096, 4096, 2048, DType::kBF16, DType::kBF16));
  rows.push_back(gemm_row(4096, 4096, 2048, DType::kBF16, DType::kF32));
  rows.push_back(gemm_row(4096, 151936, 2048, DType::kBF16, DType::kBF16));
  rows.push_back(gemm_row(4096, 4096, 2048, DType::kF32, DType::kF32));
  std::printf("%-62s %10s %12s\n", "case", "ms/call", "rate");
  for (const Row& r : rows)
    std::printf("%-62s %10.4f %8.1f %s\n", r.name.c_str(), r.ms, r.rate, r.unit);
  std::string json =
      "{\"bench\": \"linear\", \"device\": \"" + std::string(prop.name) + "\", \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i)
    json += str_cat(i ? ", " : "", "{\"case\": \"", rows[i].name, "\", \"ms\": ", rows[i].ms,
                    ", \"rate\": ", rows[i].rate, ", \"unit\": \"", rows[i].unit, "\"}");
  std::printf("%s]}\n", json.c_str());
  return 0;
}

}  // namespace
}  // namespace hyla

int main() { return hyla::run(); }
