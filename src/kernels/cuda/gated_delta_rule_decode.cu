// CUDA body of the fused decode / verify step and the commit (kernels/gated_delta_rule_decode.h):
// the tilings and the entry, the commit kernels, the gated norm; the block kernel described here
// lives in gated_delta_rule_decode_block.cuh (f32 state pools instantiated here, bf16 ones in
// gated_delta_rule_decode_bf16.cu).
//
// Decode is bound by the state: per (sequence, value head) d_v x d_k fp32 = 64 KiB read and written
// per token. Unit of work: one (sequence, key head), whose `group` value heads' rows are contiguous
// in the pool. The block kernel (decode_step_kernel, any T) gives each thread block rows_per_block
// of those rows (tilings: gated_delta_rule_decode_tiling.h); the blocks of one key head form a
// thread-block cluster, or with arrival counters (GatedDeltaRuleDecodeParams::arrivals) plain
// blocks that count their reads of the q/k windows. Each block:
//   0. issues the loads that do not need the slot id (conv weights and new inputs, gate inputs)
//      while the slot id is on its way;
//   1. issues the loads of its first state rows (registers, 16-byte loads for fp32), so the state
//      bytes are in flight during everything else;
//   2. computes the key head's 2 d_k q/k conv channels (window + SiLU; its threads share them
//      through shared memory), its own rows' v channels and the gates; a v window is advanced at
//      once (no other block reads it), the q/k windows by rank 0 after a cluster barrier, or
//      with counters by the block that arrives last (its atom.inc wraps the counter to zero);
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
#include <iterator>
#include <string>
#ifdef HYLA_DECODE_PROBE
#include <algorithm>
#include <cstdio>
#include <vector>
#endif

#include "core/cuda_check.h"
#include "core/device_memory.h"
#include "kernels/cuda/gated_delta_rule_decode_block.cuh"
#include "kernels/cuda/gated_delta_rule_decode_common.cuh"
#include "kernels/cuda/gated_delta_rule_decode_tiling.h"
#include "kernels/gated_delta_rule_decode.h"

namespace hyla::kernels::cuda {

namespace {

using namespace decode_detail;

/// After a verify call: advances each sequence's conv window by accepted[b] tokens: the new K-1
/// entries are the last K-1 of [old window | the first n new inputs]. One thread per channel reads
/// everything it needs before writing, so the update is in place and race-free.
__global__ void conv_advance_kernel(const void* qkv, bool qkv_bf16, int64_t qkv_row,
                                    void* conv_state, bool conv_bf16, const int32_t* slots,
                                    const int32_t* accepted, int64_t num_slots, int64_t conv_dim,
                                    int T, int K) {
  const int b = blockIdx.y;
  const int64_t ch = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= conv_dim) return;
  const int slot = slots[b];
  if (slot < 0 || slot >= num_slots) return;
  const int n = accepted[b];
  if (n <= 0 || n > T) return;
  advance_window(qkv, qkv_bf16, qkv_row, conv_state, conv_bf16, b, slot, conv_dim, ch, n, T, K);
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

/// Most d_v elements per lane of gated_norm_kernel (d_v <= 128: the decode step takes d_k = d_v of
/// 64 or 128).
constexpr int kNormPerLane = 4;

/// o = weight * rmsnorm(o) * act(gate), one warp per (token, head) row of d_v, skipping padding.
/// The row's o and gate elements are loaded at once (load_bits: in flight together), then used.
/// o is contiguous; gate [B T, HV, d_v] has token rows gate_row elements apart.
__global__ void gated_norm_kernel(void* o, bool o_bf16, const void* gate, bool gate_bf16,
                                  int64_t gate_row, const float* weight, const int32_t* slots,
                                  int64_t num_slots, int64_t rows, int rows_per_seq, int HV,
                                  int d_v, float eps, bool silu_act) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int64_t gate_at = row / HV * gate_row + row % HV * d_v;
  const int slot = slots[row / rows_per_seq];
  if (slot < 0 || slot >= num_slots) return;
  uint32_t o_in[kNormPerLane], g_in[kNormPerLane];
#pragma unroll
  for (int k = 0; k < kNormPerLane; ++k) {
    const int i = lane + 32 * k;
    o_in[k] = g_in[k] = 0u;
    if (i < d_v) {
      o_in[k] = load_bits(o, o_bf16, row * d_v + i);
      g_in[k] = load_bits(gate, gate_bf16, gate_at + i);
    }
  }
  float x[kNormPerLane], ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kNormPerLane; ++k) {
    x[k] = bits_to_float(o_in[k], o_bf16);  // 0 beyond d_v
    ss = fmaf(x[k], x[k], ss);
  }
  const float inv = rsqrtf(warp_sum(ss) / float(d_v) + eps);
#pragma unroll
  for (int k = 0; k < kNormPerLane; ++k) {
    const int i = lane + 32 * k;
    if (i >= d_v) continue;
    const float g = bits_to_float(g_in[k], gate_bf16);
    store_any(o, o_bf16, row * d_v + i, weight[i] * x[k] * inv * (silu_act ? silu(g) : sigmoid(g)));
  }
}

