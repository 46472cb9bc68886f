// CUDA body of the fused decode / verify step and the commit (kernels/gated_delta_rule_decode.h).
//
// Decode is bound by the state: per (sequence, value head) d_v x d_k fp32 = 64 KiB read and written
// per token. Unit of work: one (sequence, key head), whose `group` value heads' rows are contiguous
// in the pool. A thread block owns rows_per_block of those rows (tiling: gated_delta_rule_decode_
// tiling.h); the blocks of one key head form a thread-block cluster. Each block:
//   1. issues the loads of its first state rows (registers, 16-byte loads for fp32), so the state
//      bytes are in flight during everything else;
//   2. computes its slice of the key head's 2 d_k q/k conv channels (window + SiLU) and pushes them
//      into every block of the cluster (distributed shared memory), its own rows' v channels and
//      the gates; it advances the windows of exactly those channels in place (commit), since no
//      other block reads them;
//   3. after the cluster barrier, l2-normalises q and k from shared memory and streams its rows:
//      each warp holds a row as 32 lanes x d_k / 32 contiguous elements, runs the T tokens on it
//      (decay, predict = warp sum, write, read = warp sum), stores it back (decode) or stores every
//      step's copy (verify), with up to two more row groups' loads in flight meanwhile.
// Gated RMSNorm, when asked, runs as a second kernel. No host synchronisation: graph-capturable.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>

#include "core/cuda_check.h"
#include "kernels/cuda/gated_delta_rule_decode_tiling.h"
#include "kernels/gated_delta_rule_decode.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cuda {

namespace {

namespace cg = cooperative_groups;

constexpr int kMaxT = int(kMaxDecodeTokens);
constexpr int kMaxK = 4;  // conv taps handled (K in [2, 4]); shorter kernels are zero-padded

/// Everything the step kernel reads and writes; pointers into device memory.
struct StepArgs {
  const void* qkv;  ///< [B T, conv_dim]
  bool qkv_bf16;
  const float* conv_w;  ///< [conv_dim, K]
  void* conv_state;     ///< [slots, conv_dim, K-1]
  bool conv_bf16;
  const void* a;  ///< GDN [B T, HV]; KDA [B T, HV, d_k]
  bool a_bf16;
  const void* b;  ///< [B T, HV]
  bool b_bf16;
  const float* A_log;    ///< [HV]
  const float* dt_bias;  ///< GDN [HV]; KDA [HV, d_k]
  float lower_bound;
  bool safe_gate;
  void* state;        ///< [slots, HV, d_v, d_k] (Ts)
  void* step_states;  ///< [B, T, HV, d_v, d_k] (Ts), verify only
  const int32_t* slots;
  void* o;  ///< [B T, HV, d_v]
  bool o_bf16;
  int64_t num_slots, conv_dim;
  int T, K, H, HV, group, cluster;
  float scale;
  bool commit;
};

__device__ __forceinline__ float bf16_bits_to_float(uint16_t bits) {
  return __uint_as_float(uint32_t(bits) << 16);
}
__device__ __forceinline__ uint16_t float_to_bf16_bits(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
/// Element i of an f32 or bf16 array.
__device__ __forceinline__ float load_any(const void* p, bool is_bf16, int64_t i) {
  return is_bf16 ? bf16_bits_to_float(static_cast<const uint16_t*>(p)[i])
                 : static_cast<const float*>(p)[i];
}
__device__ __forceinline__ void store_any(void* p, bool is_bf16, int64_t i, float x) {
  if (is_bf16) {
    static_cast<uint16_t*>(p)[i] = float_to_bf16_bits(x);
  } else {
    static_cast<float*>(p)[i] = x;
  }
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

/// kN consecutive state elements as fp32 registers (16-byte loads for 4 x fp32, 8 for 4 x bf16).
template <typename Ts, int kN>
struct RowFragment;
template <>
struct RowFragment<float, 4> {
  static __device__ __forceinline__ void load(const float* p, float (&x)[4]) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  }
  static __device__ __forceinline__ void store(float* p, const float (&x)[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(x[0], x[1], x[2], x[3]);
  }
};
template <>
struct RowFragment<float, 2> {
  static __device__ __forceinline__ void load(const float* p, float (&x)[2]) {
    const float2 v = *reinterpret_cast<const float2*>(p);
    x[0] = v.x, x[1] = v.y;
  }
  static __device__ __forceinline__ void store(float* p, const float (&x)[2]) {
    *reinterpret_cast<float2*>(p) = make_float2(x[0], x[1]);
  }
};
template <>
struct RowFragment<uint16_t, 4> {
  static __device__ __forceinline__ void load(const uint16_t* p, float (&x)[4]) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    x[0] = __uint_as_float(v.x << 16), x[1] = __uint_as_float(v.x & 0xffff0000u);
    x[2] = __uint_as_float(v.y << 16), x[3] = __uint_as_float(v.y & 0xffff0000u);
  }
  static __device__ __forceinline__ void store(uint16_t* p, const float (&x)[4]) {
    uint2 v;
    v.x = uint32_t(float_to_bf16_bits(x[0])) | (uint32_t(float_to_bf16_bits(x[1])) << 16);
    v.y = uint32_t(float_to_bf16_bits(x[2])) | (uint32_t(float_to_bf16_bits(x[3])) << 16);
    *reinterpret_cast<uint2*>(p) = v;
  }
};
template <>
struct RowFragment<uint16_t, 2> {
  static __device__ __forceinline__ void load(const uint16_t* p, float (&x)[2]) {
    const uint32_t v = *reinterpret_cast<const uint32_t*>(p);
    x[0] = __uint_as_float(v << 16), x[1] = __uint_as_float(v & 0xffff0000u);
  }
  static __device__ __forceinline__ void store(uint16_t* p, const float (&x)[2]) {
    *reinterpret_cast<uint32_t*>(p) =
        uint32_t(float_to_bf16_bits(x[0])) | (uint32_t(float_to_bf16_bits(x[1])) << 16);
  }
};

/// One conv channel over the T new tokens: y[t] = silu(sum_j w[ch, j] u[t - (K-1) + j]), where u is
/// the channel's window (K-1 oldest-first entries from the pool) followed by the new inputs; next
/// gets the advanced window, the last K-1 entries of [window | new]. Kernels shorter than kMaxK
/// are zero-padded on the old side so every register index is a compile-time constant.
template <int kT>
__device__ __forceinline__ void conv_channel(const StepArgs& p, int b, int T, int slot, int64_t ch,
                                             float (&y)[kT], float (&next)[kMaxK - 1]) {
  constexpr int kLen = kMaxK - 1 + kT;
  float seq[kLen];
  float w[kMaxK];
  const int pad = kMaxK - p.K;
  const int64_t window = (int64_t(slot) * p.conv_dim + ch) * (p.K - 1);
#pragma unroll
  for (int j = 0; j < kMaxK; ++j) w[j] = j >= pad ? p.conv_w[ch * p.K + (j - pad)] : 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxK - 1; ++j)
    seq[j] = j >= pad ? load_any(p.conv_state, p.conv_bf16, window + (j - pad)) : 0.0f;
#pragma unroll
  for (int t = 0; t < kT; ++t)
    seq[kMaxK - 1 + t] =
        t < T ? load_any(p.qkv, p.qkv_bf16, (int64_t(b) * T + t) * p.conv_dim + ch) : 0.0f;
#pragma unroll
  for (int t = 0; t < kT; ++t) {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxK; ++j) acc = fmaf(w[j], seq[t + j], acc);
    y[t] = silu(acc);
  }
  const int first = kMaxK - 1 + T - (p.K - 1);  // real entries: seq[pad, kMaxK - 1 + T)
#pragma unroll
  for (int j = 0; j < kMaxK - 1; ++j) {
    next[j] = 0.0f;
#pragma unroll
    for (int i = 0; i < kLen; ++i)
      if (i == first + j) next[j] = seq[i];
  }
}

