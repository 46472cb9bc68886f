// The gated delta rule (seed: 统一递归形式, Gated DeltaNet, KDA; reference gated_delta_rule_ref).
// Per value head h (key head h / (HV / H)), per token t, with the state S in R^{d_k x d_v}:
//   q, k <- l2norm(q), l2norm(k) (optional);  q <- scale * q  (scale = d_k^-1/2 by default)
//   S'    = Diag(exp(g_t)) S          decay: GDN g_t is one scalar per head, KDA one per key
//   channel v_hat = k_t S'                    predict with the decayed state delta = beta_t (v_t -
//   v_hat)      error S     = S' + k_t^T delta          write o_t   = q_t S read
// Two algorithms compute it: `recurrent` (token by token; decode, verify) and `chunk` (chunks of
// C = 64 tokens collapsed with the WY/UT representation and a 64x64 lower-triangular solve;
// prefill).
//
// Layouts (DESIGN.md §3): activations packed over a batch of B sequences (cu_seqlens), never
// padded. The state pool is [slot, HV, d_v, d_k] with d_k contiguous, i.e. each pool entry stores
// S^T.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace hyla::kernels {

/// Chunk length of gated_delta_rule_chunk; chunk-boundary states fall on its multiples.
inline constexpr int kDeltaRuleChunk = 64;

/// The CUDA tensor-core chunk body's state kernels: kRoles, a block per 64 value rows with a state
/// and an output warpgroup (the shortest chunk, for few blocks); kWide, a block per 128 value rows
/// whose two warpgroups each do every product (the most chunks a second, for many blocks).
enum class ChunkStateKernel { kAuto, kRoles, kWide };

struct GatedDeltaRuleParams {
  TensorView q;  ///< [T, H, d_k] f32|bf16
  TensorView k;  ///< [T, H, d_k] f32|bf16
  TensorView v;  ///< [T, HV, d_v] f32|bf16; HV is a multiple of H (GVA)
  /// Log-space decay, f32, g <= 0: [T, HV] for GDN (scalar gate) or [T, HV, d_k] for KDA
  /// (per-channel gate). The rank selects the variant.
  TensorView g;
  TensorView beta;  ///< [T, HV] f32, write strength in [0, 1]
  /// [B+1] i32 on q's device (values checked on CPU calls only); sequence b is tokens
  /// [cu[b], cu[b+1])
  TensorView cu_seqlens;

  /// [slots, HV, d_v, d_k] f32|bf16 (fp32 by default). Needed iff a slot array is given.
  /// Index values (cu_seqlens, slots) are checked on the host for CPU calls only; CUDA bodies skip
  /// slots outside the pool and never read or write outside their tensors.
  TensorView state_pool;
  /// Optional [B] i32 on q's device: pool slot holding sequence b's initial state; -1 (or absent)
  /// = zeros.
  TensorView initial_slots;
  /// Optional [B] i32 on q's device: pool slot that receives sequence b's final state (in place;
  /// may equal the initial slot); -1 = skip. Absent = commit nothing (speculative verify).
  TensorView final_slots;

  bool use_qk_l2norm = true;  ///< l2-normalise q and k over d_k inside the kernel (eps 1e-6)
  float scale = 0.0f;         ///< multiplies q after normalisation; 0 means d_k^-1/2

  TensorView o;  ///< out [T, HV, d_v] f32|bf16

  /// recurrent only, optional out [T, HV, d_v, d_k] f32: the state after every token (verify).
  TensorView step_states;
  /// chunk only, optional out [N, HV, d_v, d_k] f32: the state after every full multiple of 64
  /// tokens of each sequence, sequences in order; N =
  /// gated_delta_rule_num_chunk_states(cu_seqlens). Sequence b's state after 64 (j + 1) tokens is
  /// entry chunk_state_offset(b) + j.
  TensorView chunk_states;

  /// chunk on CUDA: scratch of at least gated_delta_rule_chunk_workspace_bytes(p) bytes, f32
  /// (any shape), contiguous, 16-byte aligned, on the kernel's device. The CPU body ignores it.
  /// Calls that may run at the same time need separate workspaces.
  TensorView workspace;
  /// chunk on CUDA, tensor-core body: which state kernel (kAuto: the entry's cost rule). The others
  /// are for tests and benchmarks; kWide needs d_v % 128 == 0.
  ChunkStateKernel state_kernel = ChunkStateKernel::kAuto;
  /// chunk on CUDA, tensor-core body: context parallelism, segments a sequence (0: the body's
  /// choice, chunk_cp_segments; 1: none; 2 .. 16 need d_v % 128 == 0). The workspace depends on it.
  int cp_segments = 0;
};