/// The tilings compiled, the ones default_decode_tiling picks for some call: {rows per block, warps
/// per block}, smallest blocks first, then fewer warps; {32, 8, bulk} is decode_bulk_kernel (T = 1
/// only, no cluster); then the warp kernel's and the split kernels' (T = 1 only;
/// gated_delta_rule_decode_warp.cu, _split.cu). Tilings and variants the entry never picks are not
/// compiled (their measurements: docs/perf-history.md, "GPU decode").
constexpr DecodeKernel kWarpKernel = DecodeKernel::kWarp;
constexpr DecodeTiling kTilings[] = {{8, 8},
                                     {16, 8},
                                     {16, 16},
                                     {32, 8},
                                     {64, 4},
                                     {128, 4},
                                     {256, 8},
                                     {kBulkRows, kBulkWarps, DecodeKernel::kBulk},
                                     {16, 2, kWarpKernel},
                                     {16, 4, kWarpKernel},
                                     {8, 1, DecodeKernel::kSplit}};

/// The call's workspace can serve the split kernels: on the state pool's device, 16-byte aligned,
/// large enough (check_gated_delta_rule_decode refuses any other; the explicit-tiling entry may be
/// called without that check).
bool decode_workspace_ok(const GatedDeltaRuleDecodeParams& p) {
  const TensorView& w = p.workspace;
  return w.defined() && w.device() == p.state_pool.device() &&
         reinterpret_cast<uintptr_t>(w.raw()) % 16 == 0 &&
         w.span_bytes() >= gated_delta_rule_decode_workspace_bytes(decode_shape(p));
}

/// The warp kernel reads qkv, the conv weights and windows, the KDA gate inputs and dt_bias and
/// the state rows by vector loads of up to 16 bytes at offsets that are multiples of the vector
/// (the split kernels' prep too).
bool warp_kernel_aligned(const GatedDeltaRuleDecodeParams& p) {
  auto aligned = [](const TensorView& t) {
    return !t.defined() || reinterpret_cast<uintptr_t>(t.raw()) % 16 == 0;
  };
  return aligned(p.qkv) && aligned(p.conv_weight) && aligned(p.conv_state) && aligned(p.a) &&
         aligned(p.dt_bias) && aligned(p.state_pool) && aligned(p.step_states);
}

