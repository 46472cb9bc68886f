// Shared by the CUDA decode kernels (gated_delta_rule_decode*.cu): the kernel arguments, element
// access for f32 / bf16 arrays, state-row fragments in registers, the conv of one channel, warp
// sums, and the launchers each kernel file defines. Device code only; include from .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_launch.h"
#include "core/error.h"
#include "kernels/cuda/gated_delta_rule_decode_tiling.h"
#include "kernels/gated_delta_rule_decode.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cuda::decode_detail {

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
  /// Row strides in elements of qkv, a and b: row b T + t starts at (b T + t) x stride. Row-strided
  /// views (narrow views of one fused projection) have 16-byte aligned rows (checked by the entry),
  /// so the vector loads of the warp and split kernels stay aligned.
  int64_t qkv_row, a_row, b_row;
  int T, K, H, HV, group, cluster;
  float scale;
  bool commit;
  bool overlap;  ///< GatedDeltaRuleDecodeParams::overlap_previous
  /// Where a block lets its dependent launch (griddepcontrol.launch_dependents): 0 at its start,
  /// 1 after its own griddepcontrol.wait (overlapped instantiations); decode_trigger.
  int trigger;
  /// Block kernel, blocks per key head (cluster) > 1: one arrival counter per (sequence, key
  /// head), [B][H], zero before the call and left zero by it. Given, the key head's blocks are
  /// launched without a cluster and the last one to have read the q/k windows (the counter's last
  /// arrival) advances them; null: a cluster barrier orders the window writes after the reads.
  unsigned* arrivals;
  /// The split tilings (DecodeKernel::kSplit): GatedDeltaRuleDecodeParams::workspace and where
  /// one sequence's values sit in it.
  float* workspace;
  DecodeWorkspaceLayout workspace_layout;
};

