// GPU benchmark of the fused decode step (kernels/gated_delta_rule_decode.h) at the decode cases of
// ANCHORS.md: B = 1, 8, 64, 256, 1024; GDN H16/HV32 and KDA H32; d_k = d_v = 128; fp32 state in a
// slot pool updated in place; bf16 activations. Timed as CUDA-graph replay over a ring of pool
// slots larger than L2 (each replay of the graph runs R decode steps on R disjoint slot sets).
// GB/s counts what fla's benchmark counts: state read + write plus q/k/v/o, gates and beta (our
// kernel also reads and writes the conv window, not counted). Each case is first checked against
// the CPU body on the same inputs (relative L2 error of o and of the updated state).
// Prints a table; writes JSON lines to the file given as argv[1] (if any).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_memory.h"
#include "core/tensor.h"
#include "kernels/gated_delta_rule_decode.h"

namespace hyla {
namespace {

using kernels::GatedDeltaRuleDecodeParams;

struct Case {
  const char* name;
  bool kda;
  int H, HV;
};

Tensor random_host(std::initializer_list<int64_t> shape, DType dtype, std::mt19937& rng, float lo,
                   float hi) {
  Tensor t = Tensor::empty(shape, dtype);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::kBF16) {
      t.data<bf16>()[i] = f32_to_bf16(dist(rng));
    } else {
      t.data<float>()[i] = dist(rng);
    }
  }
  return t;
}

double rel_l2(const Tensor& got, const Tensor& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g =
        got.dtype() == DType::kBF16 ? bf16_to_f32(got.data<bf16>()[i]) : got.data<float>()[i];
    const double w =
        want.dtype() == DType::kBF16 ? bf16_to_f32(want.data<bf16>()[i]) : want.data<float>()[i];
    if (!std::isfinite(g)) return INFINITY;
    num += (g - w) * (g - w);
    den += w * w;
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct CaseResult {
  double us, gbps, err_o, err_state;
};

CaseResult run_case(const Case& c, int B, int d, bool commit = true) {
  std::mt19937 rng(1234u + unsigned(B) * 7u + (c.kda ? 1u : 0u));
  const int64_t conv_dim = 2 * int64_t(c.H) * d + int64_t(c.HV) * d, K = 4;
  const int64_t state_bytes_per_seq = int64_t(c.HV) * d * d * 4;
  // Ring: enough slot sets that one graph replay touches >= 512 MiB of state (L2 is 60 MiB).
  const int ring = int(std::max<int64_t>(2, (int64_t(512) << 20) / (state_bytes_per_seq * B)));
  const int64_t slots = int64_t(ring) * B;

  const Device gpu = Device::cuda();
  Tensor qkv = random_host({B, conv_dim}, DType::kBF16, rng, -1, 1);
  Tensor a = c.kda ? random_host({B, c.HV, d}, DType::kBF16, rng, -2, 2)
                   : random_host({B, c.HV}, DType::kBF16, rng, -2, 2);
  Tensor bb = random_host({B, c.HV}, DType::kBF16, rng, -2, 2);
  Tensor w = random_host({conv_dim, K}, DType::kF32, rng, -0.5, 0.5);
  Tensor A_log = random_host({c.HV}, DType::kF32, rng, -1, 1);
  Tensor dt_bias = c.kda ? random_host({c.HV, d}, DType::kF32, rng, -1, 1)
                         : random_host({c.HV}, DType::kF32, rng, -1, 1);
  // Host pools only for the first slot set (the checked one); the device pool is filled on device.
  Tensor conv0 = random_host({B, conv_dim, K - 1}, DType::kBF16, rng, -1, 1);
  Tensor state0 = random_host({B, c.HV, d, d}, DType::kF32, rng, -0.1f, 0.1f);

  Tensor d_qkv = qkv.to(gpu), d_a = a.to(gpu), d_b = bb.to(gpu), d_w = w.to(gpu),
         d_A = A_log.to(gpu), d_dt = dt_bias.to(gpu);
  Tensor d_conv = Tensor::empty({slots, conv_dim, K - 1}, DType::kBF16, gpu);
  Tensor d_state = Tensor::empty({slots, c.HV, d, d}, DType::kF32, gpu);
  d_conv.fill_bytes(0);
  d_state.fill_bytes(0);
  HYLA_CUDA_CHECK(cudaMemcpy(d_conv.view().raw(), conv0.view().raw(), size_t(conv0.nbytes()),
                             cudaMemcpyHostToDevice));
  HYLA_CUDA_CHECK(cudaMemcpy(d_state.view().raw(), state0.view().raw(), size_t(state0.nbytes()),
                             cudaMemcpyHostToDevice));
  Tensor d_o = Tensor::empty({B, c.HV, d}, DType::kBF16, gpu);
  // Verify mode (commit = false) writes the step's state here instead of the pool and leaves the
  // conv window alone: the step kernel alone, without the conv-window kernel.
  Tensor d_steps = commit ? Tensor() : Tensor::empty({B, 1, c.HV, d, d}, DType::kF32, gpu);
  std::vector<Tensor> d_slots;
  for (int r = 0; r < ring; ++r) {
    Tensor s = Tensor::empty({B}, DType::kI32);
    for (int i = 0; i < B; ++i) s.data<int32_t>()[i] = r * B + i;
    d_slots.push_back(s.to(gpu));
  }

  GatedDeltaRuleDecodeParams p;
  p.qkv = d_qkv;
  p.conv_weight = d_w;
  p.conv_state = d_conv;
  p.a = d_a;
  p.b = d_b;
  p.A_log = d_A;
  p.dt_bias = d_dt;
  p.state_pool = d_state;
  p.o = d_o;
  if (c.kda) p.lower_bound = -5.0f;

  // Check against the CPU body on slot set 0.
  CaseResult res{};
  {
    Tensor slots_host = Tensor::empty({B}, DType::kI32);
    for (int i = 0; i < B; ++i) slots_host.data<int32_t>()[i] = i;
    GatedDeltaRuleDecodeParams h = p;
    Tensor h_conv = conv0.clone(), h_state = state0.clone();
    Tensor h_o = Tensor::empty({B, c.HV, d}, DType::kBF16);
    h.qkv = qkv, h.conv_weight = w, h.conv_state = h_conv, h.a = a, h.b = bb, h.A_log = A_log,
    h.dt_bias = dt_bias, h.state_pool = h_state, h.o = h_o, h.slots = slots_host;
    const Status cs = kernels::gated_delta_rule_decode(h);
    p.slots = d_slots[0];
    d_o.fill_bytes(0xff);
    const Status gs = kernels::gated_delta_rule_decode(p);
    HYLA_CHECK(cs.ok() && gs.ok(), cs.to_string(), " / ", gs.to_string());
    HYLA_CUDA_CHECK(cudaDeviceSynchronize());
    Tensor g_o = d_o.to(Device::cpu());
    Tensor g_state = Tensor::empty({B, c.HV, d, d}, DType::kF32);
    HYLA_CUDA_CHECK(cudaMemcpy(g_state.view().raw(), d_state.view().raw(), size_t(g_state.nbytes()),
                               cudaMemcpyDeviceToHost));
    res.err_o = rel_l2(g_o, h_o);
    res.err_state = rel_l2(g_state, h_state);
  }

  p.commit = commit;
  if (!commit) p.step_states = d_steps;
  // One graph = `ring` decode steps over disjoint slot sets.
  cudaStream_t stream;
  HYLA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  HYLA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int r = 0; r < ring; ++r) {
    p.slots = d_slots[size_t(r)];
    HYLA_CHECK(kernels::gated_delta_rule_decode(p, Stream{stream}).ok(), "capture");
  }
  HYLA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  HYLA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) HYLA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  cudaEvent_t start, stop;
  HYLA_CUDA_CHECK(cudaEventCreate(&start));
  HYLA_CUDA_CHECK(cudaEventCreate(&stop));
  // Median of 7 timed batches of replays.
  const int replays = std::max(2, int(2000 / ring));
  std::vector<float> times;
  for (int rep = 0; rep < 7; ++rep) {
    HYLA_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < replays; ++i) HYLA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    HYLA_CUDA_CHECK(cudaEventRecord(stop, stream));
    HYLA_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    HYLA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  res.us = double(times[3]) * 1e3 / (double(replays) * ring);
  const double bytes = double(B) * (2.0 * double(state_bytes_per_seq) +      // state read + write
                                    2.0 * double(conv_dim) +                 // q, k, v (bf16)
                                    2.0 * c.HV * d +                         // o (bf16)
                                    (c.kda ? 2.0 * c.HV * d : 2.0 * c.HV) +  // gate input
                                    2.0 * c.HV);                             // beta input
  res.gbps = bytes / (res.us * 1e-6) * 1e-9;
  HYLA_CUDA_CHECK(cudaGraphExecDestroy(exec));
  HYLA_CUDA_CHECK(cudaGraphDestroy(graph));
  HYLA_CUDA_CHECK(cudaEventDestroy(start));
  HYLA_CUDA_CHECK(cudaEventDestroy(stop));
  HYLA_CUDA_CHECK(cudaStreamDestroy(stream));
  return res;
}

}  // namespace
}  // namespace hyla