/// StepArgs::trigger of an overlapped step of `units` (sequence, key head) units, the fastest
/// measured on the H200 (docs/perf-history.md, "GPU decode": every tiling with --overlap at B = 1
/// and 8): below 128 units after the block's own griddepcontrol.wait (launching the next step at
/// once would let it queue its state loads ahead of this step's input loads), else at the start.
int decode_trigger(int64_t units) { return units < 128 ? 1 : 0; }

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
    case DecodeKernel::kSplit: return str_cat("S", tiling.rows_per_block, "w", tiling.warps);
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
  if (tiling.kernel == DecodeKernel::kSplit)  // 8 rows of one value head per 1-warp block
    return (d_v == 64 || d_v == 128) && r == kSplitRows && tiling.warps == kSplitWarps ? 1 : 0;
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
                                   bool overlap, bool warp_kernel_ok, bool counted,
                                   bool workspace_ok) {
  const int64_t units = B * H;
  // Each rule below is the fastest tiling measured on the H200 for its case (GDN H16/HV32 and KDA
  // H32, sweeps of every tiling; the figures are in docs/perf-history.md, "GPU decode").
  // With a workspace (GatedDeltaRuleDecodeParams::workspace), one token, from 1024 units: the
  // split kernels, 8 rows per 1-warp block.
  if (workspace_ok && T == 1 && units >= 1024) {
    const DecodeTiling split{8, 1, DecodeKernel::kSplit};
    if (decode_cluster_size(split, group, d_v) == 1) return split;
  }
  // With arrival counters (GatedDeltaRuleDecodeParams::arrivals; the block tilings then need no
  // cluster), without overlap, below 128 units, T = 1: the block kernel, 16 rows / 16 warps.
  // Overlapped, the counters do not change the choice below.
  if (counted && !overlap && T == 1 && units < 128) {
    const DecodeTiling t{16, 16};
    if (decode_cluster_size(t, group, d_v) >= 2) return t;
  }
  // The same, 128 to 256 units: the block kernel, 32 rows / 8 warps.
  if (counted && !overlap && T == 1 && units >= 128 && units <= 256) {
    const DecodeTiling t{32, 8};
    if (decode_cluster_size(t, group, d_v) >= 2) return t;
  }
  // Overlapped steps (overlap_previous; the dependent launched after the wait below 128 units:
  // decode_trigger):
  //  - below 128 units: the block kernel, 32 rows / 8 warps;
  //  - 128 to 256 units (measured at B=8): 64 rows, 4 warps (bulk does not overlap);
  //  - above: as without overlap (no gain measured from B = 64).
  if (overlap && T == 1) {
    for (const DecodeTiling t : kTilings) {
      const int cluster = decode_cluster_size(t, group, d_v);
      if (cluster == 0 || t.kernel != DecodeKernel::kBlock) continue;
      if (units < 128 && t.rows_per_block == 32 && t.warps == 8) return t;
      if (units >= 128 && units <= 256 && t.rows_per_block == 64 && t.warps == 4) return t;
    }
  }
  // Without overlap, below 128 units and T = 1: the warp kernel, 16 rows per block, 4 warps of 4
  // rows when the key head takes a cluster of 16, else 2 warps of 8.
  if (!overlap && T == 1 && units < 128 && warp_kernel_ok) {
    for (const DecodeTiling t : kTilings) {
      const int cluster = decode_cluster_size(t, group, d_v);
      if (cluster == 0 || t.kernel != DecodeKernel::kWarp || t.rows_per_block != 16) continue;
      if (t.warps == (cluster == 16 ? 4 : 2)) return t;
    }
  }
  // Otherwise:
  //  - below 128 (sequence, key head) units, when the warp kernel cannot run (or T > 1): 8 warps,
  //    the key head cut into a cluster of (up to) 8 blocks;
  //  - 128 to 1023 units: the bulk-copy kernel, which takes T = 1 only (verify: as from 1024
  //    units);
  //  - from 1024 units: whole key heads per block (no cluster), the most warps.
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
  const cudaStream_t stream = static_cast<cudaStream_t>(
      stream_handle.handle ? stream_handle.handle : current_stream().handle);
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
  // The warp and split kernels take one token, a conv of 4 taps and 16-byte aligned tensors
  // (vector loads: warp_kernel_aligned).
  if (tiling.kernel == DecodeKernel::kWarp || tiling.kernel == DecodeKernel::kSplit) {
    const char* op = tiling.kernel == DecodeKernel::kWarp
                         ? "gated_delta_rule_decode (CUDA, warp kernel)"
                         : "gated_delta_rule_decode (CUDA, split kernels)";
    if (T != 1) return unsupported(op, ": one token per sequence only, not ", T);
    if (p.conv_weight.size(1) != 4)
      return unsupported(op, ": a conv of 4 taps only, not ", p.conv_weight.size(1));
    if (!warp_kernel_aligned(p))
      return unsupported(op,
                         ": needs 16-byte aligned qkv, conv weight, conv state, gate inputs, "
                         "dt_bias, state pool and step states");
  }
  if (tiling.kernel == DecodeKernel::kSplit && !decode_workspace_ok(p))
    return unsupported(
        "gated_delta_rule_decode (CUDA): the split kernels need a workspace of at least ",
        gated_delta_rule_decode_workspace_bytes(s),
        " bytes on the kernel's device, 16-byte aligned (GatedDeltaRuleDecodeParams::workspace)");
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
  args.qkv_row = p.qkv.stride(0);
  args.a_row = p.a.stride(0);
  args.b_row = p.b.stride(0);
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
  if (tiling.kernel == DecodeKernel::kBlock && cluster > 1 && p.arrivals.defined())
    args.arrivals = reinterpret_cast<unsigned*>(p.arrivals.data<int32_t>());
  if (tiling.kernel == DecodeKernel::kSplit) {
    args.workspace = static_cast<float*>(p.workspace.raw());
    args.workspace_layout = decode_workspace_layout(s);
  }
  const bool bf16_state = p.state_pool.dtype() == DType::kBF16;
  const DecodeTiling rows = tiling;
  HYLA_RETURN_IF_ERROR(bf16_state
                           ? decode_detail::launch_bf16_pool(args, kda, d_k, B, rows, stream)
                           : (kda ? launch_head_dim<float, true>(args, d_k, B, rows, stream)
                                  : launch_head_dim<float, false>(args, d_k, B, rows, stream)));

  if (p.norm_weight.defined()) {
    if (d_v > 32 * kNormPerLane)  // (never: the step above takes d_v = d_k <= 128)
      return unsupported("gated_delta_rule_decode (CUDA): gated norm of d_v = ", d_v);
    const int64_t rows_total = int64_t(B) * T * HV;
    const int warps_per_block = 8;
    gated_norm_kernel<<<unsigned((rows_total + warps_per_block - 1) / warps_per_block),
                        32 * warps_per_block, 0, stream>>>(
        p.o.raw(), args.o_bf16, p.norm_gate.raw(), p.norm_gate.dtype() == DType::kBF16,
        p.norm_gate.stride(0), p.norm_weight.data<float>(), args.slots, args.num_slots, rows_total,
        T * HV, HV, d_v, p.norm_eps, p.norm_act == GateActivation::kSilu);
    HYLA_CUDA_CHECK(cudaGetLastError());
  }
  return ok_status();
}

