// CUDA warp-autonomous decode step (T = 1) of gated_delta_rule_decode (DecodeKernel::kWarp).
//
// The block kernel computes a key head's 2 d_k q/k conv channels once per block, spread over its
// threads, and shares them through shared memory behind a block barrier. Here every warp
// computes, for its lanes' own columns, the q/k conv itself: lane l holds columns [l n, l n + n)
// (n = d_k / 32) of its rows, so it needs exactly the q and k channels of those columns. No shared
// memory, no block barrier, but every warp loads its 2 d_k channels' weights and windows. Measured
// (docs/perf.md, 2026-11-30): ~6% faster than the block kernel at B=1 without overlap (the
// entry's choice there), even with it overlapped, 20-35% slower at B >= 64 (never picked there).
// The l2 norms are not applied before the rows: with raw conv outputs q, k,
//   <row, k^> = <row, k> / |k|,  row += beta (v - <row, k^>) k^,  o = scale <row, q> / |q|,
// so |q|^2 and |k|^2 are summed in the same warp reduction as the rows' <row, k>.
// The v channel of row u is computed by lane u and reaches the others by one shuffle.
// Windows: a v window is read by one warp and advanced by it at once; the q/k windows are read by
// every warp of the key head's blocks, so they are advanced by warp 0 of the cluster's rank 0 once
// every warp has read them (a cluster barrier; within one block a named barrier).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "kernels/cuda/gated_delta_rule_decode_common.cuh"

