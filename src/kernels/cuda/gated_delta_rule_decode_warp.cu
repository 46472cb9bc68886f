// CUDA one-warp decode step (T = 1): the small-batch kernel of gated_delta_rule_decode (tiling
// {8 rows, 1 warp}) and the programmatic dependent kernel that advances its q/k conv windows.
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "kernels/cuda/gated_delta_rule_decode_common.cuh"

namespace hyla::kernels::cuda::decode_detail {

namespace {

/// Decode (T = 1) by independent warps: one block = one warp = kWarpRows state rows of one value
/// head, with no barrier at all. Lane l owns key channels [l kPerLane, (l + 1) kPerLane): it
/// computes the conv of exactly the q and k channels it multiplies, so the l2 norms are warp sums
/// and q, k never leave registers; lanes 0..7 compute the rows' v channels (broadcast by shuffles)
/// and advance their windows (this warp alone reads them); the gates come from registers. The q/k
/// windows are read by every warp of the key head: the programmatic dependent kernel
/// conv_qk_advance_kernel advances them once every block has signalled (launch_dependents) that
/// its reads are done. commit = false (verify with one token): the state goes to step_states and
/// no window is touched.
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
  if (ch < qk_channels && slot >= 0 && slot < num_slots)
    advance_window(qkv, qkv_bf16, conv_state, conv_bf16, b, slot, conv_dim, ch, /*n=*/1, /*T=*/1,
                   K);
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

}  // namespace

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

template Status launch_warps<float, false, 64>(const StepArgs&, int, cudaStream_t);
template Status launch_warps<float, false, 128>(const StepArgs&, int, cudaStream_t);
template Status launch_warps<float, true, 64>(const StepArgs&, int, cudaStream_t);
template Status launch_warps<float, true, 128>(const StepArgs&, int, cudaStream_t);
template Status launch_warps<uint16_t, false, 64>(const StepArgs&, int, cudaStream_t);
template Status launch_warps<uint16_t, false, 128>(const StepArgs&, int, cudaStream_t);
template Status launch_warps<uint16_t, true, 64>(const StepArgs&, int, cudaStream_t);
template Status launch_warps<uint16_t, true, 128>(const StepArgs&, int, cudaStream_t);

}  // namespace hyla::kernels::cuda::decode_detail
