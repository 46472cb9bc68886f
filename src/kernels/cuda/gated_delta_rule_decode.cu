// CUDA body of the fused decode / verify step and the commit (kernels/gated_delta_rule_decode.h):
// the tilings and the entry, the block kernel, the commit kernels, the gated norm.
//
// Decode is bound by the state: per (sequence, value head) d_v x d_k fp32 = 64 KiB read and written
// per token. Unit of work: one (sequence, key head), whose `group` value heads' rows are contiguous
// in the pool. The block kernel (decode_step_kernel, any T) gives each thread block rows_per_block
// of those rows (tilings: gated_delta_rule_decode_tiling.h); the blocks of one key head form a
// thread-block cluster. Each block:
//   0. issues the loads that do not need the slot id (conv weights and new inputs, gate inputs)
//      while the slot id is on its way;
//   1. issues the loads of its first state rows (registers, 16-byte loads for fp32), so the state
//      bytes are in flight during everything else;
//   2. computes the key head's 2 d_k q/k conv channels (window + SiLU; its threads share them
//      through shared memory), its own rows' v channels and the gates; a v window is advanced at
//      once (no other block reads it), the q/k windows by rank 0 after a cluster barrier;
//   3. streams its rows: each warp holds a row as 32 lanes x d_k / 32 contiguous elements, runs
//      the T tokens on it (decay, predict = warp sum, write, read = warp sum; the q/k l2 norms
//      folded into the first sum), stores it back (decode) or stores every step's copy (verify),
//      the next row group's loads in flight meanwhile.
// With overlap_previous the block is a programmatic dependent of the kernel before it: it lets its
// own dependent launch at once, loads the slot id, its state rows and the windows, then waits
// (griddepcontrol.wait) before it reads the inputs. Build with -DHYLA_DECODE_PROBE for a timeline
// of each block (tools/gpu/decode_probe.sh).
// Two T = 1 kernels live beside it: the bulk-copy kernel (gated_delta_rule_decode_bulk.cu) and the
// warp kernel (gated_delta_rule_decode_warp.cu). Gated RMSNorm, when asked, runs as one more
// kernel. No host synchronisation: graph-capturable.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <string>
#ifdef HYLA_DECODE_PROBE
#include <algorithm>
#include <cstdio>
#include <vector>
#endif

#include "core/cuda_check.h"
#include "kernels/cuda/gated_delta_rule_decode_common.cuh"
#include "kernels/cuda/gated_delta_rule_decode_tiling.h"
#include "kernels/gated_delta_rule_decode.h"

namespace hyla::kernels::cuda {

namespace {

using namespace decode_detail;

#ifdef HYLA_DECODE_PROBE
// Timeline probe (a diagnostic build only: -DHYLA_DECODE_PROBE): thread 0 of each block of
// sequence 0 records %globaltimer (ns) at kProbePoints points, per slot (ring step) modulo 64.
constexpr int kProbeSteps = 64, kProbeBlocks = 256, kProbePoints = 8;
__device__ unsigned long long g_probe[kProbeSteps][kProbeBlocks][kProbePoints];
__device__ __forceinline__ void probe(int slot, int point) {
  if (threadIdx.x != 0 || blockIdx.y != 0 || blockIdx.x >= kProbeBlocks || slot < 0) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  g_probe[slot % kProbeSteps][blockIdx.x][point] = t;
}
#define HYLA_PROBE(slot, point) probe(slot, point)
#else
#define HYLA_PROBE(slot, point) ((void)0)
#endif

/// One block: rows [row0, row0 + kR) of key head kh (rows counted over its group value heads) of
/// sequence blockIdx.y, all T tokens, with kWarps warps; block rank r of the key head's cluster
/// of p.cluster blocks, row0 = r kR. kT: the most tokens per sequence this instantiation handles
/// (1 for decode, kMaxT for verify), so the decode path does no work for absent draft tokens.
/// kOverlap: launched as a programmatic dependent (overlap_previous), inputs read after
/// griddepcontrol.wait; a template parameter so that the plain instantiations keep the registers
/// of a kernel without the second path (a runtime flag cost up to 18 registers: 2-5% at large B).
/// d_v == kDk.
template <typename Ts, bool kKda, int kDk, int kR, int kWarps, int kT, bool kOverlap>
__global__ void __launch_bounds__(32 * kWarps)
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
    if (tid == 0 && b == 0 && blockIdx.x < kProbeBlocks && slot >= 0)
      g_probe[slot % kProbeSteps][blockIdx.x][0] = t0;  // (stored once the slot id is back)
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
  // chain after the inputs).
  constexpr int kGateItems = kKda ? (kT * kHeads * kDk + kThreads - 1) / kThreads : 1;
  float gate_in[kGateItems], gate_bias[kGateItems], gate_A[kGateItems], beta_x = 0.0f;
  int64_t gate_at[kGateItems];  // element of a, -1 = none
#pragma unroll
  for (int n = 0; n < kGateItems; ++n) {
    gate_in[n] = gate_bias[n] = gate_A[n] = 0.0f;
    gate_at[n] = -1;
    if constexpr (kKda) {
      const int i = tid + n * kThreads;
      if (i < T * kHeads * kDk) {
        const int t = i / (kHeads * kDk), h = (i / kDk) % kHeads, c = i % kDk;
        const int hv = hv0 + h;
        gate_at[n] = ((int64_t(b) * T + t) * p.HV + hv) * kDk + c;
        if constexpr (kOverlap) {
          gate_bias[n] = p.dt_bias[hv * kDk + c];
        } else {  // the bias folded in at once (gate_bias stays 0)
          gate_in[n] = load_any(p.a, p.a_bf16, gate_at[n]) + p.dt_bias[hv * kDk + c];
        }
        gate_A[n] = expf(p.A_log[hv]);
      }
    } else if (unsigned(gate_tid) < unsigned(T * kHeads)) {
      const int hv = hv0 + gate_tid % kHeads;
      gate_at[n] = (int64_t(b) * T + gate_tid / kHeads) * p.HV + hv;
      if constexpr (kOverlap) {
        gate_bias[n] = p.dt_bias[hv];
      } else {
        gate_in[n] = load_any(p.a, p.a_bf16, gate_at[n]) + p.dt_bias[hv];
      }
      gate_A[n] = expf(p.A_log[hv]);
    }
  }
  auto load_beta = [&] {
    if (unsigned(beta_tid) < unsigned(T * kHeads))
      beta_x = load_any(p.b, p.b_bf16,
                        (int64_t(b) * T + beta_tid / kHeads) * p.HV + hv0 + beta_tid % kHeads);
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
      if (gate_at[n] >= 0) gate_in[n] = load_any(p.a, p.a_bf16, gate_at[n]);
    load_beta();
  };
  if (slot < 0 || slot >= p.num_slots) return;  // padding: the whole cluster returns (same b)