namespace hyla::kernels::cuda::decode_detail {

namespace {

/// kN (2 or 4) consecutive floats from element i, as one vector load; i kN-aligned (as below).
template <int kN>
__device__ __forceinline__ void load_f32_vec(const float* p, int64_t i, float* x) {
  static_assert(kN == 2 || kN == 4);
  if constexpr (kN == 4) {
    const float4 v = *reinterpret_cast<const float4*>(p + i);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  } else {
    const float2 v = *reinterpret_cast<const float2*>(p + i);
    x[0] = v.x, x[1] = v.y;
  }
}
/// kN (1, 2 or 4) consecutive f32 or bf16 elements from element i, as one vector load, kept as
/// loaded: kN words, f32 bits, or bf16 pairs packed (the one bf16 of kN = 1 in the low half);
/// vec_to_float converts them where they are used (see load_bits: the loads stay in flight
/// together). i kN-aligned (checked by the host: base pointers 16-byte aligned, every run starts
/// at a multiple of kN).
template <int kN>
__device__ __forceinline__ void load_vec_bits(const void* p, bool is_bf16, int64_t i,
                                              uint32_t (&w)[kN]) {
  static_assert(kN == 1 || kN == 2 || kN == 4);
  const char* at = static_cast<const char*>(p) + (is_bf16 ? 2 * i : 4 * i);
  if constexpr (kN == 1) {
    w[0] = load_bits(p, is_bf16, i);
  } else if constexpr (kN == 2) {
    asm("{\n\t.reg .pred bf;\n\tsetp.ne.b32 bf, %2, 0;\n\t@bf ld.global.b32 %0, [%3];\n\t"
        "@!bf ld.global.v2.b32 {%0, %1}, [%3];\n\t}"
        : "=r"(w[0]), "=r"(w[1])
        : "r"(int(is_bf16)), "l"(at)
        : "memory");
  } else {
    asm("{\n\t.reg .pred bf;\n\tsetp.ne.b32 bf, %4, 0;\n\t@bf ld.global.v2.b32 {%0, %1}, [%5];\n\t"
        "@!bf ld.global.v4.b32 {%0, %1, %2, %3}, [%5];\n\t}"
        : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
        : "r"(int(is_bf16)), "l"(at)
        : "memory");
  }
}
template <int kN>
__device__ __forceinline__ void vec_to_float(const uint32_t (&w)[kN], bool is_bf16, float* x) {
#pragma unroll
  for (int e = 0; e < kN; ++e) {
    if constexpr (kN == 1) {
      x[e] = bits_to_float(w[e], is_bf16);
    } else {
      const uint32_t pair = w[e / 2];
      x[e] = __uint_as_float(is_bf16 ? (e % 2 ? pair & 0xffff0000u : pair << 16) : w[e]);
    }
  }
}
template <int kN>
__device__ __forceinline__ void store_vec(void* p, bool is_bf16, int64_t i, const float* x) {
  static_assert(kN == 1 || kN == 2 || kN == 4);
  if constexpr (kN == 1) {
    store_any(p, is_bf16, i, x[0]);
  } else if (is_bf16) {
    uint16_t* q = static_cast<uint16_t*>(p) + i;
    const uint32_t lo = uint32_t(float_to_bf16_bits(x[0])) | uint32_t(float_to_bf16_bits(x[1]))
                                                                 << 16;
    if constexpr (kN == 4) {
      const uint32_t hi = uint32_t(float_to_bf16_bits(x[2])) | uint32_t(float_to_bf16_bits(x[3]))
                                                                   << 16;
      *reinterpret_cast<uint2*>(q) = make_uint2(lo, hi);
    } else {
      *reinterpret_cast<uint32_t*>(q) = lo;
    }
  } else {
    float* q = static_cast<float*>(p) + i;
    if constexpr (kN == 4) {
      *reinterpret_cast<float4*>(q) = make_float4(x[0], x[1], x[2], x[3]);
    } else {
      *reinterpret_cast<float2*>(q) = make_float2(x[0], x[1]);
    }
  }
}

constexpr int kTaps = 4;  // the conv kernel this kernel takes (every supported model's)

/// kN consecutive conv channels from channel ch: weights, the new inputs and the 3-entry windows as
/// loaded (load_vec_bits; the windows as 3 vectors of kN entries: channel j's window is entries
/// 3 j .. 3 j + 2 of them in a row, oldest first).
template <int kN>
struct ConvRun {
  float w[kN][kTaps];
  uint32_t x[kN];
  uint32_t win[3][kN];
};
/// The inputs and windows of r as floats.
template <int kN>
__device__ __forceinline__ void run_floats(const StepArgs& p, const ConvRun<kN>& r, float (&x)[kN],
                                           float (&win)[3 * kN]) {
  vec_to_float(r.x, p.qkv_bf16, x);
#pragma unroll
  for (int c = 0; c < 3; ++c) vec_to_float(r.win[c], p.conv_bf16, win + c * kN);
}
template <int kN>
__device__ __forceinline__ void load_run_weights(const StepArgs& p, int64_t ch, ConvRun<kN>& r) {
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    const float4 w = reinterpret_cast<const float4*>(p.conv_w)[ch + j];
    r.w[j][0] = w.x, r.w[j][1] = w.y, r.w[j][2] = w.z, r.w[j][3] = w.w;
  }
}
template <int kN>
__device__ __forceinline__ void load_run_window(const StepArgs& p, int slot, int64_t ch,
                                                ConvRun<kN>& r) {
  const int64_t at = (int64_t(slot) * p.conv_dim + ch) * 3;  // 3 kN entries, kN-aligned
#pragma unroll
  for (int c = 0; c < 3; ++c) load_vec_bits<kN>(p.conv_state, p.conv_bf16, at + c * kN, r.win[c]);
}
/// y[j] = silu(conv of channel j).
template <int kN>
__device__ __forceinline__ void conv_run(const StepArgs& p, const ConvRun<kN>& r, float (&y)[kN]) {
  float x[kN], win[3 * kN];
  run_floats(p, r, x, win);
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    float acc = r.w[j][0] * win[3 * j];  // the window's taps first: the new input comes last
#pragma unroll
    for (int t = 1; t < 3; ++t) acc = fmaf(r.w[j][t], win[3 * j + t], acc);
    y[j] = silu(fmaf(r.w[j][3], x[j], acc));
  }
}
/// The advanced windows (the last 3 of [window | new]) back to the pool.
template <int kN>
__device__ __forceinline__ void store_run_window(const StepArgs& p, int slot, int64_t ch,
                                                 const ConvRun<kN>& r) {
  float x[kN], win[3 * kN], next[3 * kN];
  run_floats(p, r, x, win);
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    next[3 * j] = win[3 * j + 1];
    next[3 * j + 1] = win[3 * j + 2];
    next[3 * j + 2] = x[j];
  }
  const int64_t at = (int64_t(slot) * p.conv_dim + ch) * 3;
#pragma unroll
  for (int c = 0; c < 3; ++c) store_vec<kN>(p.conv_state, p.conv_bf16, at + c * kN, next + c * kN);
}

