// CUDA bulk-copy decode step (T = 1) of gated_delta_rule_decode (tiling {32 rows, 8 warps, bulk};
// the entry's choice for 128 to 1023 (sequence, key head) units): whole key heads per block, rows
// through shared memory by cp.async.bulk copies completing on mbarriers.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gated_delta_rule_decode_common.cuh"

namespace hyla::kernels::cuda::decode_detail {

namespace {

template <typename Ts, int kDk>
constexpr uint32_t bulk_smem_bytes() {
  return uint32_t(kBulkStages * kBulkRows * kDk * sizeof(Ts));
}

/// One block per (sequence, key head); its rows go through shared memory in chunks
/// of kBulkRows rows, kBulkStages chunks in flight, each a bulk copy (cp.async.bulk) completing on
/// an mbarrier, so the bytes in flight do not depend on registers. The block's warps update a
/// chunk in shared memory (kBulkRows / kBulkWarps rows each), then one thread writes it back with a
/// bulk store and refills the stage. T = 1 (decode, or verify with one token: the state goes to
/// step_states). Every window is read by this block alone: advanced at once.
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
    mbar_init_fence();
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
      const uint32_t f_in = load_bits(p.a, p.a_bf16, int64_t(b) * p.a_row + hv * kDk + c);
      const float f = bits_to_float(f_in, p.a_bf16) + p.dt_bias[hv * kDk + c];
      const float a_scale = expf(p.A_log[hv]);
      s_decay[h][c] = expf(gate_log_decay(a_scale, f, p.safe_gate, p.lower_bound));
    }
  }
  if (tid < p.group) {  // both loads in flight before either is used (load_bits)
    const int hv = hv0 + tid;
    const uint32_t beta_in = load_bits(p.b, p.b_bf16, int64_t(b) * p.b_row + hv);
    if constexpr (!kKda) {
      const uint32_t a_in = load_bits(p.a, p.a_bf16, int64_t(b) * p.a_row + hv);
      const float x = bits_to_float(a_in, p.a_bf16) + p.dt_bias[hv];
      s_gdn_decay[tid] = expf(gate_log_decay(expf(p.A_log[hv]), x, false, 0.0f));
    }
    s_beta[tid] = sigmoid(bits_to_float(beta_in, p.b_bf16));
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
    fence_proxy_async();
    __syncthreads();
    if (tid == 0) {
      bulk_store(g_out + int64_t(c) * kStageElems, stage, kStageBytes);
      if (c + kBulkStages < chunks) {
        bulk_wait_read<0>();  // stage read out
        mbar_expect_tx(&s_full[st], kStageBytes);
        bulk_load(stage, g_state + int64_t(c + kBulkStages) * kStageElems, kStageBytes,
                  &s_full[st]);
      }
    }
  }
  if (tid == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

}  // namespace

template <typename Ts, bool kKda, int kDk>
Status launch_bulk(const StepArgs& args, int B, cudaStream_t stream) {
  if (args.T != 1)
    return unsupported("gated_delta_rule_decode (CUDA): the bulk-copy tiling takes T = 1, got ",
                       args.T);
  // Bulk copies move 16-byte multiples between 16-byte-aligned addresses (each chunk starts a
  // multiple of its size past the pool's base).
  const auto misaligned = [](const void* ptr) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 != 0;
  };
  if (misaligned(args.state) || (!args.commit && misaligned(args.step_states)))
    return unsupported(
        "gated_delta_rule_decode (CUDA): the bulk-copy tiling needs 16-byte-aligned "
        "state pools");
  auto* kernel = decode_bulk_kernel<Ts, kKda, kDk>;
  constexpr uint32_t smem = bulk_smem_bytes<Ts, kDk>();
  allow_dynamic_smem(kernel, smem);
  kernel<<<dim3(unsigned(args.H), unsigned(B)), 32 * kBulkWarps, smem, stream>>>(args);
  HYLA_CUDA_CHECK(cudaGetLastError());
  return ok_status();
}

template Status launch_bulk<float, false, 64>(const StepArgs&, int, cudaStream_t);
template Status launch_bulk<float, false, 128>(const StepArgs&, int, cudaStream_t);
template Status launch_bulk<float, true, 64>(const StepArgs&, int, cudaStream_t);
template Status launch_bulk<float, true, 128>(const StepArgs&, int, cudaStream_t);
template Status launch_bulk<uint16_t, false, 64>(const StepArgs&, int, cudaStream_t);
template Status launch_bulk<uint16_t, false, 128>(const StepArgs&, int, cudaStream_t);
template Status launch_bulk<uint16_t, true, 64>(const StepArgs&, int, cudaStream_t);
template Status launch_bulk<uint16_t, true, 128>(const StepArgs&, int, cudaStream_t);

}  // namespace hyla::kernels::cuda::decode_detail
