// The block kernel of the CUDA decode step (decode_step_kernel, any T) and its launchers, for
// gated_delta_rule_decode.cu (f32 state pools, the entry) and gated_delta_rule_decode_bf16.cu
// (bf16 state pools): two translation units that compile in parallel. Everything here has
// internal linkage; each unit instantiates its own dtype. The algorithm is described at the top
// of gated_delta_rule_decode.cu. The -DHYLA_DECODE_PROBE timeline (g_probe) is read back by
// decode_probe_dump in gated_delta_rule_decode.cu, so it covers f32 state pools (the benchmark's).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "kernels/cuda/gated_delta_rule_decode_common.cuh"
#include "kernels/cuda/gated_delta_rule_decode_tiling.h"
#include "kernels/gated_delta_rule_decode.h"

namespace hyla::kernels::cuda {

namespace {

using namespace decode_detail;

#ifdef HYLA_DECODE_PROBE
// Timeline probe (a diagnostic build only: -DHYLA_DECODE_PROBE): thread 0 of each block of
// sequence 0 records %globaltimer (ns) at kProbePoints points, per slot (ring step) modulo 64;
// point kProbeSmid holds the block's SM id + 1 instead of a time.
constexpr int kProbeSteps = 64, kProbeBlocks = 256, kProbePoints = 8, kProbeSmid = 5;
__device__ unsigned long long g_probe[kProbeSteps][kProbeBlocks][kProbePoints];
__device__ __forceinline__ void probe(int slot, int point) {
  if (threadIdx.x != 0 || blockIdx.y != 0 || blockIdx.x >= kProbeBlocks || slot < 0) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  g_probe[slot % kProbeSteps][blockIdx.x][point] = t;
}
#define HYLA_PROBE(slot, point) probe(slot, point)
// Lane 0 of every warp of those blocks records %globaltimer as the warp reaches the block barrier
// (which warp the barrier waits for).
constexpr int kProbeWarps = 16;
__device__ unsigned long long g_probe_warp[kProbeSteps][kProbeBlocks][kProbeWarps];
__device__ __forceinline__ void probe_warp(int slot) {
  const int warp = int(threadIdx.x) >> 5;
  if ((threadIdx.x & 31) != 0 || blockIdx.y != 0 || blockIdx.x >= kProbeBlocks || slot < 0 ||
      warp >= kProbeWarps)
    return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  g_probe_warp[slot % kProbeSteps][blockIdx.x][warp] = t;
}
#define HYLA_PROBE_WARP(slot) probe_warp(slot)
#else
#define HYLA_PROBE(slot, point) ((void)0)
#define HYLA_PROBE_WARP(slot) ((void)0)
#endif

/// Blocks per SM that the registers of a decode (T = 1) kernel must allow (__launch_bounds__'
/// second argument; 0 = no bound, what ptxas does by itself), for the whole-key-head tilings the
/// entry takes at large batch with d_k = 128: the most blocks that still compile without spills
/// (ptxas -Xptxas -v; the register counts are in docs/perf-history.md, "GPU decode"). One block
/// more spills everywhere; a bound of 1 is not the same as none (it raised the d_k = 64 kernels'
/// registers).
template <typename Ts, bool kKda, int kDk, int kR, int kWarps, int kT>
constexpr int decode_min_blocks() {
  if (kT != 1 || kDk != 128) return 0;
  if (kR == 256 && kWarps == 8) return 3;
  if (kR == 128 && kWarps == 4 && !(kKda && sizeof(Ts) == 2)) return 6;
  return 0;
}

/// One block: rows [row0, row0 + kR) of key head kh (rows counted over its group value heads) of
/// sequence blockIdx.y, all T tokens, with kWarps warps; block rank r of the key head's cluster
/// of p.cluster blocks, row0 = r kR. kT: the most tokens per sequence this instantiation handles
/// (1 for decode, kMaxT for verify), so the decode path does no work for absent draft tokens.
/// kOverlap: launched as a programmatic dependent (overlap_previous), inputs read after
/// griddepcontrol.wait; a template parameter so that the plain instantiations keep the registers
/// of a kernel without the second path (a runtime flag costs registers, measured slower at large
/// batches: docs/perf-history.md, "GPU decode").
/// d_v == kDk.
template <typename Ts, bool kKda, int kDk, int kR, int kWarps, int kT, bool kOverlap>
__global__ void __launch_bounds__(32 * kWarps, decode_min_blocks<Ts, kKda, kDk, kR, kWarps, kT>())
    decode_step_kernel(const __grid_constant__ StepArgs p) {
  constexpr int kThreads = 32 * kWarps;
  constexpr int kPerLane = kDk / 32;
  constexpr int kRowsPerWarp = kR / kWarps;
  constexpr int kGroup = kRowsPerWarp < 4 ? kRowsPerWarp : 4;  // rows reduced side by side
  constexpr int kGroups = kRowsPerWarp / kGroup;
  constexpr int kStages = kGroups < 2 ? kGroups : 2;  // row groups held in registers
  constexpr int kHeads = kR > kDk ? kR / kDk : 1;     // value heads a block touches
  constexpr int kQkPerThread = (2 * kDk + kThreads - 1) / kThreads;
  constexpr int kVPerThread = (kR + kThreads - 1) / kThreads;
  static_assert(kDk % 32 == 0 && kR % kWarps == 0 && kRowsPerWarp % kGroup == 0);
  static_assert(kR <= kDk || kR % kDk == 0);
  __shared__ __align__(16) float s_qk[kT][2 * kDk];  // raw q | k after the conv
  __shared__ __align__(16) float s_decay[kKda ? kT : 1][kKda ? kHeads : 1][kDk];  // KDA exp(g)
  __shared__ float s_v[kT][kR];
  __shared__ float s_gdn_decay[kT][kHeads];  // GDN exp(g)
  __shared__ float s_beta[kT][kHeads];

  const int b = blockIdx.y;
  const int slot = p.slots[b];
  const int kh = blockIdx.x / p.cluster;
  const int rank = blockIdx.x % p.cluster;  // == the block's rank in its (p.cluster, 1, 1) cluster
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int T = kT == 1 ? 1 : p.T;
  const int row0 = rank * kR;                                      // first row in the key head
  const int hv0 = kh * p.group + row0 / kDk;                       // first value head of the block
  const int warp_head = (row0 % kDk + warp * kRowsPerWarp) / kDk;  // local head of this warp
  // Row offset of this warp's first row in a [.., HV, d_v, ..] array, from the (b or slot) base.
  const int64_t warp_rows = int64_t(kh) * p.group * kDk + row0 + warp * kRowsPerWarp;
  auto qk_channel = [&](int c) {
    return (c < kDk ? 0 : int64_t(p.H) * kDk) + int64_t(kh) * kDk + c % kDk;
  };
  // Items only some threads have are spread over the warps, so that warp 0 does not carry them
  // all to the block barrier: v channels on the last threads, the GDN gates on warp 1, beta on
  // warp 2 (item = v_tid + i kThreads, gate_tid, beta_tid; out of range = none).
  const int v_tid = kR < kThreads ? tid - (kThreads - kR) : tid;
  const int gate_tid = tid - (kWarps > 1 ? 32 : 0), beta_tid = tid - (kWarps > 2 ? 64 : 0);
  auto v_item = [&](int i) { return v_tid + i * kThreads; };
  auto v_ok = [&](int i) { return unsigned(v_item(i)) < unsigned(kR); };
  auto v_channel = [&](int r) {
    return 2 * int64_t(p.H) * kDk + int64_t(kh) * p.group * kDk + row0 + r;
  };

  trigger_dependents(p, 0);  // no-op without a dependent
#ifdef HYLA_DECODE_PROBE
  {
    unsigned long long t0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0)::"memory");
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (tid == 0 && b == 0 && blockIdx.x < kProbeBlocks && slot >= 0) {
      g_probe[slot % kProbeSteps][blockIdx.x][0] = t0;  // (stored once the slot id is back)
      g_probe[slot % kProbeSteps][blockIdx.x][kProbeSmid] = smid + 1;
    }
  }
  HYLA_PROBE(slot, 1);
#endif

