// CUDA warp-autonomous decode step (T = 1) of gated_delta_rule_decode (DecodeKernel::kWarp).
//
// The block kernel computes a key head's 2 d_k q/k conv channels once per block, spread over its
// threads, and shares them through shared memory behind a block barrier. Here every warp
// computes, for its lanes' own columns, the q/k conv itself: lane l holds columns [l n, l n + n)
// (n = d_k / 32) of its rows, so it needs exactly the q and k channels of those columns. No shared
// memory, no block barrier, but every warp loads its 2 d_k channels' weights and windows. The
// entry takes it below 128 units without overlap, where it measured faster than the block kernel;
// at large batches it is slower (docs/perf-history.md, "GPU decode").
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
#include "kernels/cuda/gated_delta_rule_decode_vec.cuh"

namespace hyla::kernels::cuda::decode_detail {

namespace {

/// One block: kWarps warps of kRw rows each, rows [rank kR, (rank + 1) kR) of key head kh
/// (counted over its group value heads; kR = kWarps kRw), sequence blockIdx.y; block rank r of the
/// key head's cluster of p.cluster blocks. A warp's rows lie in one value head (kRw divides d_k).
/// Never overlapped (the entry takes it without overlap_previous only: decode_tiling_overlaps).
/// T = 1; d_v == kDk.
template <typename Ts, bool kKda, int kDk, int kRw, int kWarps>
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

  // Constants, then the inputs, while the slot id is on its way.
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
    const int64_t row = int64_t(b) * p.qkv_row;
    load_vec_bits<kN>(p.qkv, p.qkv_bf16, row + q_ch, q_in.x);
    load_vec_bits<kN>(p.qkv, p.qkv_bf16, row + k_ch, k_in.x);
    load_vec_bits<1>(p.qkv, p.qkv_bf16, row + v_ch, v_in.x);
    if constexpr (kKda) {
      load_vec_bits<kN>(p.a, p.a_bf16, int64_t(b) * p.a_row + hv * kDk + lane * kN, a_in);
    } else {
      load_vec_bits<1>(p.a, p.a_bf16, int64_t(b) * p.a_row + hv, a_in);
    }
    load_vec_bits<1>(p.b, p.b_bf16, int64_t(b) * p.b_row + hv, b_in);
  };
  load_inputs();
  if (slot < 0 || slot >= p.num_slots) return;  // padding: the whole cluster returns (same b)

  // The rows and the windows.
  Ts* const rows_ptr =
      static_cast<Ts*>(p.state) + (int64_t(slot) * p.HV * kDk + rows) * kDk + lane * kN;
  float row[kRw][kN];
#pragma unroll
  for (int u = 0; u < kRw; ++u) RowFragment<Ts, kN>::load(rows_ptr + u * kDk, row[u]);
  load_run_window(p, slot, q_ch, q_in);
  load_run_window(p, slot, k_ch, k_in);
  load_run_window(p, slot, v_ch, v_in);

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

template <typename Ts, bool kKda, int kDk, int kRw, int kWarps>
Status launch_warp_kernel(const StepArgs& args, int B, cudaStream_t stream) {
  return launch_decode_grid<decode_warp_kernel<Ts, kKda, kDk, kRw, kWarps>>(args, B, kWarps, false,
                                                                            stream);
}

template <typename Ts, bool kKda, int kDk>
Status launch_warp_rows(const StepArgs& args, int B, int rows_per_block, int warps,
                        cudaStream_t stream) {
  switch (rows_per_block * 100 + warps) {
    case 1602: return launch_warp_kernel<Ts, kKda, kDk, 8, 2>(args, B, stream);
    case 1604: return launch_warp_kernel<Ts, kKda, kDk, 4, 4>(args, B, stream);
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
