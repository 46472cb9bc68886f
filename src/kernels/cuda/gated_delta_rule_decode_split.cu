// CUDA two-kernel decode step (T = 1) of gated_delta_rule_decode (DecodeKernel::kSplit; needs
// GatedDeltaRuleDecodeParams::workspace, a conv of 4 taps and 16-byte aligned tensors). Why two
// kernels: an in-place copy of the state runs fastest in small blocks with few bytes in flight
// (4 or 8 rows per block, docs/perf-history.md, "GPU decode"), but a small block cannot afford
// the key head's q/k conv of its own. So:
//   decode_prep_kernel, one block per (sequence, key head): the q/k conv outputs (raw, before
//     the l2 norms), the key head's v conv outputs, the decays and beta into the workspace; the
//     conv windows advanced in place (commit); lets its dependent launch at its start.
//   decode_rows_kernel, its programmatic dependent, kSplitRows rows of one value head per block
//     of kSplitWarps warps: the slot id and the state rows loaded before griddepcontrol.wait
//     (nothing the prep kernel writes), then the prepared values, delta_rule_rows, the rows stored
//     back (commit) or to step_states (verify with one token).
// Where the time goes (ncu: the prep a few percent, the rows near DRAM peak): docs/perf-history.md,
// "GPU decode".
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "kernels/cuda/gated_delta_rule_decode_common.cuh"
#include "kernels/cuda/gated_delta_rule_decode_vec.cuh"

namespace hyla::kernels::cuda::decode_detail {

namespace {

constexpr int kPrepThreads = 128;

/// Channel c of key head kh's [q | k | v of its group value heads] in qkv / the conv pool, and
/// where its output goes in the sequence's workspace.
struct PrepChannel {
  int64_t ch, ws;
};
template <int kDk>
__device__ __forceinline__ PrepChannel prep_channel(const StepArgs& p,
                                                    const DecodeWorkspaceLayout& l, int kh, int c) {
  if (c < 2 * kDk)
    return {(c < kDk ? 0 : int64_t(p.H) * kDk) + int64_t(kh) * kDk + c % kDk,
            l.qk + int64_t(kh) * 2 * kDk + c};
  const int64_t head_rows = int64_t(p.group) * kDk, cv = c - 2 * kDk;
  return {2 * int64_t(p.H) * kDk + kh * head_rows + cv, l.v + kh * head_rows + cv};
}

/// One thread per run of kPrepRun consecutive channels (of the key head's 2 d_k + group d_v), all
/// of its loads as vectors and in flight together (load_vec_bits), then its conv: a channel at a
/// time, each bf16 converted at its load, is latency-bound (docs/perf-history.md, "GPU decode").
constexpr int kPrepRun = 4;

template <bool kKda, int kDk>
__global__ void __launch_bounds__(kPrepThreads)
    decode_prep_kernel(const __grid_constant__ StepArgs p) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  constexpr int kN = kPrepRun;
  const int kh = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  const int slot = p.slots[b];
  if (slot < 0 || slot >= p.num_slots) return;
  const DecodeWorkspaceLayout& l = p.workspace_layout;
  float* const ws = p.workspace + int64_t(b) * l.floats;
  const int head_rows = p.group * kDk;
  const int runs = (2 * kDk + head_rows) / kN;
  for (int r = tid; r < runs; r += kPrepThreads) {
    const PrepChannel pc = prep_channel<kDk>(p, l, kh, r * kN);
    ConvRun<kN> in;
    load_run_weights(p, pc.ch, in);
    load_vec_bits<kN>(p.qkv, p.qkv_bf16, int64_t(b) * p.qkv_row + pc.ch, in.x);
    load_run_window(p, slot, pc.ch, in);
    float y[kN];
    conv_run(p, in, y);
    *reinterpret_cast<float4*>(ws + pc.ws) = make_float4(y[0], y[1], y[2], y[3]);
    if (p.commit) store_run_window(p, slot, pc.ch, in);
  }
  // Gates (fp32): GDN one decay per value head, KDA one per (value head, key channel).
  if constexpr (kKda) {
    for (int r = tid; r < head_rows / kN; r += kPrepThreads) {
      const int hv = kh * p.group + r * kN / kDk, c = r * kN % kDk;
      uint32_t f_in[kN];
      load_vec_bits<kN>(p.a, p.a_bf16, int64_t(b) * p.a_row + hv * kDk + c, f_in);
      const float4 bias = *reinterpret_cast<const float4*>(p.dt_bias + hv * kDk + c);
      const float a_scale = expf(p.A_log[hv]);
      float f[kN];
      vec_to_float(f_in, p.a_bf16, f);
      const float bs[kN] = {bias.x, bias.y, bias.z, bias.w};
      float d[kN];
#pragma unroll
      for (int j = 0; j < kN; ++j)
        d[j] = expf(gate_log_decay(a_scale, f[j] + bs[j], p.safe_gate, p.lower_bound));
      *reinterpret_cast<float4*>(ws + l.decay + int64_t(hv) * kDk + c) =
          make_float4(d[0], d[1], d[2], d[3]);
    }
  }
  if (tid < p.group) {
    const int hv = kh * p.group + tid;
    const uint32_t beta_in = load_bits(p.b, p.b_bf16, int64_t(b) * p.b_row + hv);
    if constexpr (!kKda) {
      const uint32_t a_in = load_bits(p.a, p.a_bf16, int64_t(b) * p.a_row + hv);
      const float x = bits_to_float(a_in, p.a_bf16) + p.dt_bias[hv];
      ws[l.decay + hv] = expf(gate_log_decay(expf(p.A_log[hv]), x, false, 0.0f));
    }
    ws[l.beta + hv] = sigmoid(bits_to_float(beta_in, p.b_bf16));
  }
}

// kSplitRows rows per block of kSplitWarps warps. 1-warp blocks held to 64 registers (32 resident
// per SM): KDA's f32 body needs 68 otherwise (28 per SM), and the occupancy measured faster
// (docs/perf-history.md, "GPU decode"). Spills would cost more than occupancy gains: keep it
// spill-free.
template <typename Ts, bool kKda, int kDk>
__global__ void __launch_bounds__(32 * kSplitWarps, kSplitWarps == 1 ? 32 : 1)
    decode_rows_kernel(const __grid_constant__ StepArgs p) {
  constexpr int kRows = kSplitRows, kWarps = kSplitWarps;
  constexpr int kPerLane = kDk / 32, kRowsPerWarp = kRows / kWarps;
  static_assert(kDk % 32 == 0 && kRows % kWarps == 0 && kDk % kRows == 0);
  trigger_dependents(p, 0);
  const int b = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int slot = p.slots[b];
  if (slot < 0 || slot >= p.num_slots) {
    // Waits all the same: this grid must not end before the prep kernel, whose window writes
    // the work after it on the stream may read.
    asm volatile("griddepcontrol.wait;" ::: "memory");
    return;
  }
  const int first_row = int(blockIdx.x) * kRows;  // over the sequence's HV d_v rows
  const int hv = first_row / kDk, r0 = first_row % kDk + warp * kRowsPerWarp;
  const int64_t head_row0 = int64_t(hv) * kDk + r0;  // the warp's first row in [HV, d_v]
  Ts* const rows_ptr =
      static_cast<Ts*>(p.state) + (int64_t(slot) * p.HV * kDk + head_row0) * kDk + lane * kPerLane;
  float row[kRowsPerWarp][kPerLane];
#pragma unroll
  for (int u = 0; u < kRowsPerWarp; ++u)
    RowFragment<Ts, kPerLane>::load(rows_ptr + u * kDk, row[u]);
  asm volatile("griddepcontrol.wait;" ::: "memory");  // the prep kernel has finished

  const DecodeWorkspaceLayout& l = p.workspace_layout;
  const float* const ws = p.workspace + int64_t(b) * l.floats;
  const int kh = hv / p.group;
  float q[kPerLane], k[kPerLane], dd[kPerLane];
  RowFragment<float, kPerLane>::load(ws + l.qk + int64_t(kh) * 2 * kDk + lane * kPerLane, q);
  RowFragment<float, kPerLane>::load(ws + l.qk + int64_t(kh) * 2 * kDk + kDk + lane * kPerLane, k);
  if constexpr (kKda) {
    RowFragment<float, kPerLane>::load(ws + l.decay + int64_t(hv) * kDk + lane * kPerLane, dd);
  } else {
    const float decay = ws[l.decay + hv];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) dd[j] = decay;
  }
  const float beta = ws[l.beta + hv];
  const float* const v = ws + l.v + head_row0;
  const float mine = delta_rule_rows(row, q, k, dd, beta, p.scale, [&](int u) { return v[u]; });