  // 1. The first kStages row groups' loads (overlapped: also the conv windows, then the wait).
  Ts* const rows_ptr =
      static_cast<Ts*>(p.state) + (int64_t(slot) * p.HV * kDk + warp_rows) * kDk + lane * kPerLane;
  float buf[kStages][kGroup][kPerLane];
#pragma unroll
  for (int s = 0; s < kStages; ++s)
#pragma unroll
    for (int u = 0; u < kGroup; ++u)
      RowFragment<Ts, kPerLane>::load(rows_ptr + (s * kGroup + u) * kDk, buf[s][u]);
  if constexpr (kOverlap) {  // the windows too, then wait (plain: each window just before use)
#pragma unroll
    for (int i = 0; i < kQkPerThread; ++i)
      if (tid + i * kThreads < 2 * kDk)
        load_conv_window(p, slot, qk_channel(tid + i * kThreads), qk_in[i]);
#pragma unroll
    for (int i = 0; i < kVPerThread; ++i)
      if (v_ok(i)) load_conv_window(p, slot, v_channel(v_item(i)), v_in[i]);
    asm volatile("griddepcontrol.wait;" ::: "memory");  // the kernel before has finished
    trigger_dependents(p, 1);
    HYLA_PROBE(slot, 2);
    load_inputs();
  }

  // 2. The key head's 2 d_k q/k channels (every block of the cluster computes all of them; their
  // windows are advanced by rank 0 once every block has read them, or at once without a cluster)
  // and this block's v channels (its alone: advanced at once). Every window is loaded before the
  // first window store.
  float qk_next[kQkPerThread][kMaxK - 1], v_next[kVPerThread][kMaxK - 1];
#pragma unroll
  for (int i = 0; i < kQkPerThread; ++i) {
    const int c = tid + i * kThreads;
    if (c < 2 * kDk) {
      float y[kT];
      if constexpr (!kOverlap) load_conv_window(p, slot, qk_channel(c), qk_in[i]);
      conv_apply(p, T, qk_in[i], y, qk_next[i]);
#pragma unroll
      for (int t = 0; t < kT; ++t)
        if (t < T) s_qk[t][c] = y[t];
    }
  }
#pragma unroll
  for (int i = 0; i < kVPerThread; ++i) {
    const int r = v_item(i);
    if (v_ok(i)) {
      float y[kT];
      if constexpr (!kOverlap) load_conv_window(p, slot, v_channel(r), v_in[i]);
      conv_apply(p, T, v_in[i], y, v_next[i]);
#pragma unroll
      for (int t = 0; t < kT; ++t)
        if (t < T) s_v[t][r] = y[t];
    }
  }
  if (p.commit) {
#pragma unroll
    for (int i = 0; i < kVPerThread; ++i)
      if (v_ok(i)) store_window(p, slot, v_channel(v_item(i)), v_next[i]);
    if (p.cluster == 1) {
#pragma unroll
      for (int i = 0; i < kQkPerThread; ++i)
        if (tid + i * kThreads < 2 * kDk)
          store_window(p, slot, qk_channel(tid + i * kThreads), qk_next[i]);
    }
  }
  // Every q/k window this block reads has been read: rank 0 may overwrite them after the wait.
  // Relaxed (no release fence: with it, ptxas emits MEMBAR.ALL.GPU, which waits for the state
  // loads in flight): the reads are complete already, since every window value has gone into a
  // conv output stored to shared memory above, which no instruction can do before its load returns.
  if (p.cluster > 1) asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");

