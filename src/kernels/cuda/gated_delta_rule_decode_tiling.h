// How the CUDA body of gated_delta_rule_decode tiles its work, exposed so that the GPU tests can
// cover every tiling against the CPU body and the benchmark can sweep them; callers use
// kernels::gated_delta_rule_decode, which picks a tiling by batch size.
//
// Unit of work: one (sequence, key head): the rows (value channels) of its `group` value heads,
// contiguous in the pool, plus its 2 d_k q/k channels. A tiling cuts those group d_v rows into
// thread blocks of `rows_per_block`; the blocks of one key head form a thread-block cluster that
// each computes the key head's q/k conv (its threads share it through shared memory); a v channel
// is read by one block, which advances its window at once, and the q/k windows are advanced by the
// cluster's rank 0 after a cluster barrier says every block has read them. So the whole step,
// conv window included, is one kernel. (The warp kernel cuts the rows the same way, but each warp
// computes its own lanes' q/k channels: no shared memory.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/gated_delta_rule_decode.h"

namespace hyla::kernels::cuda {

/// Which kernel runs a tiling.
enum class DecodeKernel : uint8_t {
  /// decode_step_kernel (any T): the block shares the key head's q/k conv through shared memory.
  kBlock,
  /// decode_bulk_kernel (T = 1): whole key heads per block, rows staged through shared memory by
  /// bulk copies (TMA) in chunks of rows_per_block rows.
  kBulk,
  /// decode_warp_kernel (T = 1, d_k = d_v in {64, 128}, conv of 4 taps, never overlapped):
  /// every warp computes the q/k conv of its own lanes' columns and needs no block barrier;
  /// rows_per_block / warps rows per warp.
  kWarp,
  /// decode_prep_kernel + decode_rows_kernel (T = 1, d_k = d_v in {64, 128}, a conv of 4 taps,
  /// needs GatedDeltaRuleDecodeParams::workspace): the conv, gates and inputs of each (sequence,
  /// key head) prepared once into the workspace, then 8 rows per block of 1 warp, launched as
  /// the first kernel's programmatic dependent (state loads before its wait).
  kSplit,
};

struct DecodeTiling {
  int rows_per_block = 0;  ///< must divide group d_v
  int warps = 4;           ///< warps per block
  DecodeKernel kernel = DecodeKernel::kBlock;
  bool bulk() const { return kernel == DecodeKernel::kBulk; }
};

/// "R32w8c8" (block kernel), "bulk32w8", "W16w4c16" (warp kernel), "S8w1" (split); cluster from
/// decode_cluster_size.
std::string decode_tiling_name(DecodeTiling tiling, int64_t group, int64_t d_v);

/// With overlap_previous, a tiling runs as a programmatic dependent of the kernel before it only
/// for decode (T = 1) on the block kernel's 32 rows / 8 warps and 64 rows / 4 warps, the tilings
/// default_decode_tiling picks with overlap_previous and that it can run as dependents; the others
/// run in stream order.
constexpr bool block_tiling_overlaps(int rows_per_block, int warps) {
  return (rows_per_block == 32 && warps == 8) || (rows_per_block == 64 && warps == 4);
}
inline bool decode_tiling_overlaps(DecodeTiling t, int64_t T) {
  return T == 1 && t.kernel == DecodeKernel::kBlock &&
         block_tiling_overlaps(t.rows_per_block, t.warps);
}

/// Whether a tiling serves T tokens per sequence: T = 1 any; verify (T > 1) only the block
/// kernel's, 16 rows / 16 warps excepted (the entry takes that one at T = 1 only).
inline bool decode_tiling_takes(DecodeTiling t, int64_t T) {
  return T == 1 || (t.kernel == DecodeKernel::kBlock && !(t.rows_per_block == 16 && t.warps == 16));
}

/// The tilings the kernel is compiled for, smallest blocks first.
std::vector<DecodeTiling> decode_tilings();

/// Cluster size of a tiling: group d_v / rows_per_block (1..16), or 0 when the tiling cannot
/// serve this geometry.
int decode_cluster_size(DecodeTiling tiling, int64_t group, int64_t d_v);

/// The tiling gated_delta_rule_decode uses for B sequences of T tokens, H key heads of group d_v
/// rows; `overlap`: GatedDeltaRuleDecodeParams::overlap_previous; `warp_kernel_ok`: the call
/// meets the warp kernel's terms (conv of 4 taps, 16-byte aligned tensors), else the block kernel;
/// `counted`: the call gives arrival counters (GatedDeltaRuleDecodeParams::arrivals);
/// `workspace_ok`: the call has a large enough workspace (the split tilings).
DecodeTiling default_decode_tiling(int64_t B, int64_t H, int64_t group, int64_t d_v, int64_t T = 1,
                                   bool overlap = false, bool warp_kernel_ok = true,
                                   bool counted = false, bool workspace_ok = false);

/// gated_delta_rule_decode with an explicit tiling (arguments already checked by the caller).
Status gated_delta_rule_decode_tiled(const GatedDeltaRuleDecodeParams& p, DecodeTiling tiling,
                                     Stream stream);

#ifdef HYLA_DECODE_PROBE
/// Diagnostic build only: prints the timeline the block kernel recorded for sequence 0 of the
/// first `steps` ring steps (blocks 0..blocks-1) and clears it.
void decode_probe_dump(int steps, int blocks);
#endif

}  // namespace hyla::kernels::cuda