  Ts* const out = p.commit ? rows_ptr
                           : static_cast<Ts*>(p.step_states) +
                                 (int64_t(b) * p.HV * kDk + head_row0) * kDk + lane * kPerLane;
#pragma unroll
  for (int u = 0; u < kRowsPerWarp; ++u) RowFragment<Ts, kPerLane>::store(out + u * kDk, row[u]);
  if (lane < kRowsPerWarp)
    store_any(p.o, p.o_bf16, int64_t(b) * p.HV * kDk + head_row0 + lane, mine);
}

}  // namespace

template <typename Ts, bool kKda, int kDk>
Status launch_split(const StepArgs& args, int B, cudaStream_t stream) {
  // The prep kernel runs in stream order (overlap_previous is ignored: it writes the workspace,
  // which the kernel before it may be reading if that is the previous split step).
  decode_prep_kernel<kKda, kDk>
      <<<dim3(unsigned(args.H), unsigned(B)), kPrepThreads, 0, stream>>>(args);
  HYLA_CUDA_CHECK(cudaGetLastError());
  const unsigned blocks_per_seq = unsigned(int64_t(args.HV) * kDk / kSplitRows);
  launch_kernel_ex<decode_rows_kernel<Ts, kKda, kDk>>({.grid = dim3(blocks_per_seq, unsigned(B)),
                                                       .block = dim3(32 * kSplitWarps),
                                                       .dependent = true},
                                                      stream, args);
  return ok_status();
}

template Status launch_split<float, false, 64>(const StepArgs&, int, cudaStream_t);
template Status launch_split<float, false, 128>(const StepArgs&, int, cudaStream_t);
template Status launch_split<float, true, 64>(const StepArgs&, int, cudaStream_t);
template Status launch_split<float, true, 128>(const StepArgs&, int, cudaStream_t);
template Status launch_split<uint16_t, false, 64>(const StepArgs&, int, cudaStream_t);
template Status launch_split<uint16_t, false, 128>(const StepArgs&, int, cudaStream_t);
template Status launch_split<uint16_t, true, 64>(const StepArgs&, int, cudaStream_t);
template Status launch_split<uint16_t, true, 128>(const StepArgs&, int, cudaStream_t);

}  // namespace hyla::kernels::cuda::decode_detail