    // 3. Gates (fp32) of the block's value heads: GDN one decay per token, KDA one per key channel;
    // beta = sigmoid(b).
#pragma unroll
  for (int n = 0; n < kGateItems; ++n) {
    if constexpr (kKda) {
      const int i = tid + n * kThreads;
      if (i < T * kHeads * kDk) {
        const float a_scale = gate_A[n], x = gate_in[n] + gate_bias[n];
        const float g = p.safe_gate ? p.lower_bound * sigmoid(a_scale * x) : -a_scale * softplus(x);
        s_decay[i / (kHeads * kDk)][(i / kDk) % kHeads][i % kDk] = expf(g);
      }
    } else if (unsigned(gate_tid) < unsigned(T * kHeads)) {
      s_gdn_decay[gate_tid / kHeads][gate_tid % kHeads] =
          expf(-gate_A[n] * softplus(gate_in[n] + gate_bias[n]));
    }
  }
  if (unsigned(beta_tid) < unsigned(T * kHeads))
    s_beta[beta_tid / kHeads][beta_tid % kHeads] = sigmoid(beta_x);
  HYLA_PROBE(slot, 3);
  __syncthreads();
  HYLA_PROBE(slot, 4);

  HYLA_PROBE(slot, 5);

  // 5. Row groups. The l2 norms are folded in (as in the warp kernel), so that they cost no step
  // of their own: with the raw conv outputs q, k, per token and row
  //   row *= decay;  s = <row, k>;  delta = beta (v - s / |k|) / |k|;  row += delta k;
  //   o = scale <row, q> / |q|,
  // |q|^2 and |k|^2 summed in the same warp reduction as the group's <row, k>.
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
        float dot[kGroup + 2];  // the group's <row, k>, then |q|^2, |k|^2
#pragma unroll
        for (int u = 0; u < kGroup; ++u) {
          dot[u] = 0.0f;
#pragma unroll
          for (int j = 0; j < kPerLane; ++j) {
            row[u][j] *= dd[j];
            dot[u] = fmaf(row[u][j], kk[j], dot[u]);
          }
        }
        dot[kGroup] = dot[kGroup + 1] = 0.0f;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
          dot[kGroup] = fmaf(qq[j], qq[j], dot[kGroup]);
          dot[kGroup + 1] = fmaf(kk[j], kk[j], dot[kGroup + 1]);
        }
        warp_sum_n(dot);
        const float rq = rsqrtf(dot[kGroup] + kL2NormEps) * p.scale;
        const float rk = rsqrtf(dot[kGroup + 1] + kL2NormEps);
        const float beta = s_beta[t][warp_head];
        float out[kGroup];
#pragma unroll
        for (int u = 0; u < kGroup; ++u) {
          const float step = beta * (s_v[t][warp * kRowsPerWarp + r_warp + u] - dot[u] * rk) * rk;
          out[u] = 0.0f;
#pragma unroll
          for (int j = 0; j < kPerLane; ++j) {
            row[u][j] = fmaf(step, kk[j], row[u][j]);
            out[u] = fmaf(row[u][j], qq[j], out[u]);
          }
        }
        warp_sum_n(out);
        // Lane u writes row u's output: the group's outputs are contiguous.
        float mine = out[0];
#pragma unroll
        for (int u = 1; u < kGroup; ++u)
          if (lane == u) mine = out[u];
        const int64_t bt = int64_t(b) * T + t;
        if (lane < kGroup)
          store_any(p.o, p.o_bf16, bt * p.HV * kDk + warp_rows + r_warp + lane, mine * rq);
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
  // 6. Cluster: once every block has read the q/k windows, rank 0 advances them.
  if (p.cluster > 1) {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
    if (p.commit && rank == 0) {
#pragma unroll
      for (int i = 0; i < kQkPerThread; ++i)
        if (tid + i * kThreads < 2 * kDk)
          store_window(p, slot, qk_channel(tid + i * kThreads), qk_next[i]);
    }
  }
  HYLA_PROBE(slot, 7);
}