/// Token-by-token algorithm (decode: T = B; verify: a few tokens per sequence).
Status gated_delta_rule_recurrent(const GatedDeltaRuleParams& p, Stream stream = {});
/// Chunkwise algorithm (prefill). Same results as the recurrent one up to rounding.
Status gated_delta_rule_chunk(const GatedDeltaRuleParams& p, Stream stream = {});

/// Prefill ("extend") entry: runs whichever of chunk / recurrent is faster for this device and
/// these lengths (chunk once sequences average kCpuChunkMinTokens tokens on the CPU, see
/// docs/perf-history.md "CPU", kCudaChunkMinTokens on CUDA; always chunk when chunk_states are
/// requested).
/// step_states is not accepted here.
Status gated_delta_rule_extend(const GatedDeltaRuleParams& p, Stream stream = {});
/// Mean tokens per sequence from which the CPU chunk algorithm beats the recurrent one
/// (measured by bench/gated_delta_rule.cpp, recorded in docs/perf-history.md "CPU").
inline constexpr int64_t kCpuChunkMinTokens = 16;
/// The same threshold for CUDA calls: a first guess; no entry of docs/perf-history.md "GPU chunk
/// prefill" times the chunk kernels against the recurrent one at these lengths.
inline constexpr int64_t kCudaChunkMinTokens = 16;
/// True when gated_delta_rule_extend would run the chunk algorithm for p.
bool gated_delta_rule_extend_uses_chunk(const GatedDeltaRuleParams& p);

/// Number of chunk-boundary states sum_b floor(len_b / 64) that chunk_states must hold.
int64_t gated_delta_rule_num_chunk_states(const TensorView& cu_seqlens);
/// Index in chunk_states of sequence b's first boundary state: sum_{b' < b} floor(len_b' / 64).
int64_t gated_delta_rule_chunk_state_offset(const TensorView& cu_seqlens, int64_t b);

/// Bytes of GatedDeltaRuleParams::workspace a chunk call of p needs on CUDA (from the shapes,
/// dtypes and strides of q, k, v, g and cu_seqlens, never from index values); 0 for CPU calls.
int64_t gated_delta_rule_chunk_workspace_bytes(const GatedDeltaRuleParams& p);
/// Largest d_k the CUDA chunk body takes (its per-chunk q, k and gate tiles live in shared memory).
inline constexpr int64_t kCudaChunkMaxKeyDim = 128;