/// Lets the dependent grid launch when `where` is the trigger point chosen in p.
__device__ __forceinline__ void trigger_dependents(const StepArgs& p, int where) {
  if (p.trigger == where) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

__device__ __forceinline__ uint16_t float_to_bf16_bits(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
/// Element i of an f32 or bf16 array as loaded: its 32 bits, or the bf16's 16 in the low half;
/// bits_to_float makes it a float where it is used. Loads whose values are converted later stay in
/// flight together. (A converting load, its bf16 conversion in the dtype branch right after the
/// load, made the warp wait for each value in turn: in the SASS of the block step, a v thread's
/// input, window, gate and beta loads took one round trip each; docs/perf-history.md, "GPU
/// decode".) Both loads are predicated into one register, so no conversion can be placed beside
/// them.
__device__ __forceinline__ uint32_t load_bits(const void* p, bool is_bf16, int64_t i) {
  const char* at = static_cast<const char*>(p) + (is_bf16 ? 2 * i : 4 * i);
  uint32_t bits;
  asm("{\n\t.reg .pred bf;\n\tsetp.ne.b32 bf, %1, 0;\n\t@bf ld.global.u16 %0, [%2];\n\t"
      "@!bf ld.global.b32 %0, [%2];\n\t}"
      : "=r"(bits)
      : "r"(int(is_bf16)), "l"(at)
      : "memory");
  return bits;
}
__device__ __forceinline__ float bits_to_float(uint32_t bits, bool is_bf16) {
  return __uint_as_float(is_bf16 ? bits << 16 : bits);
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

/// What one conv channel reads: the K weights (zero-padded on the old side to kMaxK, so every
/// register index is a compile-time constant), the T new inputs and the K-1 window entries. The
/// three are loaded separately: weights are constants, inputs are indexed by the sequence row (a
/// kernel can load them before its slot id has arrived), the window by the slot. Inputs and window
/// are held as loaded (load_bits), converted in conv_apply.
template <int kT>
struct ConvIn {
  float w[kMaxK];
  uint32_t x[kT];
  uint32_t win[kMaxK - 1];
};
template <int kT>
__device__ __forceinline__ void load_conv_weights(const StepArgs& p, int64_t ch, ConvIn<kT>& in) {
  const int pad = kMaxK - p.K;
#pragma unroll
  for (int j = 0; j < kMaxK; ++j) in.w[j] = j >= pad ? p.conv_w[ch * p.K + (j - pad)] : 0.0f;
}
template <int kT>
__device__ __forceinline__ void load_conv_inputs(const StepArgs& p, int b, int T, int64_t ch,
                                                 ConvIn<kT>& in) {
#pragma unroll
  for (int t = 0; t < kT; ++t)
    in.x[t] = t < T ? load_bits(p.qkv, p.qkv_bf16, (int64_t(b) * T + t) * p.qkv_row + ch) : 0u;
}
template <int kT>
__device__ __forceinline__ void load_conv_window(const StepArgs& p, int slot, int64_t ch,
                                                 ConvIn<kT>& in) {
  const int pad = kMaxK - p.K;
  const int64_t window = (int64_t(slot) * p.conv_dim + ch) * (p.K - 1);
#pragma unroll
  for (int j = 0; j < kMaxK - 1; ++j)
    in.win[j] = j >= pad ? load_bits(p.conv_state, p.conv_bf16, window + (j - pad)) : 0u;
}
/// Weights and inputs.
template <int kT>
__device__ __forceinline__ void load_conv_in(const StepArgs& p, int b, int T, int64_t ch,
                                             ConvIn<kT>& in) {
  load_conv_weights(p, ch, in);
  load_conv_inputs(p, b, T, ch, in);
}

/// One conv channel over the T new tokens from loaded ConvIn: y[t] = silu(sum_j w[ch, j]
/// u[t - (K-1) + j]), where u is the window (K-1 oldest-first entries) followed by the new
/// inputs; next gets the advanced window, the last K-1 entries of [window | new].
template <int kT>
__device__ __forceinline__ void conv_apply(const StepArgs& p, int T, const ConvIn<kT>& in,
                                           float (&y)[kT], float (&next)[kMaxK - 1]) {
  constexpr int kLen = kMaxK - 1 + kT;
  float seq[kLen];
#pragma unroll
  for (int j = 0; j < kMaxK - 1; ++j) seq[j] = bits_to_float(in.win[j], p.conv_bf16);
#pragma unroll
  for (int t = 0; t < kT; ++t) seq[kMaxK - 1 + t] = bits_to_float(in.x[t], p.qkv_bf16);
#pragma unroll
  for (int t = 0; t < kT; ++t) {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxK; ++j) acc = fmaf(in.w[j], seq[t + j], acc);
    y[t] = silu(acc);
  }
  if (kT == 1 && p.K == kMaxK) {  // the common case, with compile-time indices
#pragma unroll
    for (int j = 0; j < kMaxK - 1; ++j) next[j] = seq[1 + j];
    return;
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
/// The window loaded here, weights and inputs already in `in`.
template <int kT>
__device__ __forceinline__ void conv_channel(const StepArgs& p, int T, int slot, int64_t ch,
                                             ConvIn<kT> in, float (&y)[kT],
                                             float (&next)[kMaxK - 1]) {
  load_conv_window(p, slot, ch, in);
  conv_apply(p, T, in, y, next);
}
/// The same, loading the weights and inputs itself.
template <int kT>
__device__ __forceinline__ void conv_channel(const StepArgs& p, int b, int T, int slot, int64_t ch,
                                             float (&y)[kT], float (&next)[kMaxK - 1]) {
  ConvIn<kT> in;
  load_conv_in(p, b, T, ch, in);
  conv_channel(p, T, slot, ch, in, y, next);
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

/// One token of the delta rule on kRows state rows that a warp holds as 32 lanes x kN columns,
/// from the lane's columns of the raw (not l2-normalised) conv outputs q, k, with the norms folded
/// in: per row u
///   row *= decay;  s = <row, k>;  row += (beta (v_u - s / |k|) / |k|) k;  o_u = scale <row, q> /
///   |q|
/// (the same as normalising k first: <row, k^> = <row, k> / |k|, row += beta (v - <row, k^>) k^),
/// |q|^2 and |k|^2 summed in the same warp reduction as the rows' <row, k>, so that they cost no
/// step of their own. v_of(u) gives v_u (called by every lane: it may shuffle). Returns o_u to lane
/// u < kRows (o_0 to the others).
template <int kRows, int kN, typename VOf>
__device__ __forceinline__ float delta_rule_rows(float (&row)[kRows][kN], const float (&q)[kN],
                                                 const float (&k)[kN], const float (&decay)[kN],
                                                 float beta, float scale, VOf v_of) {
  float s[kRows + 2];  // the rows' <row, k>, then |q|^2, |k|^2
#pragma unroll
  for (int u = 0; u < kRows; ++u) {
    s[u] = 0.0f;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      row[u][j] *= decay[j];
      s[u] = fmaf(row[u][j], k[j], s[u]);
    }
  }
  s[kRows] = s[kRows + 1] = 0.0f;
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    s[kRows] = fmaf(q[j], q[j], s[kRows]);
    s[kRows + 1] = fmaf(k[j], k[j], s[kRows + 1]);
  }
  warp_sum_n(s);
  const float rq = rsqrtf(s[kRows] + kL2NormEps) * scale, rk = rsqrtf(s[kRows + 1] + kL2NormEps);
  float o[kRows];
#pragma unroll
  for (int u = 0; u < kRows; ++u) {
    const float step = beta * (v_of(u) - s[u] * rk) * rk;
    o[u] = 0.0f;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      row[u][j] = fmaf(step, k[j], row[u][j]);
      o[u] = fmaf(row[u][j], q[j], o[u]);
    }
  }
  warp_sum_n(o);
  const int lane = threadIdx.x & 31;
  float mine = o[0];
#pragma unroll
  for (int u = 1; u < kRows; ++u)
    if (lane == u) mine = o[u];
  return mine * rq;
}

/// Advances channel ch's window of the sequence in row block b (slot `slot`) by its first n of T
/// new inputs (qkv rows qkv_row elements apart): the new K-1 entries are the last K-1 of
/// [old window | new]. Reads everything before writing, so it is in place.
__device__ __forceinline__ void advance_window(const void* qkv, bool qkv_bf16, int64_t qkv_row,
                                               void* conv_state, bool conv_bf16, int b, int slot,
                                               int64_t conv_dim, int64_t ch, int n, int T, int K) {
  const int64_t base = (int64_t(slot) * conv_dim + ch) * (K - 1);
  uint32_t next[kMaxK - 1];  // as loaded (load_bits: the K - 1 loads in flight together)
#pragma unroll
  for (int j = 0; j < kMaxK - 1; ++j) {
    if (j >= K - 1) break;
    const int pos = n + j;  // position in [old (K-1) | new (n)]
    next[j] = pos < K - 1
                  ? load_bits(conv_state, conv_bf16, base + pos)
                  : load_bits(qkv, qkv_bf16, (int64_t(b) * T + (pos - (K - 1))) * qkv_row + ch);
  }
#pragma unroll
  for (int j = 0; j < kMaxK - 1; ++j) {
    if (j >= K - 1) break;
    const bool is_bf16 = n + j < K - 1 ? conv_bf16 : qkv_bf16;
    store_any(conv_state, conv_bf16, base + j, bits_to_float(next[j], is_bf16));
  }
}

/// Launches kKernel (a decode kernel taking StepArgs) over (H x args.cluster, B) blocks of
/// 32 x warps threads: in clusters of args.cluster blocks along x (beyond 8, the non-portable size,
/// opted into once per kernel) and, with `overlap`, as a programmatic dependent of the kernel
/// before it on the stream.
template <auto kKernel>
Status launch_decode_grid(const StepArgs& args, int B, int warps, bool overlap,
                          cudaStream_t stream) {
  const bool cluster = args.cluster > 1 && args.arrivals == nullptr;
  launch_kernel_ex<kKernel>({.grid = dim3(unsigned(args.H * args.cluster), unsigned(B)),
                             .block = dim3(unsigned(32 * warps)),
                             .cluster = cluster ? unsigned(args.cluster) : 1u,
                             .dependent = overlap},
                            stream, args);
  return ok_status();
}

/// decode_bulk_kernel (gated_delta_rule_decode_bulk.cu): rows per shared-memory chunk, chunks in
/// flight, warps per block, most value heads per key head.
constexpr int kBulkRows = 32, kBulkStages = 3, kBulkWarps = 8, kBulkMaxGroup = 4;

/// Bulk-copy decode (T = 1).
template <typename Ts, bool kKda, int kDk>
Status launch_bulk(const StepArgs& args, int B, cudaStream_t stream);

/// Any tiling on a bf16 state pool (gated_delta_rule_decode_bf16.cu; the f32 pools are served
/// by the entry's own translation unit).
Status launch_bf16_pool(const StepArgs& args, bool kda, int d_k, int B, DecodeTiling tiling,
                        cudaStream_t stream);

/// The split kernels' one tiling (DecodeKernel::kSplit): rows per block of decode_rows_kernel and
/// its warps.
constexpr int kSplitRows = 8, kSplitWarps = 1;

/// Two-kernel decode (T = 1, d_k = d_v; gated_delta_rule_decode_split.cu), kSplitRows rows per
/// block of kSplitWarps warps.
template <typename Ts, bool kKda, int kDk>
Status launch_split(const StepArgs& args, int B, cudaStream_t stream);

/// Warp-autonomous decode (T = 1, K = 4; gated_delta_rule_decode_warp.cu), the warp tilings'
/// rows_per_block / warps.
template <typename Ts, bool kKda>
Status launch_warp(const StepArgs& args, int d_k, int B, int rows_per_block, int warps,
                   cudaStream_t stream);

}  // namespace hyla::kernels::cuda::decode_detail