/// After a verify call: advances each sequence's conv window by accepted[b] tokens: the new K-1
/// entries are the last K-1 of [old window | the first n new inputs]. One thread per channel reads
/// everything it needs before writing, so the update is in place and race-free.
__global__ void conv_advance_kernel(const void* qkv, bool qkv_bf16, void* conv_state,
                                    bool conv_bf16, const int32_t* slots, const int32_t* accepted,
                                    int64_t num_slots, int64_t conv_dim, int T, int K) {
  const int b = blockIdx.y;
  const int64_t ch = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= conv_dim) return;
  const int slot = slots[b];
  if (slot < 0 || slot >= num_slots) return;
  const int n = accepted[b];
  if (n <= 0 || n > T) return;
  advance_window(qkv, qkv_bf16, conv_state, conv_bf16, b, slot, conv_dim, ch, n, T, K);
}

/// state_pool[slot] = step_states[b, accepted[b] - 1], 16 bytes per thread.
__global__ void commit_state_kernel(const uint4* step_states, uint4* state_pool,
                                    const int32_t* slots, const int32_t* accepted,
                                    int64_t num_slots, int T, int64_t head_vectors) {
  const int b = blockIdx.y;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= head_vectors) return;
  const int slot = slots[b];
  const int n = accepted[b];
  if (slot < 0 || slot >= num_slots || n <= 0 || n > T) return;
  state_pool[int64_t(slot) * head_vectors + i] =
      step_states[(int64_t(b) * T + (n - 1)) * head_vectors + i];
}

/// o = weight * rmsnorm(o) * act(gate), one warp per (token, head) row of d_v, skipping padding.
__global__ void gated_norm_kernel(void* o, bool o_bf16, const void* gate, bool gate_bf16,
                                  const float* weight, const int32_t* slots, int64_t num_slots,
                                  int64_t rows, int rows_per_seq, int d_v, float eps,
                                  bool silu_act) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int slot = slots[row / rows_per_seq];
  if (slot < 0 || slot >= num_slots) return;
  float ss = 0.0f;
  for (int i = lane; i < d_v; i += 32) {
    const float x = load_any(o, o_bf16, row * d_v + i);
    ss = fmaf(x, x, ss);
  }
  const float inv = rsqrtf(warp_sum(ss) / float(d_v) + eps);
  for (int i = lane; i < d_v; i += 32) {
    const float x = load_any(o, o_bf16, row * d_v + i);
    const float g = load_any(gate, gate_bf16, row * d_v + i);
    store_any(o, o_bf16, row * d_v + i, weight[i] * x * inv * (silu_act ? silu(g) : sigmoid(g)));
  }
}

/// The tilings compiled: {rows per block, warps per block}, smallest blocks first, then fewer
/// warps; {32, 8, bulk} is decode_bulk_kernel (T = 1 only, no cluster); then the warp kernel's
/// (T = 1 only; gated_delta_rule_decode_warp.cu). (Capping registers so
/// that 32 warps fit per SM at large batch spills 84-180 bytes per thread at d_k = 128; holding
/// all 4 row groups of a 16-row warp in flight measured 1-15% slower than 2 at every batch: not
/// compiled.)
constexpr DecodeKernel kWarpKernel = DecodeKernel::kWarp;
constexpr DecodeTiling kTilings[] = {{8, 4},
                                     {8, 8},
                                     {16, 4},
                                     {16, 8},
                                     {16, 16},
                                     {32, 4},
                                     {32, 8},
                                     {64, 4},
                                     {128, 4},
                                     {256, 4},
                                     {256, 8},
                                     {kBulkRows, kBulkWarps, DecodeKernel::kBulk},
                                     {8, 2, kWarpKernel},
                                     {16, 2, kWarpKernel},
                                     {16, 4, kWarpKernel},
                                     {16, 8, kWarpKernel},
                                     {32, 4, kWarpKernel},
                                     {32, 8, kWarpKernel},
                                     {64, 8, kWarpKernel},
                                     {128, 16, kWarpKernel}};

template <typename Ts, bool kKda, int kDk, int kR, int kWarps, int kT, bool kOverlap>
Status launch_block_kernel(const StepArgs& args, int B, cudaStream_t stream) {
  auto* kernel = decode_step_kernel<Ts, kKda, kDk, kR, kWarps, kT, kOverlap>;
  if (args.cluster > 8) {  // beyond the portable cluster size: opt in once per instantiation
    static std::once_flag once;
    static cudaError_t set = cudaSuccess;
    std::call_once(once, [&] {
      set = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    });
    HYLA_CUDA_CHECK(set);
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(args.H * args.cluster), unsigned(B));
  config.blockDim = dim3(unsigned(32 * kWarps));
  config.stream = stream;
  cudaLaunchAttribute attrs[2]{};
  unsigned n = 0;
  if (args.cluster > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = unsigned(args.cluster);
    attrs[n].val.clusterDim.y = 1;
    attrs[n].val.clusterDim.z = 1;
    ++n;
  }
  if (kOverlap) {  // a programmatic dependent of the kernel before it on the stream
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  config.attrs = attrs;
  config.numAttrs = n;
  HYLA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args));
  return ok_status();
}