/// The shapes the CUDA chunk workspace depends on.
struct ChunkWorkspaceShape {
  int64_t T, B, H, HV, d_k, d_v;
  bool per_channel;
  /// The tensor-core body takes the call (chunk_uses_tensor_cores).
  bool tensor_cores;
  /// ... and the rows it reads are not bf16 rows it can take as they are (GDN: q, k, v; KDA: v,
  /// since its q and k enter through the scaled tiles tc_kg / tc_qg / tc_kd): it works on bf16
  /// copies.
  bool bf16_copies;
  /// q and k are bf16 rows the body can take as they are (its prepare kernel then copies them
  /// into shared memory without converting them).
  bool qk_bf16_rows;
  /// Context parallelism: segments per sequence (1: none).
  int64_t cp_segments;
};
ChunkWorkspaceShape chunk_workspace_shape(const GatedDeltaRuleParams& p);
/// A [T, heads, d] activation the tensor-core body reads (q, k, v) or writes (o) as it is, by TMA
/// tiles: bf16 rows, 16-byte aligned, strides multiples of 16 bytes with heads inside tokens (no
/// overlap).
bool chunk_bf16_rows(const TensorView& x);
/// True when a CUDA chunk call of p runs the tensor-core body (cuda/gated_delta_rule_chunk_mma.cu):
/// GDN or KDA, d_k = 128, d_v a multiple of 32. bf16 operands with fp32 accumulation and an fp32
/// state; other shapes take the fp32 body.
bool chunk_uses_tensor_cores(const GatedDeltaRuleParams& p);
/// The tensor-core body's context parallelism when the call does not say (cp_segments 0): with
/// fewer than 32 blocks of 64 value rows (B HV d_v / 64: a few sequences of few heads, e.g. one
/// GPU's share of a model's heads), each sequence in P = min(8, 128 / blocks) segments of at least
/// 4 chunks on average, run side by side and joined exactly (gated_delta_rule_chunk_mma.cu); 1
/// otherwise. Needs d_v % 128 == 0.
int64_t chunk_cp_segments(int64_t T, int64_t B, int64_t HV, int64_t d_v);
/// Regions of the CUDA chunk workspace, offsets in 4-byte words from its start. A chunk is 64
/// tokens of one sequence (its last one may be shorter); there are at most max_chunks =
/// ceil(T / 64) + B of them. Per-token regions are indexed by the packed token t. Regions of the
/// other body are empty (offset of a zero-sized region).
struct ChunkWorkspaceLayout {
  int64_t max_chunks;
  int64_t chunk_first;     ///< [B+1] i32: index of sequence b's first chunk
  int64_t chunk_seq;       ///< [max_chunks] i32: the sequence of each chunk, -1 past the last
  int64_t boundary_first;  ///< [B] i32: sequence b's first entry in chunk_states
  // fp32 body
  int64_t w;      ///< [T, HV, d_k] f32: W = (I + A_kk)^-1 beta K exp(G)
  int64_t u;      ///< [T, HV, d_v] f32: U = (I + A_kk)^-1 beta V
  int64_t qg;     ///< [T, HV, d_k] f32: Q exp(G)
  int64_t kd;     ///< [T, HV, d_k] f32: K exp(G_last - G)
  int64_t aqk;    ///< [T, HV, 64] f32: row t of A_qk (columns = tokens of t's chunk)
  int64_t decay;  ///< [max_chunks, HV, d_k or 1] f32: exp(G_last) of each chunk
  // tensor-core body (chunk-major, padded to 64 tokens; zeros past a sequence's end)
  int64_t tc_t;    ///< [max_chunks, HV, 64, 64] bf16: (I + A_kk)^-1 Diag(beta)
  int64_t tc_aqk;  ///< [max_chunks, HV, 64, 64] bf16: A_qk, the decays inside
  /// [max_chunks, HV, 4, 64] f32. GDN, per token t of the chunk (G: the in-chunk cumulative log
  /// decay, n: the chunk's length; |q| and |k| mean 1 without l2norm; zeros past n but G):
  /// exp(G_t) / |k_t|, scale exp(G_t) / |q_t|, exp(G_{n-1} - G_t) / |k_t|, G_t. KDA: the first
  /// d_k floats, exp(G_{n-1}[c]) per key channel c.
  int64_t tc_vec;
  /// KDA: [max_chunks, HV, 64, d_k] bf16 each (zeros past n): K exp(G) / |k|, scale Q exp(G) / |q|
  /// and K exp(G_{n-1} - G) / |k|, per channel; empty for GDN.
  int64_t tc_kg, tc_qg, tc_kd;
  /// [max_chunks, HV] u32: chunk c of value head hv is prepared (nonzero), when the state kernel
  /// runs beside the prepare kernel (cuda/gated_delta_rule_chunk_mma.cu: side by side); then two
  /// u32 counters of the prepare kernel's blocks (arrivals and workers) and of its items taken.
  int64_t tc_ready;
  int64_t tc_q;  ///< GDN with bf16_copies: [T, H, d_k] bf16 copy of q, else empty (so tc_k)
  int64_t tc_k;  ///< [T, H, d_k] bf16
  int64_t tc_v;  ///< bf16_copies: [T, HV, d_v] bf16 copy of v, else empty
  /// Context parallelism (cp_segments P > 1; empty otherwise), B' = B P segments: i32 [B'+1]
  /// token offsets, [B'+1] first chunks, [B'] first boundary states, [B'] initial (b') and final
  /// pool slots (the sequence's for its last segment, else -1); f32 [B', HV, d_k + d_v, d_k] each
  /// segment's transfer (M's rows, then L's) and [B', HV, d_v, d_k] its initial state.
  int64_t cp_cu, cp_chunk_first, cp_boundary_first, cp_initial, cp_final, cp_transfer, cp_states;
  int64_t bytes;  ///< total size
};
ChunkWorkspaceLayout chunk_workspace_layout(const ChunkWorkspaceShape& s);

/// Validates p for the given algorithm (shapes, dtypes, devices, cu_seqlens, slot ranges).
Status check_gated_delta_rule(const GatedDeltaRuleParams& p, bool chunked);

namespace cpu {
void gated_delta_rule_recurrent(const GatedDeltaRuleParams& p);
void gated_delta_rule_chunk(const GatedDeltaRuleParams& p);
}  // namespace cpu

namespace cuda {
/// d_k <= 256, any d_v (cuda/gated_delta_rule_recurrent.cu).
Status gated_delta_rule_recurrent(const GatedDeltaRuleParams& p, Stream stream);
Status gated_delta_rule_chunk(const GatedDeltaRuleParams& p, Stream stream);
/// The tensor-core body (chunk_uses_tensor_cores(p); called by gated_delta_rule_chunk).
Status gated_delta_rule_chunk_mma(const GatedDeltaRuleParams& p, Stream stream);
}  // namespace cuda

}  // namespace hyla::kernels