  // 0. Constants (conv weights, dt_bias, A_log), then the inputs, indexed by the sequence, not by
  // its slot, issued while the slot id is on its way, unless the step overlaps the kernel before
  // it (kOverlap): then the inputs come after griddepcontrol.wait below.
  ConvIn<kT> qk_in[kQkPerThread], v_in[kVPerThread];
#pragma unroll
  for (int i = 0; i < kQkPerThread; ++i)
    if (tid + i * kThreads < 2 * kDk) {
      load_conv_weights(p, qk_channel(tid + i * kThreads), qk_in[i]);
      if constexpr (!kOverlap) load_conv_inputs(p, b, T, qk_channel(tid + i * kThreads), qk_in[i]);
    }
#pragma unroll
  for (int i = 0; i < kVPerThread; ++i)
    if (v_ok(i)) {
      load_conv_weights(p, v_channel(v_item(i)), v_in[i]);
      if constexpr (!kOverlap) load_conv_inputs(p, b, T, v_channel(v_item(i)), v_in[i]);
    }
  // KDA: thread tid takes (t, head, channel) items tid, tid + kThreads, ...; GDN: item gate_tid =
  // (t, head). Gate argument x = gate input + dt_bias; A = exp(A_log), computed at once (off the
  // chain after the inputs). Gate input and beta held as loaded (load_bits), converted in 3.
  constexpr int kGateItems = kKda ? (kT * kHeads * kDk + kThreads - 1) / kThreads : 1;
  float gate_bias[kGateItems], gate_A[kGateItems];
  uint32_t gate_in[kGateItems], beta_in = 0u;
  int64_t gate_at[kGateItems];  // element of a, -1 = none
#pragma unroll
  for (int n = 0; n < kGateItems; ++n) {
    gate_bias[n] = gate_A[n] = 0.0f;
    gate_in[n] = 0u;
    gate_at[n] = -1;
    if constexpr (kKda) {
      const int i = tid + n * kThreads;
      if (i < T * kHeads * kDk) {
        const int t = i / (kHeads * kDk), h = (i / kDk) % kHeads, c = i % kDk;
        const int hv = hv0 + h;
        gate_at[n] = (int64_t(b) * T + t) * p.a_row + hv * kDk + c;
        gate_bias[n] = p.dt_bias[hv * kDk + c];
        if constexpr (!kOverlap) gate_in[n] = load_bits(p.a, p.a_bf16, gate_at[n]);
        gate_A[n] = expf(p.A_log[hv]);
      }
    } else if (unsigned(gate_tid) < unsigned(T * kHeads)) {
      const int hv = hv0 + gate_tid % kHeads;
      gate_at[n] = (int64_t(b) * T + gate_tid / kHeads) * p.a_row + hv;
      gate_bias[n] = p.dt_bias[hv];
      if constexpr (!kOverlap) gate_in[n] = load_bits(p.a, p.a_bf16, gate_at[n]);
      gate_A[n] = expf(p.A_log[hv]);
    }
  }
  auto load_beta = [&] {
    if (unsigned(beta_tid) < unsigned(T * kHeads))
      beta_in = load_bits(p.b, p.b_bf16,
                          (int64_t(b) * T + beta_tid / kHeads) * p.b_row + hv0 + beta_tid % kHeads);
  };
  if constexpr (!kOverlap) load_beta();
  auto load_inputs = [&] {  // overlapped: after griddepcontrol.wait
#pragma unroll
    for (int i = 0; i < kQkPerThread; ++i)
      if (tid + i * kThreads < 2 * kDk)
        load_conv_inputs(p, b, T, qk_channel(tid + i * kThreads), qk_in[i]);
#pragma unroll
    for (int i = 0; i < kVPerThread; ++i)
      if (v_ok(i)) load_conv_inputs(p, b, T, v_channel(v_item(i)), v_in[i]);
#pragma unroll
    for (int n = 0; n < kGateItems; ++n)
      if (gate_at[n] >= 0) gate_in[n] = load_bits(p.a, p.a_bf16, gate_at[n]);
    load_beta();
  };
  if (slot < 0 || slot >= p.num_slots) return;  // padding: the whole cluster returns (same b)

