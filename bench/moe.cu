// GPU benchmark of one mixture-of-experts layer (model::moe_forward) at the widths of the H200
// benchmark model (Qwen3-Next-80B: hidden 2048, 512 experts, top-10 softmax routing with
// renormalisation, expert intermediate 512, one sigmoid-gated shared expert of 512; bf16 weights,
// f32 activations): router, moe_route, moe_align, moe_permute, grouped gate_up, SwiGLU, grouped
// down, shared expert, moe_combine, for T = 1 .. 4096 tokens.
// Weights are random (a hash of the element index), so the router spreads tokens over the
// experts (at T = 4096 about every expert gets rows). x rotates over 8 random batches so
// consecutive calls route to different experts (one layer's experts, 3.2 GB, are far past L2).
// Per T: ms per layer; GB/s of the weight bytes a call reads (the distinct routed experts its
// routing touches, counted from its topk_ids, + router + shared expert); TFLOP/s (2 x
// multiply-adds: T x (top_k experts + shared expert + router)). Prints a table and one JSON line.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_memory.h"
#include "core/tensor.h"
#include "gpu_timing.cuh"
#include "model/config.h"
#include "model/layers/mlp.h"

namespace hyla {
namespace {

using bench::time_calls;

constexpr int64_t kHidden = 2048, kExperts = 512, kTopK = 10, kIntermediate = 512,
                  kSharedIntermediate = 512;
constexpr int kBatches = 8;  // x rotation

/// Uniform in [-scale, scale) from a hash of (seed, i): same values on every run.
__device__ float hashed_uniform(uint64_t seed, int64_t i, float scale) {
  uint64_t h = (uint64_t(i) + 0x9e3779b97f4a7c15ull * (seed + 1)) * 0xbf58476d1ce4e5b9ull;
  h ^= h >> 31;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 29;
  return scale * (float(h >> 40) * (2.0f / 16777216.0f) - 1.0f);
}

template <typename T>
__global__ void fill_kernel(T* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = hashed_uniform(seed, i, scale);
    if constexpr (sizeof(T) == 2)
      p[i] = __float2bfloat16_rn(v);
    else
      p[i] = v;
  }
}

Tensor random_tensor(std::initializer_list<int64_t> shape, DType dtype, uint64_t seed,
                     float scale) {
  Tensor t = Tensor::empty(shape, dtype, Device::cuda());
  if (dtype == DType::kBF16)
    fill_kernel<<<1024, 256>>>(static_cast<__nv_bfloat16*>(t.view().raw()), t.numel(), seed, scale);
  else
    fill_kernel<<<1024, 256>>>(t.data<float>(), t.numel(), seed, scale);
  HYLA_CUDA_CHECK(cudaGetLastError());
  return t;
}

struct Row {
  int64_t T;
  double ms, experts_touched, gbps, tflops;
};

int run() {
  if (!cuda_available()) {
    std::fprintf(stderr, "hyla_bench_moe: no CUDA device visible\n");
    return 1;
  }
  cudaDeviceProp prop{};
  HYLA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s\n", prop.name);

  model::ModelConfig config;
  config.hidden_size = kHidden;
  config.moe.num_experts = kExperts;
  config.moe.top_k = kTopK;
  config.moe.expert_intermediate = kIntermediate;
  config.moe.scoring = model::MoeScoringKind::kSoftmax;
  config.moe.renormalize = true;
  config.moe.shared_intermediate = kSharedIntermediate;
  config.moe.shared_expert_gate = true;

  // weights ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) so activations stay O(1)
  const float in_scale = 1.0f / 45.25f, mid_scale = 1.0f / 22.6f;  // 1/sqrt(2048), 1/sqrt(512)
  model::MoeWeights w;
  w.router = random_tensor({kExperts, kHidden}, DType::kBF16, 1, in_scale);
  w.experts_gate_up =
      random_tensor({kExperts, 2 * kIntermediate, kHidden}, DType::kBF16, 2, in_scale);
  w.experts_down = random_tensor({kExperts, kHidden, kIntermediate}, DType::kBF16, 3, mid_scale);
  w.shared.gate_up = random_tensor({2 * kSharedIntermediate, kHidden}, DType::kBF16, 4, in_scale);
  w.shared.down = random_tensor({kHidden, kSharedIntermediate}, DType::kBF16, 5, mid_scale);
  w.shared_gate = random_tensor({1, kHidden}, DType::kBF16, 6, in_scale);

  const double expert_bytes = 2.0 * double(3 * kIntermediate * kHidden);
  const double always_bytes =
      2.0 * double(kExperts * kHidden + 3 * kSharedIntermediate * kHidden + kHidden);
  const double flop_per_token =
      2.0 * double(kTopK * 3 * kIntermediate * kHidden + 3 * kSharedIntermediate * kHidden +
                   kExperts * kHidden + kHidden);

  std::vector<Row> rows;
  for (int64_t T : {1, 4, 16, 64, 512, 4096}) {
    std::vector<Tensor> x;
    for (int b = 0; b < kBatches; ++b)
      x.push_back(random_tensor({T, kHidden}, DType::kF32, 100 + uint64_t(T) * 16 + b, 1.0f));
    const Tensor out = Tensor::empty({T, kHidden}, DType::kF32, Device::cuda());
    // distinct routed experts per batch (outside the timing)
    double touched = 0;
    for (int b = 0; b < kBatches; ++b) {
      Tensor ids;
      const Status s = model::moe_forward(w, config, x[size_t(b)], out, &ids);
      HYLA_CHECK(s.ok(), s.message());
      const Tensor host = ids.to(Device::cpu());
      const std::set<int32_t> distinct(host.host<int32_t>(), host.host<int32_t>() + host.numel());
      touched += double(distinct.size()) / kBatches;
    }
    const int calls = T >= 512 ? 16 : 64;
    const double ms = time_calls(kBatches, calls, [&](int i) {
      const Status s = model::moe_forward(w, config, x[size_t(i % kBatches)], out);
      HYLA_CHECK(s.ok(), s.message());
    });
    const double bytes = touched * expert_bytes + always_bytes;
    rows.push_back({T, ms, touched, bytes / ms / 1e6, flop_per_token * double(T) / ms / 1e9});
  }

  std::printf(
      "MoE layer: hidden %lld, %lld experts, top-%lld, intermediate %lld, shared %lld, "
      "bf16 weights\n",
      (long long)kHidden, (long long)kExperts, (long long)kTopK, (long long)kIntermediate,
      (long long)kSharedIntermediate);
  std::printf("%6s %10s %9s %10s %9s\n", "T", "ms/layer", "experts", "GB/s", "TFLOP/s");
  for (const Row& r : rows)
    std::printf("%6lld %10.4f %9.1f %10.1f %9.2f\n", (long long)r.T, r.ms, r.experts_touched,
                r.gbps, r.tflops);
  std::string json =
      "{\"bench\": \"moe\", \"device\": \"" + std::string(prop.name) + "\", \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i)
    json += str_cat(i ? ", " : "", "{\"T\": ", rows[i].T, ", \"ms\": ", rows[i].ms,
                    ", \"experts\": ", rows[i].experts_touched, ", \"GBps\": ", rows[i].gbps,
                    ", \"TFLOPs\": ", rows[i].tflops, "}");
  std::printf("%s]}\n", json.c_str());
  return 0;
}

}  // namespace
}  // namespace hyla

int main() { return hyla::run(); }