/// Writes an advanced window back to the pool.
__device__ __forceinline__ void store_window(const StepArgs& p, int slot, int64_t ch,
                                             const float (&next)[kMaxK - 1]) {
  const int64_t window = (int64_t(slot) * p.conv_dim + ch) * (p.K - 1);
#pragma unroll
  for (int j = 0; j < kMaxK - 1; ++j)
    if (j < p.K - 1) store_any(p.conv_state, p.conv_bf16, window + j, next[j]);
}

/// Sums each of the kN values over the warp; the kN shuffle chains interleave (independent work).
template <int kN>
__device__ __forceinline__ void warp_sum_n(float (&x)[kN]) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
    for (int u = 0; u < kN; ++u) x[u] += __shfl_xor_sync(0xffffffffu, x[u], offset);
  }
}

/// One block: rows [row0, row0 + kR) of key head kh (rows counted over its group value heads) of
/// sequence blockIdx.y, all T tokens, with kWarps warps; block rank r of the key head's cluster
/// of p.cluster blocks, row0 = r kR. kT: the most tokens per sequence this instantiation handles
/// (1 for decode, kMaxT for verify), so the decode path does no work for absent draft tokens.
/// d_v == kDk.
template <typename Ts, bool kKda, int kDk, int kR, int kWarps, int kT>
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
  __shared__ float s_rnorm[kWarps][kT][2];  // per warp: 1 / |q| (times scale), 1 / |k|

  const int b = blockIdx.y;
  const int slot = p.slots[b];
  if (slot < 0 || slot >= p.num_slots) return;  // padding: the whole cluster returns (same b)
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
  auto v_channel = [&](int r) {
    return 2 * int64_t(p.H) * kDk + int64_t(kh) * p.group * kDk + row0 + r;
  };

  // 1. The first kStages row groups' loads, before anything else.
  Ts* const rows_ptr =
      static_cast<Ts*>(p.state) + (int64_t(slot) * p.HV * kDk + warp_rows) * kDk + lane * kPerLane;
  float buf[kStages][kGroup][kPerLane];
#pragma unroll
  for (int s = 0; s < kStages; ++s)
