// GPU benchmark of the fused decode step (kernels/gated_delta_rule_decode.h) at the decode cases of
// ANCHORS.md: B = 1, 8, 64, 256, 1024; GDN H16/HV32 and KDA H32; d_k = d_v = 128; fp32 state in a
// slot pool updated in place; bf16 activations. Timed as CUDA-graph replay over a ring of pool
// slots larger than L2 (each replay of the graph runs R decode steps on R disjoint slot sets).
// GB/s counts what fla's benchmark counts: state read + write plus q/k/v/o, gates and beta (our
// kernel also reads and writes the conv window, not counted). Each case is first checked against
// the CPU body on the same inputs (relative L2 error of o and of the updated state).
// Prints a table; writes JSON lines to the file given as the last argument (if any). With --sweep,
// also times every tiling of the CUDA body (rows per block / cluster size) the geometry admits, so
// the entry's choice can be checked against the alternatives. The key heads' arrival counters
// (GatedDeltaRuleDecodeParams::arrivals) are given, as a serving engine gives them; --clusters
// times the block tilings without them (a cluster barrier per key head instead).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_launch.h"
#include "core/device_memory.h"
#include "core/tensor.h"
#include "kernels/cuda/gated_delta_rule_decode_tiling.h"
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

/// The floors of this harness: the same state bytes read and written by a plain copy (16 rows of
/// d = 128 fp32 per block, kVec (4) x 16 bytes per thread, slot read first), no math. kMode 0: in
/// place (what the decode step does); 1: in place with streaming cache hints (ld/st .cs); 2: out of
/// place, into the slot `shift` further on (what fla's public decode does: a fresh state; at small
/// B the next step then finds its state in L2, so that row is no floor there). Mode 0 is also
/// timed launched in clusters of 16 blocks, as the small-batch decode tilings are. kMode 3: in
/// place as a programmatic dependent of the kernel before (slot id and loads before
/// griddepcontrol.wait, stores after: what an overlapped step can reach at best); 4: no copy, the
/// slot id only (the cost of a launch in this graph); 5: the same with the dependent launch. Each
/// value is stored times `one` (1 at run time) so that the compiler cannot drop the stores.
/// Mode 0 with kVec 2 or 1: 8 or 4 rows per block of 128 threads (fewer bytes in flight per
/// thread, more blocks).
template <int kMode, int kVec = 4>
__global__ void state_copy_floor_kernel(float4* state, const int32_t* slots, int64_t heads_rows,
                                        int64_t shift, int64_t num_slots, float one) {
  const int b = blockIdx.y;
  if constexpr (kMode == 3 || kMode == 5) asm volatile("griddepcontrol.launch_dependents;");
  const int64_t slot = slots[b];
  if constexpr (kMode >= 4) {
    if constexpr (kMode == 5) asm volatile("griddepcontrol.wait;" ::: "memory");
    if (slot < 0) state[0].x = one;  // never (slots are >= 0): keeps the slot load
    return;
  }
  const int64_t offset = int64_t(blockIdx.x) * 4 * kVec * 32 + threadIdx.x;
  const float4* src = state + slot * heads_rows * 32 + offset;
  float4* dst = state + (kMode == 2 ? (slot + shift) % num_slots : slot) * heads_rows * 32 + offset;
  float4 x[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) x[i] = kMode == 1 ? __ldcs(src + i * 128) : src[i * 128];
  if constexpr (kMode == 3) asm volatile("griddepcontrol.wait;" ::: "memory");
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const float4 y = make_float4(x[i].x * one, x[i].y * one, x[i].z * one, x[i].w * one);
    if (kMode == 1) {
      __stcs(dst + i * 128, y);
    } else {
      dst[i * 128] = y;
    }
  }
}