/// Overlapped instantiations exist for decode (T = 1) tilings of up to 64 rows, the ones the
/// entry picks with overlap_previous; the others run in stream order with the flag set.
template <typename Ts, bool kKda, int kDk, int kR, int kWarps, int kT>
Status launch_tiled(const StepArgs& args, int B, cudaStream_t stream) {
  if constexpr (kT == 1 && kR <= kOverlapMaxRows)  // decode_tiling_overlaps
    if (args.overlap)
      return launch_block_kernel<Ts, kKda, kDk, kR, kWarps, kT, true>(args, B, stream);
  return launch_block_kernel<Ts, kKda, kDk, kR, kWarps, kT, false>(args, B, stream);
}

template <typename Ts, bool kKda, int kDk, int kT>
Status launch_rows(const StepArgs& args, int B, DecodeTiling t, cudaStream_t stream) {
  if (t.kernel == DecodeKernel::kBulk) return launch_bulk<Ts, kKda, kDk>(args, B, stream);
  if (t.kernel == DecodeKernel::kWarp)
    return launch_warp<Ts, kKda>(args, kDk, B, t.rows_per_block, t.warps, stream);
  const int key = t.rows_per_block * 100 + t.warps;
  switch (key) {
    case 804: return launch_tiled<Ts, kKda, kDk, 8, 4, kT>(args, B, stream);
    case 808: return launch_tiled<Ts, kKda, kDk, 8, 8, kT>(args, B, stream);
    case 1604: return launch_tiled<Ts, kKda, kDk, 16, 4, kT>(args, B, stream);
    case 1608: return launch_tiled<Ts, kKda, kDk, 16, 8, kT>(args, B, stream);
    case 1616: return launch_tiled<Ts, kKda, kDk, 16, 16, kT>(args, B, stream);
    case 3204: return launch_tiled<Ts, kKda, kDk, 32, 4, kT>(args, B, stream);
    case 3208: return launch_tiled<Ts, kKda, kDk, 32, 8, kT>(args, B, stream);
    case 6404: return launch_tiled<Ts, kKda, kDk, 64, 4, kT>(args, B, stream);
    case 12804: return launch_tiled<Ts, kKda, kDk, 128, 4, kT>(args, B, stream);
    case 25604: return launch_tiled<Ts, kKda, kDk, 256, 4, kT>(args, B, stream);
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

/// The warp kernel reads qkv, the conv weights and windows, the KDA gate inputs and dt_bias and
/// the state rows by vector loads of up to 16 bytes at offsets that are multiples of the vector.
bool warp_kernel_aligned(const GatedDeltaRuleDecodeParams& p) {
  auto aligned = [](const TensorView& t) {
    return !t.defined() || reinterpret_cast<uintptr_t>(t.raw()) % 16 == 0;
  };
  return aligned(p.qkv) && aligned(p.conv_weight) && aligned(p.conv_state) && aligned(p.a) &&
         aligned(p.dt_bias) && aligned(p.state_pool) && aligned(p.step_states);
}

/// StepArgs::trigger of an overlapped step of `units` (sequence, key head) units. Measured on the
/// H200 (docs/perf.md 2026-11-30, every tiling with --overlap at B = 1 and 8): below 128 units
/// after the block's own griddepcontrol.wait (B=1, 32 rows / 8 warps: GDN 3.99 -> 3.20 us, KDA
/// 4.34 -> 3.20; letting the next step launch at once lets it queue its state loads ahead of this
/// step's input loads), else at the start (B=8: GDN 11.53 against 11.57, KDA 11.84 against
/// 12.22). Triggering only at exit: 4.9-5.4 us at B=1. HYLA_DECODE_TRIGGER=start|wait|exit
/// overrides it (a diagnostic).
int decode_trigger(int64_t units) {
  static const int forced = [] {
    const char* env = std::getenv("HYLA_DECODE_TRIGGER");
    if (env == nullptr) return -1;
    const std::string v = env;
    return v == "start" ? 0 : v == "wait" ? 1 : v == "exit" ? 2 : -1;
  }();
  if (forced >= 0) return forced;
  return units < 128 ? 1 : 0;
}

}  // namespace

std::vector<DecodeTiling> decode_tilings() {
  return std::vector<DecodeTiling>(std::begin(kTilings), std::end(kTilings));
}

std::string decode_tiling_name(DecodeTiling tiling, int64_t group, int64_t d_v) {
  const int cluster = decode_cluster_size(tiling, group, d_v);
  switch (tiling.kernel) {
    case DecodeKernel::kBulk: return str_cat("bulk", tiling.rows_per_block, "w", tiling.warps);
    case DecodeKernel::kWarp:
      return str_cat("W", tiling.rows_per_block, "w", tiling.warps, "c", cluster);
    case DecodeKernel::kBlock: break;
  }
  return str_cat("R", tiling.rows_per_block, "w", tiling.warps, "c", cluster);
}

int decode_cluster_size(DecodeTiling tiling, int64_t group, int64_t d_v) {
  const int64_t rows = group * d_v, r = tiling.rows_per_block;
  if (tiling.kernel == DecodeKernel::kWarp) {  // a warp's rows inside one value head
    if (d_v != 64 && d_v != 128) return 0;
    if (r <= 0 || tiling.warps <= 0 || r % tiling.warps != 0 || rows % r != 0) return 0;
    if (d_v % (r / tiling.warps) != 0 || rows / r > 16) return 0;
    return int(rows / r);
  }
  if (tiling.bulk())  // whole key heads, no cluster
    return r == kBulkRows && tiling.warps == kBulkWarps && group <= kBulkMaxGroup &&
                   d_v % kBulkRows == 0
               ? 1
               : 0;
  if (r <= 0 || rows % r != 0) return 0;
  if (r > d_v && r % d_v != 0) return 0;
  const int64_t cluster = rows / r;
  if (cluster > 16) return 0;
  return int(cluster);
}

DecodeTiling default_decode_tiling(int64_t B, int64_t H, int64_t group, int64_t d_v, int64_t T,
                                   bool overlap, bool warp_kernel_ok) {
  const int64_t units = B * H;
  // Overlapped steps (overlap_previous; docs/perf.md 2026-11-30, every tiling with --overlap, the
  // dependent launched after the wait below 128 units: decode_trigger):
  //  - below 128 units: the block kernel, 32 rows / 8 warps (B=1: GDN 3.20 us, KDA 3.20; the
  //    warp kernel's best GDN 3.33, KDA 3.20; 16 rows / 4 warps 3.67 / 3.86);
  //  - 128 to 256 units (measured at B=8): 64 rows, 4 warps (GDN 11.53 us, KDA 11.84; bulk, which
  //    does not overlap, 14.4 / 14.0; the best warp tiling 14.3 / 14.3);
  //  - above: as without overlap (B >= 64: no gain measured).
  if (overlap && T == 1) {
    for (const DecodeTiling t : kTilings) {
      const int cluster = decode_cluster_size(t, group, d_v);
      if (cluster == 0 || t.kernel != DecodeKernel::kBlock) continue;
      if (units < 128 && t.rows_per_block == 32 && t.warps == 8) return t;
      if (units >= 128 && units <= 256 && t.rows_per_block == 64 && t.warps == 4) return t;
    }
  }
  // Without overlap, below 128 units and T = 1: the warp kernel, 16 rows per block, 4 warps of 4
  // rows when the key head takes a cluster of 16, else 2 warps of 8 (B=1: GDN 4.71 us against the
  // block kernel's best 5.03, KDA 4.87 against 5.07; docs/perf.md 2026-11-30).
  if (!overlap && T == 1 && units < 128 && warp_kernel_ok) {
    for (const DecodeTiling t : kTilings) {
      const int cluster = decode_cluster_size(t, group, d_v);
      if (cluster == 0 || t.kernel != DecodeKernel::kWarp || t.rows_per_block != 16) continue;
      if (t.warps == (cluster == 16 ? 4 : 2)) return t;
    }
  }
  // Measured on the H200 (docs/perf.md, sweeps of every tiling, GDN H16/HV32 and KDA H32):
  //  - below 128 (sequence, key head) units, when the warp kernel cannot run (or T > 1): 8 warps,
  //  the key head cut into a cluster of (up to) 8
  //    blocks (B=1: GDN 32 rows 5.50 us, KDA 16 rows 5.43 us; 4 warps 6.0-6.3, 16 warps 9.3);
  //  - 128 to 1023 units: the bulk-copy kernel (B=8: GDN 14.24 us, KDA 13.96 us; next best
  //    14.33 / 14.48), which takes T = 1 only (verify: as from 1024 units);
  //  - from 1024 units: whole key heads per block (no cluster), the most warps (B=64: KDA 81.3 us
  //    against bulk 83.3; GDN ties; B >= 256 wins by 1-3%).
  if (units >= 128 && units < 1024 && T == 1) {
    const DecodeTiling bulk{kBulkRows, kBulkWarps, DecodeKernel::kBulk};
    if (decode_cluster_size(bulk, group, d_v) == 1) return bulk;
  }
  DecodeTiling best{};
  int best_cluster = 0;
  for (const DecodeTiling t : kTilings) {  // smallest blocks first, then more warps
    const int cluster = decode_cluster_size(t, group, d_v);
    if (cluster == 0 || t.kernel != DecodeKernel::kBlock) continue;
    if (units < 128) {  // 8 warps, the largest cluster up to 8
      if (t.warps == 8 && cluster <= 8 && cluster > best_cluster) best = t, best_cluster = cluster;
    } else if (cluster == 1) {
      best = t;
    }
  }
  if (best.rows_per_block == 0)  // no such tiling: the largest blocks
    for (const DecodeTiling t : kTilings)
      if (t.kernel == DecodeKernel::kBlock && decode_cluster_size(t, group, d_v) > 0) best = t;
  return best;
}

Status gated_delta_rule_decode_tiled(const GatedDeltaRuleDecodeParams& p, DecodeTiling tiling,
                                     Stream stream_handle) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_handle.handle);
  const DecodeShape s = decode_shape(p);
  const int T = int(s.T), B = int(s.B), HV = int(s.HV), d_v = int(s.d_v), d_k = int(s.d_k),
            H = int(s.H);
  const int64_t conv_dim = s.conv_dim;
  const bool kda = s.kda;
  if (d_v != d_k)
    return unsupported("gated_delta_rule_decode (CUDA): d_v = ", d_v, " != d_k = ", d_k);
  if (p.conv_weight.size(1) > kMaxK)
    return unsupported("gated_delta_rule_decode (CUDA): conv kernel of ", p.conv_weight.size(1),
                       " taps, at most ", kMaxK);
  const int cluster = decode_cluster_size(tiling, HV / H, d_v);
  if (cluster == 0)
    return unsupported("gated_delta_rule_decode (CUDA): ", tiling.rows_per_block,
                       " rows per block do not tile ", HV / H, " value heads of ", d_v, " rows");
  if (tiling.kernel == DecodeKernel::kBlock && tiling.warps != 4 && tiling.warps != 8 &&
      tiling.warps != 16)
    return unsupported("gated_delta_rule_decode (CUDA): ", tiling.warps, " warps per block");
  if (tiling.kernel == DecodeKernel::kWarp) {
    if (T != 1)
      return unsupported("gated_delta_rule_decode (CUDA): the warp kernel takes one token, not ",
                         T);
    if (p.conv_weight.size(1) != 4)
      return unsupported(
          "gated_delta_rule_decode (CUDA): the warp kernel takes a conv of 4 taps, not ",
          p.conv_weight.size(1));
    if (!warp_kernel_aligned(p))
      return unsupported(
          "gated_delta_rule_decode (CUDA): the warp kernel needs 16-byte aligned "
          "qkv, conv weight, conv state, gate inputs, dt_bias, state pool and step "
          "states");
  }
  if (B == 0) return ok_status();

  StepArgs args{};
  args.qkv = p.qkv.raw();
  args.qkv_bf16 = p.qkv.dtype() == DType::kBF16;
  args.conv_w = p.conv_weight.data<float>();
  args.conv_state = p.conv_state.raw();
  args.conv_bf16 = p.conv_state.dtype() == DType::kBF16;
  args.a = p.a.raw();
  args.a_bf16 = p.a.dtype() == DType::kBF16;
  args.b = p.b.raw();
  args.b_bf16 = p.b.dtype() == DType::kBF16;
  args.A_log = p.A_log.data<float>();
  args.dt_bias = p.dt_bias.data<float>();
  args.safe_gate = p.lower_bound.has_value();
  args.lower_bound = p.lower_bound.value_or(0.0f);
  args.state = p.state_pool.raw();
  args.step_states = p.step_states.defined() ? p.step_states.raw() : nullptr;
  args.slots = p.slots.data<int32_t>();
  args.o = p.o.raw();
  args.o_bf16 = p.o.dtype() == DType::kBF16;
  args.num_slots = p.state_pool.size(0);
  args.conv_dim = conv_dim;
  args.T = T;
  args.K = int(p.conv_weight.size(1));
  args.H = H;
  args.HV = HV;
  args.group = HV / H;
  args.cluster = cluster;
  args.scale = p.scale > 0.0f ? p.scale : 1.0f / sqrtf(float(d_k));
  args.commit = p.commit;
  args.overlap = p.overlap_previous;
  args.trigger = decode_trigger(int64_t(B) * H);
  const bool bf16_state = p.state_pool.dtype() == DType::kBF16;
  const DecodeTiling rows = tiling;
  HYLA_RETURN_IF_ERROR(bf16_state
                           ? (kda ? launch_head_dim<uint16_t, true>(args, d_k, B, rows, stream)
                                  : launch_head_dim<uint16_t, false>(args, d_k, B, rows, stream))
                           : (kda ? launch_head_dim<float, true>(args, d_k, B, rows, stream)
                                  : launch_head_dim<float, false>(args, d_k, B, rows, stream)));

  if (p.norm_weight.defined()) {
    const int64_t rows_total = int64_t(B) * T * HV;
    const int warps_per_block = 8;
    gated_norm_kernel<<<unsigned((rows_total + warps_per_block - 1) / warps_per_block),
                        32 * warps_per_block, 0, stream>>>(
        p.o.raw(), args.o_bf16, p.norm_gate.raw(), p.norm_gate.dtype() == DType::kBF16,
        p.norm_weight.data<float>(), args.slots, args.num_slots, rows_total, T * HV, d_v,
        p.norm_eps, p.norm_act == GateActivation::kSilu);
    HYLA_CUDA_CHECK(cudaGetLastError());
  }
  return ok_status();
}

