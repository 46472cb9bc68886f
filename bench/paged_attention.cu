// GPU benchmark of paged attention (kernels/paged_attention.h) at the Qwen3-Next widths (HQ 16,
// HKV 2, head dim 256, pages of 64 rows, output gate), f32 and bf16 pages:
// - decode (T = B, one new token per sequence) at B = 1, 4, 16, 64 and contexts 512 and 4096:
//   GB/s of K/V page bytes read (B * context * HKV * 256 * 2 * element size);
// - prefill of one sequence of 2048 new tokens after 0 and 2048 cached: TFLOP/s of the causal
//   attention (4 HQ d per (query, visible key) pair: q k and p v).
// The K/V pools rotate over enough copies to exceed L2 (each decode call reads its pages from
// HBM). Prints a table and one JSON line.
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
#include "kernels/paged_attention.h"

namespace hyla {
namespace {

using bench::time_calls;

constexpr int64_t kRotationBytes = 512ll << 20;  // well past the H200's 50 MB L2
constexpr int64_t kHQ = 16, kHKV = 2, kHeadDim = 256, kPageSize = 64;

struct Row {
  std::string name;
  double ms;    // per call
  double rate;  // GB/s or TFLOP/s
  const char* unit;
};

/// A device tensor filled with bytes 0x3c (0.0115 as f32 and as bf16: finite, equal scores).
Tensor filled(std::initializer_list<int64_t> shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, Device::cuda());
  t.fill_bytes(0x3c);
  return t;
}

Tensor device_i32(const std::vector<int32_t>& values, std::initializer_list<int64_t> shape) {
  Tensor host = Tensor::empty(shape, DType::kI32);
  std::copy(values.begin(), values.end(), host.host<int32_t>());
  return host.to(Device::cuda());
}

/// One call shape: B sequences of `n` new tokens after `past` cached each, pages in order.
struct Case {
  int64_t B, n, past;
  DType dtype;
};

/// ms per call; the pools rotate over copies whose total exceeds kRotationBytes.
double time_case(const Case& c, int calls) {
  const int64_t T = c.B * c.n, context = c.past + c.n;
  const int64_t pages_per_seq = (context + kPageSize - 1) / kPageSize;
  const int64_t num_pages = c.B * pages_per_seq;
  const int64_t pool_bytes = 2 * num_pages * kPageSize * kHKV * kHeadDim * dtype_size(c.dtype);
  const int64_t copies = std::max<int64_t>(1, (kRotationBytes + pool_bytes - 1) / pool_bytes);
  std::vector<Tensor> k, v;
  for (int64_t i = 0; i < copies; ++i) {
    k.push_back(filled({num_pages, kPageSize, kHKV, kHeadDim}, c.dtype));
    v.push_back(filled({num_pages, kPageSize, kHKV, kHeadDim}, c.dtype));
  }
  std::vector<int32_t> cu(static_cast<size_t>(c.B + 1));
  std::vector<int32_t> past(static_cast<size_t>(c.B), int32_t(c.past));
  std::vector<int32_t> table(static_cast<size_t>(num_pages));
  for (int64_t b = 0; b <= c.B; ++b) cu[size_t(b)] = int32_t(b * c.n);
  for (int64_t i = 0; i < num_pages; ++i) table[size_t(i)] = int32_t(i);
  const Tensor cu_t = device_i32(cu, {c.B + 1}), past_t = device_i32(past, {c.B}),
               table_t = device_i32(table, {c.B, pages_per_seq});
  const Tensor q = filled({T, kHQ, kHeadDim}, DType::kF32);
  const Tensor gate = filled({T, kHQ, kHeadDim}, DType::kF32);
  const Tensor o = Tensor::empty({T, kHQ, kHeadDim}, DType::kF32, Device::cuda());
  kernels::PagedAttentionParams p{.q = q,
                                  .k_pages = k[0],
                                  .v_pages = v[0],
                                  .index = {cu_t, past_t, table_t},
                                  .gate = gate,
                                  .o = o};
  Tensor workspace;
  if (const int64_t bytes = kernels::paged_attention_workspace_bytes(p); bytes > 0) {
    workspace = Tensor::empty({bytes}, DType::kU8, Device::cuda());
    p.workspace = workspace;
  }
  return time_calls(int(std::min<int64_t>(copies, 20)), calls, [&](int i) {
    p.k_pages = k[size_t(i) % k.size()];
    p.v_pages = v[size_t(i) % v.size()];
    const Status s = kernels::paged_attention(p);
    HYLA_CHECK(s.ok(), s.message());
  });
}

Row decode_row(int64_t B, int64_t context, DType dtype) {
  const double ms = time_case({B, 1, context - 1, dtype}, 200);
  const double bytes = double(B * context * kHKV * kHeadDim * 2 * dtype_size(dtype));
  return {str_cat("decode B=", B, " context ", context, " ", dtype_name(dtype), " pages"), ms,
          bytes / ms / 1e6, "GB/s"};
}

Row prefill_row(int64_t n, int64_t past, DType dtype) {
  const double ms = time_case({1, n, past, dtype}, 10);
  const double pairs = double(n) * double(past) + double(n) * double(n + 1) / 2;  // causal
  const double flop = 4.0 * double(kHQ * kHeadDim) * pairs;
  return {str_cat("prefill ", n, " tokens past ", past, " ", dtype_name(dtype), " pages"), ms,
          flop / ms / 1e9, "TFLOP/s"};
}

int run() {
  if (!cuda_available()) {
    std::fprintf(stderr, "hyla_bench_paged_attention: no CUDA device visible\n");
    return 1;
  }
  cudaDeviceProp prop{};
  HYLA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s; HQ %lld, HKV %lld, d %lld, page %lld, gate\n", prop.name, (long long)kHQ,
              (long long)kHKV, (long long)kHeadDim, (long long)kPageSize);
  std::vector<Row> rows;
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const int64_t context : {512, 4096})
      for (const int64_t B : {1, 4, 16, 64}) rows.push_back(decode_row(B, context, dtype));
    for (const int64_t past : {0, 2048}) rows.push_back(prefill_row(2048, past, dtype));
  }
  std::printf("%-48s %10s %12s\n", "case", "ms/call", "rate");
  for (const Row& r : rows)
    std::printf("%-48s %10.4f %8.1f %s\n", r.name.c_str(), r.ms, r.rate, r.unit);
  std::string json = "{\"bench\": \"paged_attention\", \"device\": \"" + std::string(prop.name) +
                     "\", \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i)
    json += str_cat(i ? ", " : "", "{\"case\": \"", rows[i].name, "\", \"ms\": ", rows[i].ms,
                    ", \"rate\": ", rows[i].rate, ", \"unit\": \"", rows[i].unit, "\"}");
  std::printf("%s]}\n", json.c_str());
  return 0;
}

}  // namespace
}  // namespace hyla

int main() { return hyla::run(); }