/// One block: kWarps warps of kRw rows each, rows [rank kR, (rank + 1) kR) of key head kh
/// (counted over its group value heads; kR = kWarps kRw), sequence blockIdx.y; block rank r of the
/// key head's cluster of p.cluster blocks. A warp's rows lie in one value head (kRw divides d_k).
/// kOverlap: as decode_step_kernel's (inputs after griddepcontrol.wait). T = 1; d_v == kDk.
template <typename Ts, bool kKda, int kDk, int kRw, int kWarps, bool kOverlap>
__global__ void __launch_bounds__(32 * kWarps)
    decode_warp_kernel(const __grid_constant__ StepArgs p) {
  constexpr int kN = kDk / 32;  // columns per lane
  constexpr int kR = kRw * kWarps;
  static_assert((kN == 2 || kN == 4) && kRw >= 1 && kRw <= 32 && kDk % kRw == 0);
  const int b = blockIdx.y;
  const int kh = blockIdx.x / p.cluster;
  const int rank = blockIdx.x % p.cluster;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int head_row = rank * kR + warp * kRw;  // the warp's first row in the key head
  const int hv = kh * p.group + head_row / kDk;
  const int64_t rows = int64_t(kh) * p.group * kDk + head_row;  // ... in a [HV d_v] array
  const int64_t q_ch = int64_t(kh) * kDk + lane * kN, k_ch = q_ch + int64_t(p.H) * kDk;
  const bool v_lane = lane < kRw;  // lane u computes row u's v channel
  const int64_t v_ch = 2 * int64_t(p.H) * kDk + rows + (v_lane ? lane : 0);

  trigger_dependents(p, 0);  // no-op without a dependent
  const int slot = p.slots[b];

  // Constants, then (not overlapped) the inputs, while the slot id is on its way.
  ConvRun<kN> q_in, k_in;
  ConvRun<1> v_in;
  load_run_weights(p, q_ch, q_in);
  load_run_weights(p, k_ch, k_in);
  load_run_weights(p, v_ch, v_in);
  const float a_scale = expf(p.A_log[hv]);
  constexpr int kGates = kKda ? kN : 1;  // KDA: a decay per column; GDN: one per head
  float bias[kGates];
  uint32_t a_in[kGates], b_in[1];  // as loaded (load_vec_bits), converted at the gates
  if constexpr (kKda) {
    load_f32_vec<kN>(p.dt_bias, int64_t(hv) * kDk + lane * kN, bias);
  } else {
    bias[0] = p.dt_bias[hv];
  }
  auto load_inputs = [&] {
    const int64_t row = int64_t(b) * p.conv_dim;
    load_vec_bits<kN>(p.qkv, p.qkv_bf16, row + q_ch, q_in.x);
    load_vec_bits<kN>(p.qkv, p.qkv_bf16, row + k_ch, k_in.x);
    load_vec_bits<1>(p.qkv, p.qkv_bf16, row + v_ch, v_in.x);
    if constexpr (kKda) {
      load_vec_bits<kN>(p.a, p.a_bf16, (int64_t(b) * p.HV + hv) * kDk + lane * kN, a_in);
    } else {
      load_vec_bits<1>(p.a, p.a_bf16, int64_t(b) * p.HV + hv, a_in);
    }
    load_vec_bits<1>(p.b, p.b_bf16, int64_t(b) * p.HV + hv, b_in);
  };
  if constexpr (!kOverlap) load_inputs();
  if (slot < 0 || slot >= p.num_slots) return;  // padding: the whole cluster returns (same b)

  // The rows and the windows (overlapped: then the wait and the inputs).
  Ts* const rows_ptr =
      static_cast<Ts*>(p.state) + (int64_t(slot) * p.HV * kDk + rows) * kDk + lane * kN;
  float row[kRw][kN];
#pragma unroll
  for (int u = 0; u < kRw; ++u) RowFragment<Ts, kN>::load(rows_ptr + u * kDk, row[u]);
  load_run_window(p, slot, q_ch, q_in);
  load_run_window(p, slot, k_ch, k_in);
  load_run_window(p, slot, v_ch, v_in);
  if constexpr (kOverlap) {
    asm volatile("griddepcontrol.wait;" ::: "memory");  // the kernel before has finished
    trigger_dependents(p, 1);
    load_inputs();
  }

  // Conv + SiLU of the lane's q, k columns and (lane u) row u's v; the gates.
  float q[kN], k[kN], v[1];
  conv_run(p, q_in, q);
  conv_run(p, k_in, k);
  conv_run(p, v_in, v);
  // This warp has read its windows (each went into a conv output above): the writer of the q/k
  // windows may go ahead once every warp of the key head has arrived. Relaxed: see
  // decode_step_kernel (a release fence would wait for the row loads in flight).
  const bool writer = rank == 0 && warp == 0;
  if (p.cluster > 1) {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  } else if (kWarps > 1 && !writer) {
    asm volatile("bar.arrive 1, %0;" ::"n"(32 * kWarps) : "memory");
  }
  float a_x[kGates], b_x[1], decay[kGates];
  vec_to_float(a_in, p.a_bf16, a_x);
  vec_to_float(b_in, p.b_bf16, b_x);
#pragma unroll
  for (int j = 0; j < kGates; ++j) {
    decay[j] = expf(gate_log_decay(a_scale, a_x[j] + bias[j], kKda && p.safe_gate, p.lower_bound));
  }
  const float beta = sigmoid(b_x[0]);

  float dd[kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) dd[j] = decay[kKda ? j : 0];
  const float mine = delta_rule_rows(row, q, k, dd, beta, p.scale, [&](int u) {
    return __shfl_sync(0xffffffffu, v[0], u);  // row u's v, from lane u
  });
  if (v_lane) store_any(p.o, p.o_bf16, int64_t(b) * p.HV * kDk + rows + lane, mine);

  if (!p.commit) {  // verify of one token: the state goes to step_states, the pools stay
    Ts* const step =
        static_cast<Ts*>(p.step_states) + (int64_t(b) * p.HV * kDk + rows) * kDk + lane * kN;
#pragma unroll
    for (int u = 0; u < kRw; ++u) RowFragment<Ts, kN>::store(step + u * kDk, row[u]);
    if (p.cluster > 1) {
      if (writer) asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    } else if (kWarps > 1 && writer) {
      asm volatile("bar.sync 1, %0;" ::"n"(32 * kWarps) : "memory");
    }
    return;
  }
#pragma unroll
  for (int u = 0; u < kRw; ++u) RowFragment<Ts, kN>::store(rows_ptr + u * kDk, row[u]);
  if (v_lane) store_run_window(p, slot, v_ch, v_in);
  if (!writer) return;  // (arrived above; an exited thread holds no barrier up)
  if (p.cluster > 1) {
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
  } else if (kWarps > 1) {
    asm volatile("bar.sync 1, %0;" ::"n"(32 * kWarps) : "memory");
  }
  store_run_window(p, slot, q_ch, q_in);
  store_run_window(p, slot, k_ch, k_in);
}

