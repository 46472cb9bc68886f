// CUDA body of the fused decode / verify step and the commit (kernels/gated_delta_rule_decode.h).
//
// Decode is bound by the state: per (sequence, value head) d_v x d_k fp32 = 64 KiB read and written
// per token. Unit of work: one (sequence, key head), whose `group` value heads' rows are contiguous
// in the pool. A thread block owns rows_per_block of those rows (tiling: gated_delta_rule_decode_
// tiling.h); the blocks of one key head form a thread-block cluster. Each block:
//   1. issues the loads of its first state rows (registers, 16-byte loads for fp32), so the state
//      bytes are in flight during everything else;
//   2. computes the key head's 2 d_k q/k conv channels (window + SiLU; its threads share them
//      through shared memory), its own rows' v channels and the gates; a v window is advanced at
//      once (no other block reads it), the q/k windows by rank 0 after a cluster barrier says every
//      block has read them;
//   3. l2-normalises q and k (each warp for itself) and streams its rows: each warp holds a row as
//      32 lanes x d_k / 32 contiguous elements, runs the T tokens on it (decay, predict = warp
//      sum, write, read = warp sum), stores it back (decode) or stores every step's copy (verify),
//      the next row group's loads in flight meanwhile.
// Gated RMSNorm, when asked, runs as a second kernel. No host synchronisation: graph-capturable.
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
constexpr DecodeTiling kTilings[] = {{16, 4}, {32, 4}, {64, 4}, {128, 4}, {256, 4}, {256, 8}};

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

template <typename Ts, bool kKda, int kDk, int kT>
Status launch_rows(const StepArgs& args, int B, DecodeTiling t, cudaStream_t stream) {
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
    if (!whole_heads) return t;
    if (cluster == 1) best = t;
  }
  if (best.rows_per_block == 0)  // a key head larger than any block: the largest blocks
    for (const DecodeTiling t : kTilings)
      if (decode_cluster_size(t, group, d_v) > 0) best = t;
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
  if (tiling.warps != 4 && tiling.warps != 8)
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
