// GPU benchmark of gated_delta_rule_chunk (prefill) at the shapes of ../shared/ANCHORS.md and issue
// 26, timed as fla's bench_fla.py times its chunk kernels: bf16 q / k / v / o, f32 gates, f32
// states (read from and written to pool slots), the l2norm inside, L2 flushed before every call,
// median of the calls. Prints a table (ms, TFLOP/s with the chunk form's 182,955 FLOP per token
// per value head, the fraction of the H200's 989 TFLOP/s bf16 peak) and one JSON line per case;
// tools/gpu/chunk_vs_fla.py sets the lines beside fla's JSON.
//   hyla_bench_gated_delta_rule_chunk [--quick] [--only SUBSTRING] [--state roles|wide]
//                                     [--cp N] [--out FILE.jsonl]
// --quick: the two GDN rows at 4096 tokens a sequence; --only: the cases whose name holds SUBSTRING
// (tools/gpu/model.sh chunkprof profiles one op at a time); --state: that state kernel instead of
// the entry's choice (GatedDeltaRuleParams::state_kernel); --cp: N context-parallel segments (1:
// none) instead of the body's choice (GatedDeltaRuleParams::cp_segments). The last row, one GPU's
// share of the heads when four split them, is where the body's choice is context parallelism.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/tensor.h"
#include "kernels/gated_delta_rule.h"

namespace {

using hyla::DType;
using hyla::Tensor;
namespace kernels = hyla::kernels;

constexpr double kFlopsPerTokenHead = 182955.0;  // C (6 K + 4 V) + 6 K V + (2/3) C^2, K = V = 128
constexpr double kPeakTflops = 989.0;            // H200 dense bf16

__global__ void fill_kernel(void* data, int64_t n, bool bf16, float lo, float hi, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    const float u = lo + (hi - lo) * float(x & 0xffffff) / float(0x1000000);
    if (bf16)
      static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16(u);
    else
      static_cast<float*>(data)[i] = u;
  }
}

Tensor random_device(std::vector<int64_t> shape, DType dtype, float lo, float hi, uint32_t seed) {
  Tensor t = Tensor::empty(int(shape.size()), shape.data(), dtype, hyla::Device::cuda(0));
  fill_kernel<<<1024, 256>>>(t.view().raw(), t.numel(), dtype == DType::kBF16, lo, hi, seed);
  HYLA_CUDA_CHECK(cudaGetLastError());
  return t;
}

struct Case {
  std::string name;
  std::vector<int> seqlens;
  int H, HV;
  bool kda;
};

struct Result {
  double ms, tflops, floor_fraction;
};

