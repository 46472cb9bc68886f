// CUDA body of the fused decode / verify step and the commit (kernels/gated_delta_rule_decode.h).
//
// Decode is bound by the state: per (sequence, value head) d_v x d_k fp32 = 64 KiB read and written
// per token. Layout: grid (HV x V-splits, B), 128 threads. One thread block owns kBV state rows
// (value channels) of one head: it recomputes the head's q and k (conv window + SiLU + l2norm: a
// few KiB, mostly L2 hits), its kBV v channels and the gates, then streams its rows once through
// registers: each warp holds a row as 32 lanes x (d_k / 32) contiguous elements (16-byte loads for
// fp32), runs the T tokens on it (decay, predict = warp sum, write, read = warp sum) and stores it
// back (decode) or stores every step's copy (verify). Small batches split each head over
// d_v / 16 blocks, large batches over d_v / 64.
// The conv window is advanced by a second kernel after the step (every block of a key head reads
// the q/k windows, so none may overwrite them while the step runs); gated RMSNorm, when asked, by a
// third. All launches are stream-ordered: no host synchronisation, graph-capturable.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "kernels/gated_delta_rule_decode.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
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
  int T, K, H, HV, d_v, group, n_vsplit;
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

/// y[t] = silu(sum_j w[ch, j] u[t - (K-1) + j]) for t < T, where u is the channel's conv window
/// (K-1 oldest-first entries from the pool) followed by the T new inputs. Kernels shorter than
/// kMaxK are zero-padded on the old side so every register index is a compile-time constant.
template <int kT>
__device__ __forceinline__ void conv_channel(const StepArgs& p, int b, int slot, int64_t ch,
                                             float (&y)[kT]) {
  float seq[kMaxK - 1 + kT];
  float w[kMaxK];
  const int pad = kMaxK - p.K;
#pragma unroll
  for (int j = 0; j < kMaxK; ++j) w[j] = j >= pad ? p.conv_w[ch * p.K + (j - pad)] : 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxK - 1; ++j)
    seq[j] = j >= pad ? load_any(p.conv_state, p.conv_bf16,
                                 (int64_t(slot) * p.conv_dim + ch) * (p.K - 1) + (j - pad))
                      : 0.0f;
#pragma unroll
  for (int t = 0; t < kT; ++t)
    seq[kMaxK - 1 + t] =
        t < p.T ? load_any(p.qkv, p.qkv_bf16, (int64_t(b) * p.T + t) * p.conv_dim + ch) : 0.0f;
#pragma unroll
  for (int t = 0; t < kT; ++t) {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxK; ++j) acc = fmaf(w[j], seq[t + j], acc);
    y[t] = silu(acc);
  }
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