/// The in-place copy floor streamed the way the whole-key-head decode tilings stream the state
/// (R256w8 for GDN, R128w4 for KDA): one block per (sequence, key head), 32 rows per warp, each
/// lane 16 bytes of every row, kStages groups of 4 rows in flight (the tilings: 2); no math, no
/// prologue beyond the slot id. The gap between this floor and the plain copy's is the price of
/// the shape alone. kInterleave: warp w takes the block's rows w, w + warps, w + 2 warps, ...
/// instead of 32 contiguous ones, so that at any moment the block's warps touch neighbouring rows
/// (one contiguous span) rather than one span each (the access-order question of the
/// small-block copies, which are faster). Measured (docs/perf-history.md, "GPU decode", entry of
/// 685205d): interleaving is slower, 4 groups in flight faster.
template <int kStages, bool kInterleave>
__global__ void state_copy_head_kernel(float4* state, const int32_t* slots, int64_t heads_rows,
                                       int rows_per_block, float one) {
  constexpr int kRowVecs = 32;  // 16-byte vectors per row of d = 128 fp32
  constexpr int kGroups = 8;    // of 4 rows: 32 rows per warp
  const int64_t slot = slots[blockIdx.y];
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int warps = int(blockDim.x) >> 5;
  float4* const base =
      state + (slot * heads_rows + int64_t(blockIdx.x) * rows_per_block) * kRowVecs + lane;
  auto row = [&](int r) {  // the warp's r-th row (r in [0, 32))
    return base + int64_t(kInterleave ? r * warps + warp : warp * 32 + r) * kRowVecs;
  };
  float4 buf[kStages][4];
#pragma unroll
  for (int s = 0; s < kStages; ++s)
#pragma unroll
    for (int u = 0; u < 4; ++u) buf[s][u] = *row(s * 4 + u);
  for (int g = 0; g < kGroups; g += kStages) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      const int gi = g + s;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const float4 x = buf[s][u];
        *row(gi * 4 + u) = make_float4(x.x * one, x.y * one, x.z * one, x.w * one);
      }
      if (gi + kStages < kGroups) {
#pragma unroll
        for (int u = 0; u < 4; ++u) buf[s][u] = *row((gi + kStages) * 4 + u);
      }
    }
  }
}

/// The copy floors by name: floor i (from 1) is timed as the tiling {-i, 0} (run_case's `step`).
constexpr const char* kFloorNames[] = {
    "copy",    "copy.cs", "copy.out",  "copy.c16",   "copy+ovl",   "launch",     "launch+ovl",
    "copy.x2", "copy.x1", "copy.head", "copy.headI", "copy.head4", "copy.headI4"};

struct Timing {
  kernels::cuda::DecodeTiling tiling;  ///< rows_per_block 0 = the entry's own choice
  double us, gbps;
};

struct CaseResult {
  double err_o, err_state;
  std::vector<Timing> timings;  ///< [0] = the entry's choice, then the sweep (if asked)
};