Status gated_delta_rule_decode(const GatedDeltaRuleDecodeParams& p, Stream stream) {
  const DecodeShape s = decode_shape(p);
  const bool warp_ok = s.d_k == s.d_v && p.conv_weight.size(1) == 4 && warp_kernel_aligned(p);
  return gated_delta_rule_decode_tiled(
      p, default_decode_tiling(s.B, s.H, s.HV / s.H, s.d_v, s.T, p.overlap_previous, warp_ok),
      stream);
}

Status gated_delta_rule_commit(const GatedDeltaRuleCommitParams& p, Stream stream_handle) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_handle.handle);
  const int T = int(p.tokens_per_seq);
  const int B = int(p.qkv.size(0) / T);
  if (B == 0) return ok_status();
  const int64_t num_slots = p.state_pool.size(0);
  const int64_t head_bytes = p.state_pool.numel() / num_slots * dtype_size(p.state_pool.dtype());
  if (head_bytes % 16 != 0)
    return unsupported("gated_delta_rule_commit (CUDA): per-slot state of ", head_bytes,
                       " bytes is not a multiple of 16");
  const int64_t vectors = head_bytes / 16;
  const dim3 grid(unsigned((vectors + 255) / 256), unsigned(B));
  commit_state_kernel<<<grid, 256, 0, stream>>>(
      static_cast<const uint4*>(p.step_states.raw()), static_cast<uint4*>(p.state_pool.raw()),
      p.slots.data<int32_t>(), p.accepted.data<int32_t>(), num_slots, T, vectors);
  HYLA_CUDA_CHECK(cudaGetLastError());
  const int64_t conv_dim = p.qkv.size(1);
  const dim3 conv_grid(unsigned((conv_dim + 255) / 256), unsigned(B));
  conv_advance_kernel<<<conv_grid, 256, 0, stream>>>(
      p.qkv.raw(), p.qkv.dtype() == DType::kBF16, p.conv_state.raw(),
      p.conv_state.dtype() == DType::kBF16, p.slots.data<int32_t>(), p.accepted.data<int32_t>(),
      num_slots, conv_dim, T, int(p.conv_state.size(2)) + 1);
  HYLA_CUDA_CHECK(cudaGetLastError());
  return ok_status();
}