/// One block: value head hv, state rows [v0, v0 + kBV) of sequence b, all T tokens. Warp w owns
/// the kBV / 4 consecutive rows starting at v0 + w kBV / 4; it loads all of them first thing, so
/// the state bytes are in flight while the block computes q, k, v and the gates.
/// kT: the most tokens per sequence this instantiation handles (1 for decode, kMaxT for verify),
/// so the decode path does no work for absent draft tokens.
template <typename Ts, bool kKda, int kDk, int kBV, int kT>
__global__ void __launch_bounds__(kThreads) decode_step_kernel(const __grid_constant__ StepArgs p) {
  constexpr int kPerLane = kDk / 32;
  constexpr int kRows = kBV / kWarps;            // rows per warp
  constexpr int kGroup = kRows < 4 ? kRows : 4;  // rows per warp in flight while computing
  static_assert(kDk <= kThreads && kDk % 32 == 0 && kBV % kWarps == 0 && kRows % kGroup == 0);
  __shared__ __align__(16) float s_q[kT][kDk];
  __shared__ __align__(16) float s_k[kT][kDk];
  __shared__ __align__(16) float s_decay[kKda ? kT : 1][kDk];  // KDA: exp(g) per channel
  __shared__ float s_v[kT][kBV];
  __shared__ float s_gdn_decay[kT];  // GDN: exp(g)
  __shared__ float s_beta[kT];
  __shared__ float s_partial[2][kT][kWarps];

  const int b = blockIdx.y;
  const int hv = blockIdx.x / p.n_vsplit;
  const int v0 = (blockIdx.x % p.n_vsplit) * kBV;
  const int slot = p.slots[b];
  if (slot < 0 || slot >= p.num_slots) return;  // padding (or an id outside the pool): skip
  const int kh = hv / p.group;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int T = p.T;

  // Issue the first group's state loads before anything else.
  Ts* const rows_ptr = static_cast<Ts*>(p.state) +
                       ((int64_t(slot) * p.HV + hv) * p.d_v + v0 + warp * kRows) * kDk +
                       lane * kPerLane;
  float row[kGroup][kPerLane], next[kGroup][kPerLane];
#pragma unroll
  for (int u = 0; u < kGroup; ++u) RowFragment<Ts, kPerLane>::load(rows_ptr + u * kDk, row[u]);

  // Gates (fp32): GDN one decay per token, KDA one per key channel; beta = sigmoid(b).
  const float a_scale = expf(p.A_log[hv]);
  if constexpr (kKda) {
    if (tid < kDk) {
      const float bias = p.dt_bias[hv * kDk + tid];
      for (int t = 0; t < T; ++t) {
        const float f =
            load_any(p.a, p.a_bf16, ((int64_t(b) * T + t) * p.HV + hv) * kDk + tid) + bias;
        const float g = p.safe_gate ? p.lower_bound * sigmoid(a_scale * f) : -a_scale * softplus(f);
        s_decay[t][tid] = expf(g);
      }
    }
  } else {
    if (tid < T) {
      const float x = load_any(p.a, p.a_bf16, (int64_t(b) * T + tid) * p.HV + hv) + p.dt_bias[hv];
      s_gdn_decay[tid] = expf(-a_scale * softplus(x));
    }
  }
  if (tid < T) s_beta[tid] = sigmoid(load_any(p.b, p.b_bf16, (int64_t(b) * T + tid) * p.HV + hv));

  // q, k = silu(conv(...)) for key head kh, then l2norm (sums of squares reduced over the block).
  float q[kT], k[kT];
  if (tid < kDk) {
    conv_channel(p, b, slot, int64_t(kh) * kDk + tid, q);
    conv_channel(p, b, slot, int64_t(p.H + kh) * kDk + tid, k);
  }
#pragma unroll
  for (int t = 0; t < kT; ++t) {
    if (t >= T) break;
    const float sq = warp_sum(tid < kDk ? q[t] * q[t] : 0.0f);
    const float sk = warp_sum(tid < kDk ? k[t] * k[t] : 0.0f);
    if (lane == 0) s_partial[0][t][warp] = sq, s_partial[1][t][warp] = sk;
  }
  // v channels of this block's rows.
  if (tid < kBV) {
    float v[kT];
    conv_channel(p, b, slot, 2 * int64_t(p.H) * kDk + int64_t(hv) * p.d_v + v0 + tid, v);
#pragma unroll
    for (int t = 0; t < kT; ++t)
      if (t < T) s_v[t][tid] = v[t];
  }
  __syncthreads();
  if (tid < kDk) {
#pragma unroll
    for (int t = 0; t < kT; ++t) {
      if (t >= T) break;
      float nq = 0.0f, nk = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) nq += s_partial[0][t][w], nk += s_partial[1][t][w];
      s_q[t][tid] = q[t] * (rsqrtf(nq + kL2NormEps) * p.scale);
      s_k[t][tid] = k[t] * rsqrtf(nk + kL2NormEps);
    }
  }
  __syncthreads();

  // Groups of kGroup rows per warp: the next group's loads are issued before this group's math.
  // Per token, per row: row *= decay;  v_hat = <row, k>;  delta = beta (v - v_hat);
  // row += delta k;  o = <row, q>.  The rows' reductions run side by side.
  for (int g0 = 0; g0 < kRows; g0 += kGroup) {
    if (g0 + kGroup < kRows) {
#pragma unroll
      for (int u = 0; u < kGroup; ++u)
        RowFragment<Ts, kPerLane>::load(rows_ptr + (g0 + kGroup + u) * kDk, next[u]);
    }
    const int r_base = warp * kRows + g0;
    for (int t = 0; t < T; ++t) {
      float kk[kPerLane], qq[kPerLane], dd[kPerLane];
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        kk[j] = s_k[t][lane * kPerLane + j];
        qq[j] = s_q[t][lane * kPerLane + j];
        dd[j] = kKda ? s_decay[t][lane * kPerLane + j] : s_gdn_decay[t];
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
      const float beta = s_beta[t];
#pragma unroll
      for (int u = 0; u < kGroup; ++u) {
        const float delta = beta * (s_v[t][r_base + u] - dot[u]);
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
      if (lane < kGroup)
        store_any(p.o, p.o_bf16, ((int64_t(b) * T + t) * p.HV + hv) * p.d_v + v0 + r_base + lane,
                  mine);
      if (!p.commit) {
        Ts* step = static_cast<Ts*>(p.step_states) +
                   (((int64_t(b) * T + t) * p.HV + hv) * p.d_v + v0 + r_base) * kDk +
                   lane * kPerLane;
#pragma unroll
        for (int u = 0; u < kGroup; ++u) RowFragment<Ts, kPerLane>::store(step + u * kDk, row[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kGroup; ++u) {
      if (p.commit) RowFragment<Ts, kPerLane>::store(rows_ptr + (g0 + u) * kDk, row[u]);
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) row[u][j] = next[u][j];
    }
  }
}

/// Advances each sequence's conv window by n tokens (n = T on decode, accepted[b] on commit):
/// the new K-1 entries are the last K-1 of [old window | the first n new inputs]. One thread per
/// channel reads everything it needs before writing, so the update is in place and race-free.
__global__ void conv_advance_kernel(const void* qkv, bool qkv_bf16, void* conv_state,
                                    bool conv_bf16, const int32_t* slots, const int32_t* accepted,
                                    int64_t num_slots, int64_t conv_dim, int T, int K) {
  // Launched as a programmatic dependent of the step kernel: resident early, it waits here for
  // the step kernel to complete (it never triggers early), so every window read precedes the write.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int b = blockIdx.y;
  const int64_t ch = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= conv_dim) return;
  const int slot = slots[b];
  if (slot < 0 || slot >= num_slots) return;
  const int n = accepted ? accepted[b] : T;
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

template <typename Ts, bool kKda, int kDk, int kT>
void launch_step_tokens(const StepArgs& args, int B, int bv, cudaStream_t stream) {
  const dim3 grid(unsigned(args.HV * args.n_vsplit), unsigned(B));
  switch (bv) {
    case 8: decode_step_kernel<Ts, kKda, kDk, 8, kT><<<grid, kThreads, 0, stream>>>(args); break;
    case 16: decode_step_kernel<Ts, kKda, kDk, 16, kT><<<grid, kThreads, 0, stream>>>(args); break;
    default: decode_step_kernel<Ts, kKda, kDk, 64, kT><<<grid, kThreads, 0, stream>>>(args); break;
  }
}

template <typename Ts, bool kKda, int kDk>
void launch_step(const StepArgs& args, int B, int bv, cudaStream_t stream) {
  if (args.T == 1) {
    launch_step_tokens<Ts, kKda, kDk, 1>(args, B, bv, stream);
  } else {
    launch_step_tokens<Ts, kKda, kDk, kMaxT>(args, B, bv, stream);
  }
}

template <typename Ts, bool kKda>
Status dispatch_head_dim(const StepArgs& args, int d_k, int B, int bv, cudaStream_t stream) {
  switch (d_k) {
    case 64: launch_step<Ts, kKda, 64>(args, B, bv, stream); return ok_status();
    case 128: launch_step<Ts, kKda, 128>(args, B, bv, stream); return ok_status();
    default:
      return unsupported("gated_delta_rule_decode (CUDA): d_k = ", d_k, ", supported: 64, 128");
  }
}

}  // namespace

Status gated_delta_rule_decode(const GatedDeltaRuleDecodeParams& p, Stream stream_handle) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_handle.handle);
  const int T = int(p.tokens_per_seq);
  const int B = int(p.qkv.size(0) / T);
  const int HV = int(p.state_pool.size(1)), d_v = int(p.state_pool.size(2)),
            d_k = int(p.state_pool.size(3));
  const int64_t conv_dim = p.qkv.size(1);
  const int H = int((conv_dim - int64_t(HV) * d_v) / (2 * d_k));
  const bool kda = p.a.ndim() == 3;
  // Enough blocks to fill 132 SMs several times over: split small batches finely.
  const int64_t heads = int64_t(B) * HV;
  const int bv = heads >= 512 && d_v % 64 == 0 ? 64 : heads >= 64 && d_v % 16 == 0 ? 16 : 8;
  if (d_v % bv != 0)
    return unsupported("gated_delta_rule_decode (CUDA): d_v = ", d_v, " is not a multiple of 8");
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
  args.d_v = d_v;
  args.group = HV / H;
  args.n_vsplit = d_v / bv;
  args.scale = p.scale > 0.0f ? p.scale : 1.0f / sqrtf(float(d_k));
  args.commit = p.commit;

  const bool bf16_state = p.state_pool.dtype() == DType::kBF16;
  Status s = bf16_state ? (kda ? dispatch_head_dim<uint16_t, true>(args, d_k, B, bv, stream)
                               : dispatch_head_dim<uint16_t, false>(args, d_k, B, bv, stream))
                        : (kda ? dispatch_head_dim<float, true>(args, d_k, B, bv, stream)
                               : dispatch_head_dim<float, false>(args, d_k, B, bv, stream));
  HYLA_RETURN_IF_ERROR(s);
  HYLA_CUDA_CHECK(cudaGetLastError());

  if (p.commit) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(unsigned((conv_dim + 255) / 256), unsigned(B));
    config.blockDim = dim3(256);
    config.stream = stream;
    cudaLaunchAttribute dependent{};
    dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    dependent.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &dependent;
    config.numAttrs = 1;
    HYLA_CUDA_CHECK(cudaLaunchKernelEx(&config, conv_advance_kernel, p.qkv.raw(), args.qkv_bf16,
                                       p.conv_state.raw(), args.conv_bf16, args.slots,
                                       static_cast<const int32_t*>(nullptr), args.num_slots,
                                       conv_dim, T, args.K));
  }
  if (p.norm_weight.defined()) {
    const int64_t rows = int64_t(B) * T * HV;
    const int warps_per_block = 8;
    gated_norm_kernel<<<unsigned((rows + warps_per_block - 1) / warps_per_block),
                        32 * warps_per_block, 0, stream>>>(
        p.o.raw(), args.o_bf16, p.norm_gate.raw(), p.norm_gate.dtype() == DType::kBF16,
        p.norm_weight.data<float>(), args.slots, args.num_slots, rows, T * HV, d_v, p.norm_eps,
        p.norm_act == GateActivation::kSilu);
    HYLA_CUDA_CHECK(cudaGetLastError());
  }
  return ok_status();
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