  // 1. The first kStages row groups' loads and the conv windows (overlapped: then the wait).
  Ts* const rows_ptr =
      static_cast<Ts*>(p.state) + (int64_t(slot) * p.HV * kDk + warp_rows) * kDk + lane * kPerLane;
  float buf[kStages][kGroup][kPerLane];
#pragma unroll
  for (int s = 0; s < kStages; ++s)
#pragma unroll
    for (int u = 0; u < kGroup; ++u)
      RowFragment<Ts, kPerLane>::load(rows_ptr + (s * kGroup + u) * kDk, buf[s][u]);
#pragma unroll
  for (int i = 0; i < kQkPerThread; ++i)
    if (tid + i * kThreads < 2 * kDk)
      load_conv_window(p, slot, qk_channel(tid + i * kThreads), qk_in[i]);
#pragma unroll
  for (int i = 0; i < kVPerThread; ++i)
    if (v_ok(i)) load_conv_window(p, slot, v_channel(v_item(i)), v_in[i]);
  if constexpr (kOverlap) {
    asm volatile("griddepcontrol.wait;" ::: "memory");  // the kernel before has finished
    trigger_dependents(p, 1);
    HYLA_PROBE(slot, 2);
    load_inputs();
  }

  // 2. The key head's 2 d_k q/k channels (every block of the key head computes all of them; their
  // windows are advanced at once by a block that is the whole key head, else once every block has
  // read them: see 6) and this block's v channels (its alone: advanced at once). Every window is
  // loaded before the first window store.
  float qk_next[kQkPerThread][kMaxK - 1], v_next[kVPerThread][kMaxK - 1];
  auto store_qk_windows = [&] {
#pragma unroll
    for (int i = 0; i < kQkPerThread; ++i)
      if (tid + i * kThreads < 2 * kDk)
        store_window(p, slot, qk_channel(tid + i * kThreads), qk_next[i]);
  };
  // One channel: conv + SiLU into column col of the shared [kT][..] array out, the advanced window
  // into next.
  auto conv_to_shared = [&](int64_t ch, ConvIn<kT>& in, auto& out, int col,
                            float(&next)[kMaxK - 1]) {
    float y[kT];
    conv_apply(p, T, in, y, next);
#pragma unroll
    for (int t = 0; t < kT; ++t)
      if (t < T) out[t][col] = y[t];
  };
#pragma unroll
  for (int i = 0; i < kQkPerThread; ++i) {
    const int c = tid + i * kThreads;
    if (c < 2 * kDk) conv_to_shared(qk_channel(c), qk_in[i], s_qk, c, qk_next[i]);
  }
#pragma unroll
  for (int i = 0; i < kVPerThread; ++i) {
    const int r = v_item(i);
    if (v_ok(i)) conv_to_shared(v_channel(r), v_in[i], s_v, r, v_next[i]);
  }
  if (p.commit) {
#pragma unroll
    for (int i = 0; i < kVPerThread; ++i)
      if (v_ok(i)) store_window(p, slot, v_channel(v_item(i)), v_next[i]);
    if (p.cluster == 1) store_qk_windows();
  }
  // Every q/k window this block reads has been read: rank 0 may overwrite them after the wait.
  // Relaxed (no release fence: with it, ptxas emits MEMBAR.ALL.GPU, which waits for the state
  // loads in flight): the reads are complete already, since every window value has gone into a
  // conv output stored to shared memory above, which no instruction can do before its load returns.
  const bool counted = p.cluster > 1 && p.arrivals != nullptr;
  if (p.cluster > 1 && !counted) {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  }