Result run(const Case& c, int calls, kernels::ChunkStateKernel state, int cp) {
  int64_t T = 0;
  std::vector<int32_t> cu = {0};
  for (int n : c.seqlens) cu.push_back(cu.back() + n);
  T = cu.back();
  const int64_t B = int64_t(c.seqlens.size()), d = 128;
  Tensor q = random_device({T, c.H, d}, DType::kBF16, -1, 1, 1);
  Tensor k = random_device({T, c.H, d}, DType::kBF16, -1, 1, 2);
  Tensor v = random_device({T, c.HV, d}, DType::kBF16, -1, 1, 3);
  Tensor o = Tensor::empty({T, c.HV, d}, DType::kBF16, hyla::Device::cuda(0));
  Tensor g = c.kda ? random_device({T, c.HV, d}, DType::kF32, -0.5f, 0, 4)
                   : random_device({T, c.HV}, DType::kF32, -0.5f, 0, 4);
  Tensor beta = random_device({T, c.HV}, DType::kF32, 0, 1, 5);
  Tensor pool = random_device({2 * B, c.HV, d, d}, DType::kF32, -0.1f, 0.1f, 6);
  std::vector<int32_t> initial(B), final(B);
  for (int64_t b = 0; b < B; ++b) initial[b] = int32_t(2 * b), final[b] = int32_t(2 * b + 1);
  const auto upload = [](const std::vector<int32_t>& x) {
    Tensor t = Tensor::empty({int64_t(x.size())}, DType::kI32, hyla::Device::cuda(0));
    HYLA_CUDA_CHECK(cudaMemcpy(t.view().raw(), x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    return t;
  };
  Tensor cu_t = upload(cu), initial_t = upload(initial), final_t = upload(final);
  kernels::GatedDeltaRuleParams p;
  p.q = q, p.k = k, p.v = v, p.g = g, p.beta = beta, p.cu_seqlens = cu_t, p.o = o;
  p.state_pool = pool, p.initial_slots = initial_t, p.final_slots = final_t;
  p.state_kernel = state;
  p.cp_segments = cp;
  const int64_t ws_bytes = kernels::gated_delta_rule_chunk_workspace_bytes(p);
  Tensor ws = Tensor::empty({(ws_bytes + 3) / 4}, DType::kF32, hyla::Device::cuda(0));
  p.workspace = ws;
  Tensor flush = Tensor::empty({256 << 20}, DType::kU8, hyla::Device::cuda(0));  // > L2 (50 MB)

  cudaEvent_t start, stop;
  HYLA_CUDA_CHECK(cudaEventCreate(&start));
  HYLA_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int i = 0; i < calls + 2; ++i) {
    HYLA_CUDA_CHECK(cudaMemsetAsync(flush.view().raw(), i & 0xff, size_t(flush.numel())));
    HYLA_CUDA_CHECK(cudaEventRecord(start));
    const hyla::Status s = kernels::gated_delta_rule_chunk(p);
    HYLA_CUDA_CHECK(cudaEventRecord(stop));
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name.c_str(), s.message().c_str());
      std::exit(1);
    }
    HYLA_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    HYLA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (i >= 2) times.push_back(ms);  // two warm-up calls
  }
  HYLA_CUDA_CHECK(cudaEventDestroy(start));
  HYLA_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  const double ms = times[times.size() / 2];
  const double flops = double(T) * c.HV * kFlopsPerTokenHead;
  const double tflops = flops / (ms * 1e-3) / 1e12;
  return {ms, tflops, tflops / kPeakTflops};
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  const char* out = nullptr;
  const char* only = nullptr;
  auto state = kernels::ChunkStateKernel::kAuto;
  int cp = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else if (std::strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
      out = argv[++i];
    } else if (std::strcmp(argv[i], "--state") == 0 && i + 1 < argc &&
               (std::strcmp(argv[i + 1], "roles") == 0 || std::strcmp(argv[i + 1], "wide") == 0)) {
      state = std::strcmp(argv[++i], "roles") == 0 ? kernels::ChunkStateKernel::kRoles
                                                   : kernels::ChunkStateKernel::kWide;
    } else if (std::strcmp(argv[i], "--cp") == 0 && i + 1 < argc && std::atoi(argv[i + 1]) >= 1 &&
               std::atoi(argv[i + 1]) <= 16) {
      cp = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--only SUBSTRING] [--state roles|wide] [--cp 1..16] "
                   "[--out FILE.jsonl]\n",
                   argv[0]);
      return 2;
    }
  }
  std::vector<Case> cases = {
      {"gdn H16/HV32 T65536", {65536}, 16, 32, false},
      {"gdn H16/HV32 T4096", {4096}, 16, 32, false},
      {"gdn H16/HV32 varlen 16x4096", std::vector<int>(16, 4096), 16, 32, false},
      {"kda H32 T65536", {65536}, 32, 32, true},
      {"gdn H4/HV8 T65536 (1 of 4 GPUs)", {65536}, 4, 8, false},
  };
  if (quick) cases = {cases[1], cases[2]};
  if (only != nullptr) {
    std::erase_if(cases, [&](const Case& c) { return c.name.find(only) == std::string::npos; });
    if (cases.empty()) {
      std::fprintf(stderr, "no case name holds '%s'\n", only);
      return 2;
    }
  }
  FILE* json = out ? std::fopen(out, "w") : nullptr;
  std::printf("| case | ms | TFLOP/s | of bf16 peak |\n|---|---:|---:|---:|\n");
  for (const Case& c : cases) {
    const Result r = run(c, 20, state, cp);
    std::printf("| %s | %.4f | %.1f | %.1f%% |\n", c.name.c_str(), r.ms, r.tflops,
                100 * r.floor_fraction);
    std::fflush(stdout);
    if (json) {
      std::fprintf(json,
                   "{\"name\":\"%s\",\"op\":\"%s\",\"H\":%d,\"HV\":%d,\"seqs\":%zu,\"tokens\":%d,"
                   "\"ms\":%.5f,\"tflops\":%.2f}\n",
                   c.name.c_str(), c.kda ? "kda" : "gdn", c.H, c.HV, c.seqlens.size(),
                   c.seqlens[0] * int(c.seqlens.size()), r.ms, r.tflops);
      std::fflush(json);
    }
  }
  if (json) std::fclose(json);
  return 0;
}