template <typename Ts, bool kKda, int kDk, int kRw, int kWarps, bool kOverlap>
Status launch_warp_kernel(const StepArgs& args, int B, cudaStream_t stream) {
  return launch_decode_grid<decode_warp_kernel<Ts, kKda, kDk, kRw, kWarps, kOverlap>>(
      args, B, kWarps, kOverlap, stream);
}

template <typename Ts, bool kKda, int kDk, int kRw, int kWarps>
Status launch_warp_overlap(const StepArgs& args, int B, cudaStream_t stream) {
  return args.overlap ? launch_warp_kernel<Ts, kKda, kDk, kRw, kWarps, true>(args, B, stream)
                      : launch_warp_kernel<Ts, kKda, kDk, kRw, kWarps, false>(args, B, stream);
}

template <typename Ts, bool kKda, int kDk>
Status launch_warp_rows(const StepArgs& args, int B, int rows_per_block, int warps,
                        cudaStream_t stream) {
  switch (rows_per_block * 100 + warps) {
    case 802: return launch_warp_overlap<Ts, kKda, kDk, 4, 2>(args, B, stream);
    case 1602: return launch_warp_overlap<Ts, kKda, kDk, 8, 2>(args, B, stream);
    case 1604: return launch_warp_overlap<Ts, kKda, kDk, 4, 4>(args, B, stream);
    case 1608: return launch_warp_overlap<Ts, kKda, kDk, 2, 8>(args, B, stream);
    case 3204: return launch_warp_overlap<Ts, kKda, kDk, 8, 4>(args, B, stream);
    case 3208: return launch_warp_overlap<Ts, kKda, kDk, 4, 8>(args, B, stream);
    case 6408: return launch_warp_overlap<Ts, kKda, kDk, 8, 8>(args, B, stream);
    case 12816: return launch_warp_overlap<Ts, kKda, kDk, 8, 16>(args, B, stream);
    default:
      return unsupported("gated_delta_rule_decode (CUDA): no warp tiling of ", rows_per_block,
                         " rows per block with ", warps, " warps");
  }
}

}  // namespace

template <typename Ts, bool kKda>
Status launch_warp(const StepArgs& args, int d_k, int B, int rows_per_block, int warps,
                   cudaStream_t stream) {
  switch (d_k) {
    case 64: return launch_warp_rows<Ts, kKda, 64>(args, B, rows_per_block, warps, stream);
    case 128: return launch_warp_rows<Ts, kKda, 128>(args, B, rows_per_block, warps, stream);
    default:
      return unsupported("gated_delta_rule_decode (CUDA): warp kernel for d_k = ", d_k,
                         ", supported: 64, 128");
  }
}

template Status launch_warp<float, false>(const StepArgs&, int, int, int, int, cudaStream_t);
template Status launch_warp<float, true>(const StepArgs&, int, int, int, int, cudaStream_t);
template Status launch_warp<uint16_t, false>(const StepArgs&, int, int, int, int, cudaStream_t);
template Status launch_warp<uint16_t, true>(const StepArgs&, int, int, int, int, cudaStream_t);

}  // namespace hyla::kernels::cuda::decode_detail