  // 3. Gates (fp32) of the block's value heads: GDN one decay per token, KDA one per key channel;
  // beta = sigmoid(b).
#pragma unroll
  for (int n = 0; n < kGateItems; ++n) {
    if constexpr (kKda) {
      const int i = tid + n * kThreads;
      if (i < T * kHeads * kDk) {
        const float x = bits_to_float(gate_in[n], p.a_bf16) + gate_bias[n];
        const float g = gate_log_decay(gate_A[n], x, p.safe_gate, p.lower_bound);
        s_decay[i / (kHeads * kDk)][(i / kDk) % kHeads][i % kDk] = expf(g);
      }
    } else if (unsigned(gate_tid) < unsigned(T * kHeads)) {
      const float x = bits_to_float(gate_in[n], p.a_bf16) + gate_bias[n];
      s_gdn_decay[gate_tid / kHeads][gate_tid % kHeads] =
          expf(gate_log_decay(gate_A[n], x, false, 0.0f));
    }
  }
  if (unsigned(beta_tid) < unsigned(T * kHeads))
    s_beta[beta_tid / kHeads][beta_tid % kHeads] = sigmoid(bits_to_float(beta_in, p.b_bf16));
  HYLA_PROBE(slot, 3);
  HYLA_PROBE_WARP(slot);
  __syncthreads();
  HYLA_PROBE(slot, 4);  // (point 5, after the l2 norms, went with them into the rows)
  // Counted (no cluster): every thread of this block has read its q/k windows (the barrier
  // above); one arrival for the block, relaxed for the same reason as the cluster arrival. An
  // increment that wraps to 0 at the last arrival (atom.inc with limit p.cluster - 1), so that the
  // counter is left at zero for the next call. Not an add: ptxas compiles an add, inline PTX or
  // not, as a warp-aggregated atomic whose result is shuffled at once, which stalls warp 0 for the
  // atomic's round trip before its rows (SASS: VOTEU / POPC / SHFL.IDX after the ATOMG); the count
  // is needed only at the end.
  unsigned arrived = 0;
  if (counted && p.commit && tid == 0)
    asm volatile("atom.relaxed.gpu.global.inc.u32 %0, [%1], %2;"
                 : "=r"(arrived)
                 : "l"(p.arrivals + int64_t(b) * p.H + kh), "r"(unsigned(p.cluster - 1))
                 : "memory");