/// Sets up one case (pools, inputs, CPU check), then times the entry and each tiling in `sweep`.
CaseResult run_case(const Case& c, int B, int d,
                    const std::vector<kernels::cuda::DecodeTiling>& sweep, bool overlap,
                    bool counted) {
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
  // Host pools only for the first slot set (the checked one); the device pool is filled on
  // device.
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
  Tensor d_arrivals = Tensor::empty({B, c.H}, DType::kI32, gpu);  // zero, left zero by each step
  d_arrivals.fill_bytes(0);
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
  if (counted) p.arrivals = d_arrivals;
  if (c.kda) p.lower_bound = -5.0f;
  const int64_t workspace_bytes =
      kernels::gated_delta_rule_decode_workspace_bytes(kernels::decode_shape(p));
  Tensor d_workspace = Tensor::empty({workspace_bytes / 4}, DType::kF32, gpu);
  p.workspace = d_workspace;

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
    h.arrivals = TensorView();  // (CUDA only)
    h.workspace = TensorView();
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

  const double bytes = double(B) * (2.0 * double(state_bytes_per_seq) +      // state read + write
                                    2.0 * double(conv_dim) +                 // q, k, v (bf16)
                                    2.0 * c.HV * d +                         // o (bf16)
                                    (c.kda ? 2.0 * c.HV * d : 2.0 * c.HV) +  // gate input
                                    2.0 * c.HV);                             // beta input
  cudaStream_t stream;
  HYLA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  HYLA_CUDA_CHECK(cudaEventCreate(&start));
  HYLA_CUDA_CHECK(cudaEventCreate(&stop));
  // --overlap: each step may start while the previous one runs (safe here: consecutive steps of
  // the ring touch disjoint slot sets; in a model the kernel before is the input projection).
  p.overlap_previous = overlap;
  std::vector<kernels::cuda::DecodeTiling> variants = {{0, 0}};
  variants.insert(variants.end(), sweep.begin(), sweep.end());
  for (const kernels::cuda::DecodeTiling tiling : variants) {
    auto step = [&](Stream s) {
      if (tiling.rows_per_block < 0) {  // a copy floor (kFloorNames)
        const dim3 grid(unsigned(c.HV * d / 16), unsigned(B));
        const cudaStream_t st = static_cast<cudaStream_t>(s.handle);
        float4* state = static_cast<float4*>(d_state.view().raw());
        const int32_t* ids = p.slots.data<int32_t>();
        const int64_t rows = int64_t(c.HV) * d;
        if (tiling.rows_per_block == -1)
          state_copy_floor_kernel<0><<<grid, 128, 0, st>>>(state, ids, rows, 0, slots, 1.0f);
        if (tiling.rows_per_block == -2)
          state_copy_floor_kernel<1><<<grid, 128, 0, st>>>(state, ids, rows, 0, slots, 1.0f);
        if (tiling.rows_per_block == -3)
          state_copy_floor_kernel<2><<<grid, 128, 0, st>>>(state, ids, rows, B, slots, 1.0f);
        if (tiling.rows_per_block == -8)
          state_copy_floor_kernel<0, 2>
              <<<dim3(grid.x * 2, grid.y), 128, 0, st>>>(state, ids, rows, 0, slots, 1.0f);
        if (tiling.rows_per_block == -9)
          state_copy_floor_kernel<0, 1>
              <<<dim3(grid.x * 4, grid.y), 128, 0, st>>>(state, ids, rows, 0, slots, 1.0f);
        if (tiling.rows_per_block <= -10 && tiling.rows_per_block >= -13) {
          const int head_rows = c.HV / c.H * d;  // 32 rows per warp
          const dim3 heads(unsigned(c.H), unsigned(B));
          const unsigned threads = unsigned(head_rows);
          switch (tiling.rows_per_block) {
            case -10:
              state_copy_head_kernel<2, false>
                  <<<heads, threads, 0, st>>>(state, ids, rows, head_rows, 1.0f);
              break;
            case -11:
              state_copy_head_kernel<2, true>
                  <<<heads, threads, 0, st>>>(state, ids, rows, head_rows, 1.0f);
              break;
            case -12:
              state_copy_head_kernel<4, false>
                  <<<heads, threads, 0, st>>>(state, ids, rows, head_rows, 1.0f);
              break;
            default:
              state_copy_head_kernel<4, true>
                  <<<heads, threads, 0, st>>>(state, ids, rows, head_rows, 1.0f);
          }
        }
        // in place overlapped / launch only (+ overlapped) / in clusters of 16 blocks
        const LaunchShape copy_shape{.grid = grid, .block = dim3(128)},
            dependent{.grid = grid, .block = dim3(128), .dependent = true},
            clustered{.grid = grid, .block = dim3(128), .cluster = 16};
        const int64_t no_shift = 0;
        if (tiling.rows_per_block == -5)
          launch_kernel_ex<state_copy_floor_kernel<3>>(dependent, st, state, ids, rows, no_shift,
                                                       slots, 1.0f);
        if (tiling.rows_per_block == -6)
          launch_kernel_ex<state_copy_floor_kernel<4>>(copy_shape, st, state, ids, rows, no_shift,
                                                       slots, 1.0f);
        if (tiling.rows_per_block == -7)
          launch_kernel_ex<state_copy_floor_kernel<5>>(dependent, st, state, ids, rows, no_shift,
                                                       slots, 1.0f);
        if (tiling.rows_per_block == -4)
          launch_kernel_ex<state_copy_floor_kernel<0>>(clustered, st, state, ids, rows, no_shift,
                                                       slots, 1.0f);
        HYLA_CUDA_CHECK(cudaGetLastError());
        return ok_status();
      }
      return tiling.rows_per_block == 0
                 ? kernels::gated_delta_rule_decode(p, s)
                 : kernels::cuda::gated_delta_rule_decode_tiled(p, tiling, s);
    };
    // One graph = `ring` decode steps over disjoint slot sets.
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    HYLA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    for (int r = 0; r < ring; ++r) {
      p.slots = d_slots[size_t(r)];
      const Status st = step(Stream{stream});
      HYLA_CHECK(st.ok(), "capture: ", st.to_string());
    }
    HYLA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    HYLA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 3; ++i) HYLA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    // Median of 7 timed batches of replays, each batch about 4096 / B steps (at least 16).
    const int replays = std::max(2, std::max(16, 4096 / B) / ring);
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
    const double us = double(times[3]) * 1e3 / (double(replays) * ring);
#ifdef HYLA_DECODE_PROBE
    if (B == 1 && tiling.rows_per_block >= 0 &&
        tiling.kernel == kernels::cuda::DecodeKernel::kBlock) {
      const auto t = tiling.rows_per_block ? tiling
                                           : kernels::cuda::default_decode_tiling(
                                                 B, c.H, c.HV / c.H, d, 1, overlap, true, counted);
      std::printf("probe %s R%d w%d%s: %.2f us\n", c.name, t.rows_per_block, t.warps,
                  overlap ? " overlap" : "", us);
      HYLA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
      kernels::cuda::decode_probe_dump(12, c.H * (c.HV / c.H) * d / t.rows_per_block);
    }
#endif
    res.timings.push_back(Timing{tiling, us, bytes / (us * 1e-6) * 1e-9});
    HYLA_CUDA_CHECK(cudaGraphExecDestroy(exec));
    HYLA_CUDA_CHECK(cudaGraphDestroy(graph));
  }
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
  // --sweep: every tiling; --floor: also plain copies of the same state bytes (this harness's
  // floors: in place, in place with streaming hints, out of place, clustered, overlapped; a launch
  // alone, plain and overlapped; in place with 2 or 1 x 16 bytes per thread; in place shaped as
  // the whole-key-head tilings stream, also with each warp's rows interleaved over the block
  // (headI), 4 row groups in flight (head4), both (headI4)); --overlap: steps launched with
  // overlap_previous (rows marked +ovl); --only gdn|kda, --batch B (any B; default the five
  // of ANCHORS.md), --rows R: one slice (for a profiler); --clusters: no arrival counters.
  bool sweep = false, floor = false, overlap = false, counted = true;
  const char* json_path = nullptr;
  std::string only;
  int only_batch = 0, only_rows = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--sweep") {
      sweep = true;
    } else if (arg == "--overlap") {
      overlap = true;
    } else if (arg == "--clusters") {
      counted = false;
    } else if (arg == "--floor") {
      floor = true;
    } else if (arg == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (arg == "--batch" && i + 1 < argc) {
      only_batch = std::atoi(argv[++i]);
    } else if (arg == "--rows" && i + 1 < argc) {
      only_rows = std::atoi(argv[++i]);
    } else {
      json_path = argv[i];
    }
  }
  FILE* json = json_path ? std::fopen(json_path, "w") : nullptr;
  cudaDeviceProp prop;
  HYLA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "hyla gated_delta_rule_decode on %s (%d SMs): fp32 state, bf16 activations, d = 128; "
      "key heads of several blocks: %s\n",
      prop.name, prop.multiProcessorCount,
      counted ? "arrival counters (block kernel), clusters (warp kernel)" : "clusters");
  std::printf("| %-22s | %5s | %-8s | %9s | %8s | %9s | %9s |\n", "case", "B", "tiling", "us",
              "GB/s", "err o", "err state");
  const Case cases[] = {{"GDN H16/HV32", false, 16, 32}, {"KDA H32 safe gate", true, 32, 32}};
  for (const Case& c : cases) {
    if (!only.empty() && (only == "kda") != c.kda) continue;
    const std::vector<int> batches =
        only_batch > 0 ? std::vector<int>{only_batch} : std::vector<int>{1, 8, 64, 256, 1024};
    for (int B : batches) {
      std::vector<kernels::cuda::DecodeTiling> tilings;
      const int64_t group = c.HV / c.H;
      for (const auto t : kernels::cuda::decode_tilings()) {
        if (kernels::cuda::decode_cluster_size(t, group, 128) == 0) continue;
        if (sweep || (only_rows != 0 && t.rows_per_block == only_rows)) tilings.push_back(t);
      }
      if (floor)
        for (int i = 1; i <= int(std::size(kFloorNames)); ++i) tilings.push_back({-i, 0});
      const CaseResult r = run_case(c, B, 128, tilings, overlap, counted);
      const auto chosen =
          kernels::cuda::default_decode_tiling(B, c.H, group, 128, 1, overlap, true, counted,
                                               /*workspace_ok=*/true);
      for (const Timing& t : r.timings) {
        const bool is_default = t.tiling.rows_per_block == 0;
        const auto tl = is_default ? chosen : t.tiling;
        std::string name;
        if (tl.rows_per_block < 0) {
          name = kFloorNames[-tl.rows_per_block - 1];
        } else {
          name = kernels::cuda::decode_tiling_name(tl, group, 128);
        }
        if (is_default) name += "*";
        if (overlap && kernels::cuda::decode_tiling_overlaps(tl, 1)) name += "+ovl";
        std::printf("| %-22s | %5d | %-8s | %9.2f | %8.0f | %9.2e | %9.2e |\n", c.name, B,
                    name.c_str(), t.us, t.gbps, r.err_o, r.err_state);
        if (json)
          std::fprintf(json,
                       "{\"case\":\"%s\",\"B\":%d,\"rows_per_block\":%d,\"warps\":%d,"
                       "\"kernel\":\"%s\",\"default\":%s,\"us\":%.3f,\"gbps\":%.1f,\"err_o\":%.3e,"
                       "\"err_state\":%.3e,\"arrivals\":%s}\n",
                       c.name, B, tl.rows_per_block, tl.warps,
                       tl.rows_per_block < 0                              ? "floor"
                       : tl.bulk()                                        ? "bulk"
                       : tl.kernel == kernels::cuda::DecodeKernel::kWarp  ? "warp"
                       : tl.kernel == kernels::cuda::DecodeKernel::kSplit ? "split"
                                                                          : "block",
                       is_default ? "true" : "false", t.us, t.gbps, r.err_o, r.err_state,
                       counted ? "true" : "false");
      }
    }
  }
  if (json) std::fclose(json);
  return 0;
}