#ifdef HYLA_DECODE_PROBE
void decode_probe_dump(int steps, int blocks) {
  static unsigned long long h[kProbeSteps][kProbeBlocks][kProbePoints];
  HYLA_CUDA_CHECK(cudaDeviceSynchronize());
  HYLA_CUDA_CHECK(cudaMemcpyFromSymbol(h, g_probe, sizeof(h)));
  // Per step: ns from the earliest block start (point 0) of the step to each point, as min /
  // median / max over the blocks; and the step's first start relative to the previous step's.
  const int n = steps < kProbeSteps ? steps : kProbeSteps;
  unsigned long long prev0 = 0, prev_end = 0;
  for (int st = 0; st < n; ++st) {
    unsigned long long t0 = ~0ull, end = 0;
    for (int bl = 0; bl < blocks && bl < kProbeBlocks; ++bl) {
      if (h[st][bl][0] < t0) t0 = h[st][bl][0];
      if (h[st][bl][7] > end) end = h[st][bl][7];
    }
    std::printf(
        "probe step %2d: start +%lld ns after prev start, %lld ns after prev end; span %llu", st,
        prev0 ? (long long)(t0 - prev0) : 0LL, prev_end ? (long long)t0 - (long long)prev_end : 0LL,
        end - t0);
    for (int pt = 1; pt < kProbePoints; ++pt) {
      std::vector<long long> v;
      for (int bl = 0; bl < blocks && bl < kProbeBlocks; ++bl)
        if (h[st][bl][pt]) v.push_back((long long)(h[st][bl][pt] - t0));
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      std::printf(" | p%d %lld/%lld/%lld", pt, v.front(), v[v.size() / 2], v.back());
    }
    std::printf("\n");
    prev0 = t0;
    prev_end = end;
  }
  static unsigned long long zero[kProbeSteps][kProbeBlocks][kProbePoints];
  HYLA_CUDA_CHECK(cudaMemcpyToSymbol(g_probe, zero, sizeof(zero)));
}
#endif

}  // namespace hyla::kernels::cuda