  // 5. Row groups, one token at a time (delta_rule_rows: the l2 norms folded into the first warp
  // reduction), each group stored back (decode) or every token's copy stored (verify).
  static_assert(kGroups % kStages == 0);
  for (int g0 = 0; g0 < kGroups; g0 += kStages) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      const int gi = g0 + s;
      float(&row)[kGroup][kPerLane] = buf[s];
      const int r_warp = gi * kGroup;  // first row of the group within the warp
      for (int t = 0; t < T; ++t) {
        float kk[kPerLane], qq[kPerLane], dd[kPerLane];
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
          qq[j] = s_qk[t][lane * kPerLane + j];
          kk[j] = s_qk[t][kDk + lane * kPerLane + j];
          dd[j] = kKda ? s_decay[t][warp_head][lane * kPerLane + j] : s_gdn_decay[t][warp_head];
        }
        const float mine =
            delta_rule_rows(row, qq, kk, dd, s_beta[t][warp_head], p.scale,
                            [&](int u) { return s_v[t][warp * kRowsPerWarp + r_warp + u]; });
        const int64_t bt = int64_t(b) * T + t;
        if (lane < kGroup)
          store_any(p.o, p.o_bf16, bt * p.HV * kDk + warp_rows + r_warp + lane, mine);
        if (!p.commit) {
          Ts* step = static_cast<Ts*>(p.step_states) +
                     (bt * p.HV * kDk + warp_rows + r_warp) * kDk + lane * kPerLane;
#pragma unroll
          for (int u = 0; u < kGroup; ++u) RowFragment<Ts, kPerLane>::store(step + u * kDk, row[u]);
        }
      }
      if (p.commit) {
#pragma unroll
        for (int u = 0; u < kGroup; ++u)
          RowFragment<Ts, kPerLane>::store(rows_ptr + (r_warp + u) * kDk, row[u]);
      }
      if (gi + kStages < kGroups) {
#pragma unroll
        for (int u = 0; u < kGroup; ++u)
          RowFragment<Ts, kPerLane>::load(rows_ptr + ((gi + kStages) * kGroup + u) * kDk, row[u]);
      }
    }
  }

  HYLA_PROBE(slot, 6);
  // 6. Counted: the key head's last block to arrive (its increment wrapped the counter to zero)
  // advances its q/k windows: every other block has read them. Cluster: once every block has read
  // the q/k windows, rank 0 advances them.
  if (counted) {
    if (p.commit) {
      __shared__ bool s_last;
      if (tid == 0) s_last = arrived == unsigned(p.cluster - 1);
      __syncthreads();
      if (s_last) store_qk_windows();
    }
  } else if (p.cluster > 1) {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
    if (p.commit && rank == 0) store_qk_windows();
  }
  HYLA_PROBE(slot, 7);
}