int main(int argc, char** argv) {
  using namespace hyla;
  if (!cuda_available()) {
    std::printf("no CUDA device visible: nothing to benchmark\n");
    return 0;
  }
  FILE* json = argc > 1 ? std::fopen(argv[1], "w") : nullptr;
  cudaDeviceProp prop;
  HYLA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "hyla gated_delta_rule_decode on %s (%d SMs): fp32 state, bf16 activations, d = 128\n",
      prop.name, prop.multiProcessorCount);
  std::printf("| %-22s | %5s | %9s | %8s | %9s | %9s |\n", "case", "B", "us", "GB/s", "err o",
              "err state");
  const Case cases[] = {{"GDN H16/HV32", false, 16, 32}, {"KDA H32 safe gate", true, 32, 32}};
  for (const Case& c : cases) {
    for (int B : {1, 8, 64, 256, 1024}) {
      const CaseResult r = run_case(c, B, 128);
      std::printf("| %-22s | %5d | %9.2f | %8.0f | %9.2e | %9.2e |\n", c.name, B, r.us, r.gbps,
                  r.err_o, r.err_state);
      if (B == 1 || B == 64) {
        const CaseResult v = run_case(c, B, 128, /*commit=*/false);
        std::printf("| %-22s | %5d | %9.2f | %8.0f | %9s | %9s |\n",
                    (std::string(c.name) + " step only").c_str(), B, v.us, v.gbps, "-", "-");
      }
      if (json)
        std::fprintf(json,
                     "{\"case\":\"%s\",\"B\":%d,\"us\":%.3f,\"gbps\":%.1f,\"err_o\":%.3e,"
                     "\"err_state\":%.3e}\n",
                     c.name, B, r.us, r.gbps, r.err_o, r.err_state);
    }
  }
  if (json) std::fclose(json);
  return 0;
}