#pragma unroll
    for (int u = 0; u < kGroup; ++u)
      RowFragment<Ts, kPerLane>::load(rows_ptr + (s * kGroup + u) * kDk, buf[s][u]);

  // 2. The key head's 2 d_k q/k channels (every block of the cluster computes all of them; their
  // windows are advanced by rank 0 once every block has read them, or at once without a cluster)
  // and this block's v channels (its alone: advanced at once).
  float qk_next[kQkPerThread][kMaxK - 1];
#pragma unroll
  for (int i = 0; i < kQkPerThread; ++i) {
    const int c = tid + i * kThreads;
    if (c < 2 * kDk) {
      float y[kT];
      conv_channel(p, b, T, slot, qk_channel(c), y, qk_next[i]);
#pragma unroll
      for (int t = 0; t < kT; ++t)
        if (t < T) s_qk[t][c] = y[t];
      if (p.commit && p.cluster == 1) store_window(p, slot, qk_channel(c), qk_next[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kVPerThread; ++i) {
    const int r = tid + i * kThreads;
    if (r < kR) {
      float y[kT], next[kMaxK - 1];
      conv_channel(p, b, T, slot, v_channel(r), y, next);
#pragma unroll
      for (int t = 0; t < kT; ++t)
        if (t < T) s_v[t][r] = y[t];
      if (p.commit) store_window(p, slot, v_channel(r), next);
    }
  }
  // Every q/k window this block reads has been read: rank 0 may overwrite them after the wait.
  // Relaxed (no release fence: with it, ptxas emits MEMBAR.ALL.GPU, which waits for the state
  // loads in flight): the reads are complete already, since every window value has gone into a
  // conv output stored to shared memory above, which no instruction can do before its load returns.
  if (p.cluster > 1) asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");

  // 3. Gates (fp32) of the block's value heads: GDN one decay per token, KDA one per key channel;
  // beta = sigmoid(b).
  if constexpr (kKda) {
    for (int i = tid; i < T * kHeads * kDk; i += kThreads) {
      const int t = i / (kHeads * kDk), h = (i / kDk) % kHeads, c = i % kDk;
      const int hv = hv0 + h;
      const float f = load_any(p.a, p.a_bf16, ((int64_t(b) * T + t) * p.HV + hv) * kDk + c) +
                      p.dt_bias[hv * kDk + c];
      const float a_scale = expf(p.A_log[hv]);
      const float g = p.safe_gate ? p.lower_bound * sigmoid(a_scale * f) : -a_scale * softplus(f);
      s_decay[t][h][c] = expf(g);
    }
  }
  if (tid < T * kHeads) {
    const int t = tid / kHeads, hv = hv0 + tid % kHeads;
    const int64_t i = (int64_t(b) * T + t) * p.HV + hv;
    if constexpr (!kKda) {
      const float x = load_any(p.a, p.a_bf16, i) + p.dt_bias[hv];
      s_gdn_decay[t][tid % kHeads] = expf(-expf(p.A_log[hv]) * softplus(x));
    }
    s_beta[t][tid % kHeads] = sigmoid(load_any(p.b, p.b_bf16, i));
  }
  __syncthreads();

  // 5a. l2 norms, each warp for itself: 1 / |q| (times scale) and 1 / |k| per token.
  for (int t = 0; t < T; ++t) {
    float ss[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const float q = s_qk[t][lane * kPerLane + j], k = s_qk[t][kDk + lane * kPerLane + j];
      ss[0] = fmaf(q, q, ss[0]);
      ss[1] = fmaf(k, k, ss[1]);
    }
    warp_sum_n(ss);
    if (lane == 0) {
      s_rnorm[warp][t][0] = rsqrtf(ss[0] + kL2NormEps) * p.scale;
      s_rnorm[warp][t][1] = rsqrtf(ss[1] + kL2NormEps);
    }
  }
  __syncwarp();

  // 5b. Row groups. Per token, per row: row *= decay;  v_hat = <row, k>;  delta = beta (v - v_hat);
  // row += delta k;  o = <row, q>. The group's reductions run side by side.
  static_assert(kGroups % kStages == 0);
  for (int g0 = 0; g0 < kGroups; g0 += kStages) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      const int gi = g0 + s;
      float(&row)[kGroup][kPerLane] = buf[s];
      const int r_warp = gi * kGroup;  // first row of the group within the warp
      for (int t = 0; t < T; ++t) {
        float kk[kPerLane], qq[kPerLane], dd[kPerLane];
        const float rq = s_rnorm[warp][t][0], rk = s_rnorm[warp][t][1];
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
          qq[j] = s_qk[t][lane * kPerLane + j] * rq;
          kk[j] = s_qk[t][kDk + lane * kPerLane + j] * rk;
          dd[j] = kKda ? s_decay[t][warp_head][lane * kPerLane + j] : s_gdn_decay[t][warp_head];
        }
        float dot[kGroup];
#pragma unroll
        for (int u = 0; u < kGroup; ++u) {
          dot[u] = 0.0f;
#pragma unroll
          for (int j = 0; j < kPerLane; ++j) {
            row[u][j] *= dd[j];
            dot[u] = fmaf(row[u][j], kk[j], dot[u]);
          }
        }
        warp_sum_n(dot);
        const float beta = s_beta[t][warp_head];
#pragma unroll
        for (int u = 0; u < kGroup; ++u) {
          const float delta = beta * (s_v[t][warp * kRowsPerWarp + r_warp + u] - dot[u]);
          dot[u] = 0.0f;
#pragma unroll
          for (int j = 0; j < kPerLane; ++j) {
            row[u][j] = fmaf(delta, kk[j], row[u][j]);
            dot[u] = fmaf(row[u][j], qq[j], dot[u]);
          }
        }
        warp_sum_n(dot);
        // Lane u writes row u's output: the group's outputs are contiguous.
        float mine = dot[0];
#pragma unroll
        for (int u = 1; u < kGroup; ++u)
          if (lane == u) mine = dot[u];
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
}

/// Decode (T = 1) by independent warps: one block = one warp = kWarpRows state rows of one value
/// head, with no barrier at all. Lane l owns key channels [l kPerLane, (l + 1) kPerLane): it
/// computes the conv of exactly the q and k channels it multiplies, so the l2 norms are warp sums
/// and q, k never leave registers; lanes 0..7 compute the rows' v channels (broadcast by shuffles)
/// and advance their windows (this warp alone reads them); the gates come from registers. The q/k
/// windows are read by every warp of the key head: the programmatic dependent kernel
/// conv_qk_advance_kernel advances them once every block has signalled (launch_dependents) that
/// its reads are done. commit = false (verify with one token): the state goes to step_states and
/// no window is touched.
constexpr int kWarpRows = 8;

template <typename Ts, bool kKda, int kDk>
__global__ void __launch_bounds__(32) decode_warp_kernel(const __grid_constant__ StepArgs p) {
  constexpr int kPerLane = kDk / 32;
  constexpr int kGroup = 4, kGroups = kWarpRows / kGroup;
  const int b = blockIdx.y;
  const int lane = threadIdx.x;
  const int blocks_per_key_head = p.group * kDk / kWarpRows;
  const int kh = blockIdx.x / blocks_per_key_head;
  const int row0 = (blockIdx.x % blocks_per_key_head) * kWarpRows;  // within the key head
  const int hv = kh * p.group + row0 / kDk;
  const int slot = p.slots[b];
  if (slot < 0 || slot >= p.num_slots) return;              // an exited block counts as signalled
  const int64_t rows = int64_t(kh) * p.group * kDk + row0;  // row offset in [HV d_v]

  Ts* const rows_ptr =
      static_cast<Ts*>(p.state) + (int64_t(slot) * p.HV * kDk + rows) * kDk + lane * kPerLane;
  float row[kGroups][kGroup][kPerLane];
#pragma unroll
  for (int g = 0; g < kGroups; ++g)
#pragma unroll
    for (int u = 0; u < kGroup; ++u)
      RowFragment<Ts, kPerLane>::load(rows_ptr + (g * kGroup + u) * kDk, row[g][u]);

  // Gates: GDN one decay and beta per value head (every lane computes them), KDA a decay per key
  // channel (each lane its own).
  const float a_scale = expf(p.A_log[hv]);
  const float beta = sigmoid(load_any(p.b, p.b_bf16, int64_t(b) * p.HV + hv));
  float dd[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    if constexpr (kKda) {
      const int c = lane * kPerLane + j;
      const float f =
          load_any(p.a, p.a_bf16, (int64_t(b) * p.HV + hv) * kDk + c) + p.dt_bias[hv * kDk + c];
      dd[j] = expf(p.safe_gate ? p.lower_bound * sigmoid(a_scale * f) : -a_scale * softplus(f));
    } else {
      const float x = load_any(p.a, p.a_bf16, int64_t(b) * p.HV + hv) + p.dt_bias[hv];
      dd[j] = expf(-a_scale * softplus(x));
    }
  }

  // q, k: this lane's channels; v: lane r < kWarpRows computes row r's channel.
  float qq[kPerLane], kk[kPerLane], ss[2] = {0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int c = lane * kPerLane + j;
    float y[1], next[kMaxK - 1];
    conv_channel(p, b, 1, slot, int64_t(kh) * kDk + c, y, next);
    qq[j] = y[0];
    conv_channel(p, b, 1, slot, int64_t(p.H) * kDk + int64_t(kh) * kDk + c, y, next);
    kk[j] = y[0];
    ss[0] = fmaf(qq[j], qq[j], ss[0]);
    ss[1] = fmaf(kk[j], kk[j], ss[1]);
  }
  float v_mine = 0.0f;
  if (lane < kWarpRows) {
    const int64_t ch = 2 * int64_t(p.H) * kDk + rows + lane;
    float y[1], next[kMaxK - 1];
    conv_channel(p, b, 1, slot, ch, y, next);
    v_mine = y[0];
    if (p.commit) store_window(p, slot, ch, next);
  }
  warp_sum_n(ss);
  // Every q/k window value has gone into ss: this block's window reads are done. (The operand
  // makes the signal wait for them.)
  if (p.commit) asm volatile("griddepcontrol.launch_dependents;" ::"f"(ss[0] + ss[1]) : "memory");
  const float rq = rsqrtf(ss[0] + kL2NormEps) * p.scale, rk = rsqrtf(ss[1] + kL2NormEps);
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) qq[j] *= rq, kk[j] *= rk;

    // Rows: row *= decay;  v_hat = <row, k>;  delta = beta (v - v_hat);  row += delta k;
    // o = <row, q>; the group's reductions side by side.
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    float dot[kGroup];
#pragma unroll
    for (int u = 0; u < kGroup; ++u) {
      dot[u] = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        row[g][u][j] *= dd[j];
        dot[u] = fmaf(row[g][u][j], kk[j], dot[u]);
      }
    }
    warp_sum_n(dot);
#pragma unroll
    for (int u = 0; u < kGroup; ++u) {
      const float v = __shfl_sync(0xffffffffu, v_mine, g * kGroup + u);
      const float delta = beta * (v - dot[u]);
      dot[u] = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        row[g][u][j] = fmaf(delta, kk[j], row[g][u][j]);
        dot[u] = fmaf(row[g][u][j], qq[j], dot[u]);
      }
    }
    warp_sum_n(dot);
    float mine = dot[0];