Status gated_delta_rule_decode(const GatedDeltaRuleDecodeParams& p, Stream stream) {
  const DecodeShape s = decode_shape(p);
  const bool warp_ok = s.d_k == s.d_v && p.conv_weight.size(1) == 4 && warp_kernel_aligned(p);
  return gated_delta_rule_decode_tiled(
      p,
      default_decode_tiling(s.B, s.H, s.HV / s.H, s.d_v, s.T, p.overlap_previous, warp_ok,
                            p.arrivals.defined(), warp_ok && decode_workspace_ok(p)),
      stream);
}

Status gated_delta_rule_commit(const GatedDeltaRuleCommitParams& p, Stream stream_handle) {
  const cudaStream_t stream = static_cast<cudaStream_t>(
      stream_handle.handle ? stream_handle.handle : current_stream().handle);
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
      p.qkv.raw(), p.qkv.dtype() == DType::kBF16, p.qkv.stride(0), p.conv_state.raw(),
      p.conv_state.dtype() == DType::kBF16, p.slots.data<int32_t>(), p.accepted.data<int32_t>(),
      num_slots, conv_dim, T, int(p.conv_state.size(2)) + 1);
  HYLA_CUDA_CHECK(cudaGetLastError());
  return ok_status();
}

#ifdef HYLA_DECODE_PROBE
void decode_probe_dump(int steps, int blocks) {
  static unsigned long long h[kProbeSteps][kProbeBlocks][kProbePoints];
  static unsigned long long hw[kProbeSteps][kProbeBlocks][kProbeWarps];
  HYLA_CUDA_CHECK(cudaDeviceSynchronize());
  HYLA_CUDA_CHECK(cudaMemcpyFromSymbol(h, g_probe, sizeof(h)));
  HYLA_CUDA_CHECK(cudaMemcpyFromSymbol(hw, g_probe_warp, sizeof(hw)));
  auto median = [](const std::vector<long long>& v) { return v.empty() ? 0LL : v[v.size() / 2]; };
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
      if (pt == kProbeSmid) continue;
      std::vector<long long> v;
      for (int bl = 0; bl < blocks && bl < kProbeBlocks; ++bl)
        if (h[st][bl][pt]) v.push_back((long long)(h[st][bl][pt] - t0));
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      std::printf(" | p%d %lld/%lld/%lld", pt, v.front(), median(v), v.back());
    }
    // Blocks that shared their SM with another block of this step against those alone there:
    // median end (point 7).
    std::vector<long long> shared, alone;
    for (int bl = 0; bl < blocks && bl < kProbeBlocks; ++bl) {
      if (!h[st][bl][kProbeSmid] || !h[st][bl][7]) continue;
      int on_sm = 0;
      for (int other = 0; other < blocks && other < kProbeBlocks; ++other)
        on_sm += h[st][other][kProbeSmid] == h[st][bl][kProbeSmid];
      (on_sm > 1 ? shared : alone).push_back((long long)(h[st][bl][7] - t0));
    }
    for (auto* v : {&shared, &alone}) std::sort(v->begin(), v->end());
    std::printf(" | end on a shared SM: %zu blocks, median %lld; alone: %zu, median %lld\n",
                shared.size(), median(shared), alone.size(), median(alone));
    // The block barrier: per warp, its arrival after the block's first warp (median over the
    // blocks), how often it was the last to arrive, and the spread first -> last warp.
    std::vector<long long> lag[kProbeWarps], spread;
    int last_count[kProbeWarps] = {};
    for (int bl = 0; bl < blocks && bl < kProbeBlocks; ++bl) {
      unsigned long long first = ~0ull, last = 0;
      int last_warp = -1;
      for (int w = 0; w < kProbeWarps; ++w) {
        const unsigned long long t = hw[st][bl][w];
        if (!t) continue;
        if (t < first) first = t;
        if (t >= last) last = t, last_warp = w;
      }
      if (last_warp < 0) continue;
      ++last_count[last_warp];
      spread.push_back((long long)(last - first));
      for (int w = 0; w < kProbeWarps; ++w)
        if (hw[st][bl][w]) lag[w].push_back((long long)(hw[st][bl][w] - first));
    }
    std::sort(spread.begin(), spread.end());
    if (!spread.empty()) {
      std::printf("           barrier: first -> last warp %lld/%lld/%lld ns; per warp lag (last):",
                  spread.front(), median(spread), spread.back());
      for (int w = 0; w < kProbeWarps; ++w) {
        if (lag[w].empty()) continue;
        std::sort(lag[w].begin(), lag[w].end());
        std::printf(" w%d %lld (%d)", w, median(lag[w]), last_count[w]);
      }
      std::printf("\n");
    }
    prev0 = t0;
    prev_end = end;
  }
  void* at = nullptr;  // both timelines back to zero for the next dump
  HYLA_CUDA_CHECK(cudaGetSymbolAddress(&at, g_probe));
  HYLA_CUDA_CHECK(cudaMemset(at, 0, sizeof(h)));
  HYLA_CUDA_CHECK(cudaGetSymbolAddress(&at, g_probe_warp));
  HYLA_CUDA_CHECK(cudaMemset(at, 0, sizeof(hw)));
}
#endif

}  // namespace hyla::kernels::cuda