template <typename Ts, bool kKda, int kDk, int kR, int kWarps, int kT, bool kOverlap>
Status launch_block_kernel(const StepArgs& args, int B, cudaStream_t stream) {
  return launch_decode_grid<decode_step_kernel<Ts, kKda, kDk, kR, kWarps, kT, kOverlap>>(
      args, B, kWarps, kOverlap, stream);
}

/// Overlapped instantiations exist for the decode (T = 1) tilings the entry picks with
/// overlap_previous (decode_tiling_overlaps); the others run in stream order with the flag set.
template <typename Ts, bool kKda, int kDk, int kR, int kWarps, int kT>
Status launch_tiled(const StepArgs& args, int B, cudaStream_t stream) {
  if constexpr (kT == 1 && block_tiling_overlaps(kR, kWarps))
    if (args.overlap)
      return launch_block_kernel<Ts, kKda, kDk, kR, kWarps, kT, true>(args, B, stream);
  return launch_block_kernel<Ts, kKda, kDk, kR, kWarps, kT, false>(args, B, stream);
}

template <typename Ts, bool kKda, int kDk, int kT>
Status launch_rows(const StepArgs& args, int B, DecodeTiling t, cudaStream_t stream) {
  if (t.kernel == DecodeKernel::kBulk) return launch_bulk<Ts, kKda, kDk>(args, B, stream);
  if (t.kernel == DecodeKernel::kSplit) return launch_split<Ts, kKda, kDk>(args, B, stream);
  if (t.kernel == DecodeKernel::kWarp)
    return launch_warp<Ts, kKda>(args, kDk, B, t.rows_per_block, t.warps, stream);
  const int key = t.rows_per_block * 100 + t.warps;
  switch (key) {
    case 808: return launch_tiled<Ts, kKda, kDk, 8, 8, kT>(args, B, stream);
    case 1608: return launch_tiled<Ts, kKda, kDk, 16, 8, kT>(args, B, stream);
    case 1616:  // decode only: the entry takes it with arrival counters at T = 1
      if constexpr (kT == 1)
        return launch_tiled<Ts, kKda, kDk, 16, 16, kT>(args, B, stream);
      else
        return unsupported(
            "gated_delta_rule_decode (CUDA): 16 rows per block with 16 warps take "
            "one token per sequence only, not ",
            args.T);
    case 3208: return launch_tiled<Ts, kKda, kDk, 32, 8, kT>(args, B, stream);
    case 6404: return launch_tiled<Ts, kKda, kDk, 64, 4, kT>(args, B, stream);
    case 12804: return launch_tiled<Ts, kKda, kDk, 128, 4, kT>(args, B, stream);
    case 25608: return launch_tiled<Ts, kKda, kDk, 256, 8, kT>(args, B, stream);
    default:
      return unsupported("gated_delta_rule_decode (CUDA): no tiling of ", t.rows_per_block,
                         " rows per block with ", t.warps, " warps");
  }
}

template <typename Ts, bool kKda, int kDk>
Status launch_tokens(const StepArgs& args, int B, DecodeTiling rows, cudaStream_t stream) {
  return args.T == 1 ? launch_rows<Ts, kKda, kDk, 1>(args, B, rows, stream)
                     : launch_rows<Ts, kKda, kDk, kMaxT>(args, B, rows, stream);
}

template <typename Ts, bool kKda>
Status launch_head_dim(const StepArgs& args, int d_k, int B, DecodeTiling rows,
                       cudaStream_t stream) {
  switch (d_k) {
    case 64: return launch_tokens<Ts, kKda, 64>(args, B, rows, stream);
    case 128: return launch_tokens<Ts, kKda, 128>(args, B, rows, stream);
    default:
      return unsupported("gated_delta_rule_decode (CUDA): d_k = ", d_k, ", supported: 64, 128");
  }
}

}  // namespace

}  // namespace hyla::kernels::cuda