#pragma unroll
    for (int u = 1; u < kGroup; ++u)
      if (lane == u) mine = dot[u];
    if (lane < kGroup)
      store_any(p.o, p.o_bf16, int64_t(b) * p.HV * kDk + rows + g * kGroup + lane, mine);
    Ts* const out = p.commit ? rows_ptr
                             : static_cast<Ts*>(p.step_states) +
                                   (int64_t(b) * p.HV * kDk + rows) * kDk + lane * kPerLane;
#pragma unroll
    for (int u = 0; u < kGroup; ++u)
      RowFragment<Ts, kPerLane>::store(out + (g * kGroup + u) * kDk, row[g][u]);
  }
}

/// The q/k half of the decode's window advance (T = 1) for decode_warp_kernel, launched as its
/// programmatic dependent: it starts once every block of the step has signalled that its window
/// reads are done, writes window[j] = [window | new][1 + j], then waits for the step to complete,
/// so that work after it in the stream sees the step's results too.
__global__ void conv_qk_advance_kernel(const void* qkv, bool qkv_bf16, void* conv_state,
                                       bool conv_bf16, const int32_t* slots, int64_t num_slots,
                                       int64_t conv_dim, int64_t qk_channels, int K) {
  const int b = blockIdx.y;
  const int64_t ch = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int slot = slots[b];
  if (ch < qk_channels && slot >= 0 && slot < num_slots) {
    const int64_t base = (int64_t(slot) * conv_dim + ch) * (K - 1);
    float next[kMaxK - 1];
#pragma unroll
    for (int j = 0; j < kMaxK - 1; ++j) {
      if (j >= K - 1) break;
      next[j] = j + 1 < K - 1 ? load_any(conv_state, conv_bf16, base + j + 1)
                              : load_any(qkv, qkv_bf16, int64_t(b) * conv_dim + ch);
    }
#pragma unroll
    for (int j = 0; j < kMaxK - 1; ++j) {
      if (j >= K - 1) break;
      store_any(conv_state, conv_bf16, base + j, next[j]);
    }
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// ---- Bulk-copy kernel (large batches) -----------------------------------------------------

/// Large batches: one block per (sequence, key head); its rows go through shared memory in chunks
/// of kBulkRows rows, kBulkStages chunks in flight, each a bulk copy (cp.async.bulk) completing on
/// an mbarrier, so the bytes in flight do not depend on registers. The block's warps update a
/// chunk in shared memory (kBulkRows / kBulkWarps rows each), then one thread writes it back with a
/// bulk store and refills the stage. T = 1 (decode, or verify with one token: the state goes to
/// step_states). Every window is read by this block alone: advanced at once.
constexpr int kBulkRows = 32, kBulkStages = 3, kBulkWarps = 8, kBulkMaxGroup = 4;

__device__ __forceinline__ uint32_t smem_addr(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}
/// Arrives on bar and tells it `bytes` more are coming from bulk copies.
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred ready;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 ready, [%1], %2;\n"
        "selp.u32 %0, 1, 0, ready;\n"
        "}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}
__device__ __forceinline__ void bulk_store(void* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst),
               "r"(smem_addr(src)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

template <typename Ts, int kDk>
constexpr uint32_t bulk_smem_bytes() {
  return uint32_t(kBulkStages * kBulkRows * kDk * sizeof(Ts));
}

template <typename Ts, bool kKda, int kDk>
__global__ void __launch_bounds__(32 * kBulkWarps)
    decode_bulk_kernel(const __grid_constant__ StepArgs p) {
  constexpr int kThreads = 32 * kBulkWarps;
  constexpr int kPerLane = kDk / 32;
  constexpr int kRowsPerWarp = kBulkRows / kBulkWarps;
  constexpr int kStageElems = kBulkRows * kDk;
  constexpr uint32_t kStageBytes = uint32_t(kStageElems * sizeof(Ts));
  static_assert(kRowsPerWarp == 4 && kDk % kBulkRows == 0 && kStageBytes % 16 == 0);
  extern __shared__ __align__(128) unsigned char s_dynamic[];
  Ts* const s_rows = reinterpret_cast<Ts*>(s_dynamic);  // [kBulkStages][kBulkRows][kDk]
  __shared__ __align__(8) uint64_t s_full[kBulkStages];
  __shared__ __align__(16) float s_qk[2 * kDk];
  __shared__ __align__(16) float s_decay[kKda ? kBulkMaxGroup : 1][kDk];
  __shared__ float s_v[kBulkMaxGroup * kDk];
  __shared__ float s_gdn_decay[kBulkMaxGroup], s_beta[kBulkMaxGroup];

  const int b = blockIdx.y, kh = blockIdx.x;
  const int slot = p.slots[b];
  if (slot < 0 || slot >= p.num_slots) return;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int rows = p.group * kDk;  // the key head's rows
  const int chunks = rows / kBulkRows;
  const int hv0 = kh * p.group;
  const int64_t head_rows = int64_t(hv0) * kDk;  // row offset in [HV d_v]
  Ts* const g_state = static_cast<Ts*>(p.state) + (int64_t(slot) * p.HV * kDk + head_rows) * kDk;
  Ts* const g_out =
      p.commit ? g_state
               : static_cast<Ts*>(p.step_states) + (int64_t(b) * p.HV * kDk + head_rows) * kDk;

  // 1. The first chunks' bulk loads, before anything else.
  if (tid == 0) {
#pragma unroll
    for (int st = 0; st < kBulkStages; ++st) mbar_init(&s_full[st], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    for (int c = 0; c < kBulkStages && c < chunks; ++c) {
      mbar_expect_tx(&s_full[c], kStageBytes);
      bulk_load(s_rows + c * kStageElems, g_state + int64_t(c) * kStageElems, kStageBytes,
                &s_full[c]);
    }
  }

  // 2. q/k and v convs (windows advanced at once: this block alone reads them), gates.
  for (int c = tid; c < 2 * kDk; c += kThreads) {
    const int64_t ch = (c < kDk ? 0 : int64_t(p.H) * kDk) + int64_t(kh) * kDk + c % kDk;
    float y[1], next[kMaxK - 1];
    conv_channel(p, b, 1, slot, ch, y, next);
    s_qk[c] = y[0];
    if (p.commit) store_window(p, slot, ch, next);
  }
  for (int r = tid; r < rows; r += kThreads) {
    const int64_t ch = 2 * int64_t(p.H) * kDk + head_rows + r;
    float y[1], next[kMaxK - 1];
    conv_channel(p, b, 1, slot, ch, y, next);
    s_v[r] = y[0];
    if (p.commit) store_window(p, slot, ch, next);
  }
  if constexpr (kKda) {
    for (int i = tid; i < p.group * kDk; i += kThreads) {
      const int h = i / kDk, c = i % kDk, hv = hv0 + h;
      const float f =
          load_any(p.a, p.a_bf16, (int64_t(b) * p.HV + hv) * kDk + c) + p.dt_bias[hv * kDk + c];
      const float a_scale = expf(p.A_log[hv]);
      s_decay[h][c] =
          expf(p.safe_gate ? p.lower_bound * sigmoid(a_scale * f) : -a_scale * softplus(f));
    }
  }
  if (tid < p.group) {
    const int hv = hv0 + tid;
    if constexpr (!kKda) {
      const float x = load_any(p.a, p.a_bf16, int64_t(b) * p.HV + hv) + p.dt_bias[hv];
      s_gdn_decay[tid] = expf(-expf(p.A_log[hv]) * softplus(x));
    }
    s_beta[tid] = sigmoid(load_any(p.b, p.b_bf16, int64_t(b) * p.HV + hv));
  }
  __syncthreads();

  // 3. Norms (each warp for itself); this lane's q and k stay in registers.
  float qq[kPerLane], kk[kPerLane], ss[2] = {0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    qq[j] = s_qk[lane * kPerLane + j];
    kk[j] = s_qk[kDk + lane * kPerLane + j];
    ss[0] = fmaf(qq[j], qq[j], ss[0]);
    ss[1] = fmaf(kk[j], kk[j], ss[1]);
  }
  warp_sum_n(ss);
  const float rq = rsqrtf(ss[0] + kL2NormEps) * p.scale, rk = rsqrtf(ss[1] + kL2NormEps);
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) qq[j] *= rq, kk[j] *= rk;

  // 4. Chunks: wait, update in shared memory, write back, refill.
  for (int c = 0; c < chunks; ++c) {
    const int st = c % kBulkStages;
    mbar_wait(&s_full[st], uint32_t(c / kBulkStages) & 1u);
    Ts* const stage = s_rows + st * kStageElems;
    const int r0 = c * kBulkRows + warp * kRowsPerWarp;  // first row of this warp in the head
    const int h = r0 / kDk;
    float dd[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j)
      dd[j] = kKda ? s_decay[h][lane * kPerLane + j] : s_gdn_decay[h];
    const float beta = s_beta[h];
    float row[kRowsPerWarp][kPerLane], dot[kRowsPerWarp];
#pragma unroll
    for (int u = 0; u < kRowsPerWarp; ++u) {
      RowFragment<Ts, kPerLane>::load(stage + (warp * kRowsPerWarp + u) * kDk + lane * kPerLane,
                                      row[u]);
      dot[u] = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        row[u][j] *= dd[j];
        dot[u] = fmaf(row[u][j], kk[j], dot[u]);
      }
    }
    warp_sum_n(dot);
#pragma unroll
    for (int u = 0; u < kRowsPerWarp; ++u) {
      const float delta = beta * (s_v[r0 + u] - dot[u]);
      dot[u] = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        row[u][j] = fmaf(delta, kk[j], row[u][j]);
        dot[u] = fmaf(row[u][j], qq[j], dot[u]);
      }
      RowFragment<Ts, kPerLane>::store(stage + (warp * kRowsPerWarp + u) * kDk + lane * kPerLane,
                                       row[u]);
    }
    warp_sum_n(dot);
    float mine = dot[0];
#pragma unroll
    for (int u = 1; u < kRowsPerWarp; ++u)
      if (lane == u) mine = dot[u];
    if (lane < kRowsPerWarp)
      store_any(p.o, p.o_bf16, int64_t(b) * p.HV * kDk + head_rows + r0 + lane, mine);
    // The chunk's shared-memory writes must be visible to the bulk store (async proxy).
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (tid == 0) {
      bulk_store(g_out + int64_t(c) * kStageElems, stage, kStageBytes);
      if (c + kBulkStages < chunks) {
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // stage read out
        mbar_expect_tx(&s_full[st], kStageBytes);
        bulk_load(stage, g_state + int64_t(c + kBulkStages) * kStageElems, kStageBytes,
                  &s_full[st]);
      }
    }
  }
  if (tid == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

template <typename Ts, bool kKda, int kDk>
Status launch_bulk(const StepArgs& args, int B, cudaStream_t stream) {
  if (args.T != 1)
    return unsupported("gated_delta_rule_decode (CUDA): the bulk-copy tiling takes T = 1, got ",
                       args.T);
  auto* kernel = decode_bulk_kernel<Ts, kKda, kDk>;
  constexpr uint32_t smem = bulk_smem_bytes<Ts, kDk>();
  static std::once_flag once;
  static cudaError_t set = cudaSuccess;
  std::call_once(once, [&] {
    set = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  });
  HYLA_CUDA_CHECK(set);
  kernel<<<dim3(unsigned(args.H), unsigned(B)), 32 * kBulkWarps, smem, stream>>>(args);
  HYLA_CUDA_CHECK(cudaGetLastError());
  return ok_status();
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
  const int64_t base = (int64_t(slot) * conv_dim + ch) * (K - 1);
  float next[kMaxK - 1];
#pragma unroll
  for (int j = 0; j < kMaxK - 1; ++j) {
    if (j >= K - 1) break;
    const int pos = n + j;  // position in [old (K-1) | new (n)]
    next[j] = pos < K - 1
                  ? load_any(conv_state, conv_bf16, base + pos)
                  : load_any(qkv, qkv_bf16, (int64_t(b) * T + (pos - (K - 1))) * conv_dim + ch);
  }
#pragma unroll
  for (int j = 0; j < kMaxK - 1; ++j) {
    if (j >= K - 1) break;
    store_any(conv_state, conv_bf16, base + j, next[j]);
  }
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

/// The tilings compiled: {rows per block, warps per block}. (Capping registers so that 32 warps
/// fit per SM at large batch spills 84-180 bytes per thread at d_k = 128: not compiled.)
/// {8, 1} is decode_warp_kernel, {32, 8, bulk} decode_bulk_kernel (both T = 1 only, no cluster;
/// not chosen by the entry until measured).
constexpr DecodeTiling kTilings[] = {
    {16, 4},  {32, 4},  {64, 4},        {128, 4},
    {256, 4}, {256, 8}, {kWarpRows, 1}, {kBulkRows, kBulkWarps, true}};

template <typename Ts, bool kKda, int kDk, int kR, int kWarps, int kT>
Status launch_tiled(const StepArgs& args, int B, cudaStream_t stream) {
  auto* kernel = decode_step_kernel<Ts, kKda, kDk, kR, kWarps, kT>;
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
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = unsigned(args.cluster);
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = args.cluster > 1 ? 1 : 0;
  HYLA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args));
  return ok_status();
}

/// decode_warp_kernel, then (commit) conv_qk_advance_kernel as its programmatic dependent.
template <typename Ts, bool kKda, int kDk>
Status launch_warps(const StepArgs& args, int B, cudaStream_t stream) {
  if (args.T != 1)
    return unsupported("gated_delta_rule_decode (CUDA): the one-warp tiling takes T = 1, got ",
                       args.T);
  const dim3 grid(unsigned(args.H * (args.group * kDk / kWarpRows)), unsigned(B));
  decode_warp_kernel<Ts, kKda, kDk><<<grid, 32, 0, stream>>>(args);
  HYLA_CUDA_CHECK(cudaGetLastError());
  if (!args.commit) return ok_status();
  const int64_t qk_channels = 2 * int64_t(args.H) * kDk;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned((qk_channels + 255) / 256), unsigned(B));
  config.blockDim = dim3(256);
  config.stream = stream;
  cudaLaunchAttribute dependent{};
  dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  dependent.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &dependent;
  config.numAttrs = 1;
  HYLA_CUDA_CHECK(cudaLaunchKernelEx(&config, conv_qk_advance_kernel, args.qkv, args.qkv_bf16,
                                     args.conv_state, args.conv_bf16, args.slots, args.num_slots,
                                     args.conv_dim, qk_channels, args.K));
  return ok_status();
}

template <typename Ts, bool kKda, int kDk, int kT>
Status launch_rows(const StepArgs& args, int B, DecodeTiling t, cudaStream_t stream) {
  if (t.bulk) return launch_bulk<Ts, kKda, kDk>(args, B, stream);
  if (t.warps == 1 && t.rows_per_block == kWarpRows)
    return launch_warps<Ts, kKda, kDk>(args, B, stream);
  const int key = t.rows_per_block * 100 + t.warps;
  switch (key) {
    case 1604: return launch_tiled<Ts, kKda, kDk, 16, 4, kT>(args, B, stream);
    case 3204: return launch_tiled<Ts, kKda, kDk, 32, 4, kT>(args, B, stream);
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

}  // namespace

std::vector<DecodeTiling> decode_tilings() {
  return std::vector<DecodeTiling>(std::begin(kTilings), std::end(kTilings));
}

int decode_cluster_size(DecodeTiling tiling, int64_t group, int64_t d_v) {
  const int64_t rows = group * d_v, r = tiling.rows_per_block;
  if (tiling.warps == 1) return r == kWarpRows && d_v % r == 0 ? 1 : 0;  // no cluster
  if (tiling.bulk)  // whole key heads, no cluster
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

DecodeTiling default_decode_tiling(int64_t B, int64_t H, int64_t group, int64_t d_v) {
  // Measured on the H200 (docs/perf.md, sweeps of every tiling): from 128 key heads on, whole key
  // heads per block (no cluster), the most warps; below, the smallest blocks (most blocks, the
  // shortest chain per block: B=1 6.7 us against 7.0-7.6 us with 32 rows, 8.4-15.7 us with more).
  const bool whole_heads = B * H >= 128;
  DecodeTiling best{};
  for (const DecodeTiling t : kTilings) {  // smallest blocks first, then more warps
    const int cluster = decode_cluster_size(t, group, d_v);
    if (cluster == 0) continue;
    if (t.warps == 1 || t.bulk) continue;  // the one-warp and bulk tilings: not measured yet
    if (!whole_heads) return t;
    if (cluster == 1) best = t;
  }
  if (best.rows_per_block == 0)  // a key head larger than any block: the largest blocks
    for (const DecodeTiling t : kTilings)
      if (t.warps > 1 && !t.bulk && decode_cluster_size(t, group, d_v) > 0) best = t;
  return best;
}

Status gated_delta_rule_decode_tiled(const GatedDeltaRuleDecodeParams& p, DecodeTiling tiling,
                                     Stream stream_handle) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_handle.handle);
  const int T = int(p.tokens_per_seq);
  const int B = int(p.qkv.size(0) / T);
  const int HV = int(p.state_pool.size(1)), d_v = int(p.state_pool.size(2)),
            d_k = int(p.state_pool.size(3));
  const int64_t conv_dim = p.qkv.size(1);
  const int H = int((conv_dim - int64_t(HV) * d_v) / (2 * d_k));
  const bool kda = p.a.ndim() == 3;
  if (d_v != d_k)
    return unsupported("gated_delta_rule_decode (CUDA): d_v = ", d_v, " != d_k = ", d_k);
  if (p.conv_weight.size(1) > kMaxK)
    return unsupported("gated_delta_rule_decode (CUDA): conv kernel of ", p.conv_weight.size(1),
                       " taps, at most ", kMaxK);
  const int cluster = decode_cluster_size(tiling, HV / H, d_v);
  if (cluster == 0)
    return unsupported("gated_delta_rule_decode (CUDA): ", tiling.rows_per_block,
                       " rows per block do not tile ", HV / H, " value heads of ", d_v, " rows");
  if (tiling.warps != 1 && tiling.warps != 4 && tiling.warps != 8)
    return unsupported("gated_delta_rule_decode (CUDA): ", tiling.warps, " warps per block");
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
  const int64_t T = p.tokens_per_seq, B = p.qkv.size(0) / T;
  const int64_t HV = p.state_pool.size(1), d_v = p.state_pool.size(2), d_k = p.state_pool.size(3);
  const int64_t H = (p.qkv.size(1) - HV * d_v) / (2 * d_k);
  return gated_delta_rule_decode_tiled(p, default_decode_tiling(B, H, HV / H, d_v), stream);
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

}  // namespace hyla::kernels::cuda
