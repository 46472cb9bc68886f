// What the tensor-core chunk body's files share (gated_delta_rule_chunk_mma.cu has the scheme;
// _prepare.cu and _state.cu the kernels): the call's arguments with its workspace regions and
// tensor maps (MmaArgs), the tile constants, the mma.sync / ldmatrix helpers and fragment
// indexing, and the two kernels' launchers. CUDA code only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gated_delta_rule_chunk_plan.cuh"
#include "kernels/gated_delta_rule.h"

namespace hyla::kernels::cuda::chunk_mma {

using bf16 = __nv_bfloat16;

constexpr int kC = kDeltaRuleChunk;  // 64 tokens per chunk
constexpr int kD = 128;              // d_k
constexpr int kLdQK = kD + 8;        // bf16 row pitch of q / k tiles (272 B: ldmatrix rows hit
                                     // distinct banks)
constexpr int kLdCC = kC + 8;        // bf16 row pitch of 64x64 tiles (144 B)
constexpr int kLdF = kC + 4;         // f32 row pitch of 64x64 tiles (tf32 A fragments hit distinct
                                     // banks)

/// The call's operands (ChunkCall) and this body's workspace regions.
struct MmaArgs : ChunkCall {
  bool o_vec;     // o's rows take 16-byte stores at every 4 (f32) or 8 (bf16) columns
  bool o_tma;     // o is bf16 rows TMA can write (chunk_bf16_rows): the wgmma state kernel
                  // stores whole chunks by tensor map (map_o)
  bool g_vec;     // KDA: g's rows take 16-byte copies
  bool qk_async;  // ChunkWorkspaceShape::qk_bf16_rows (and no GDN copies): the prepare kernel
                  // copies q / k into its tiles by cp.async and takes the norms from there
  bf16* tmat;     // [max_chunks, HV, 64, 64]
  bf16* aqk;      // [max_chunks, HV, 64, 64]
  float* vec;     // [max_chunks, HV, 4, 64]: kg, qg, kd, G (GDN) or exp(G_n[c]) (KDA); tc_vec
  // KDA: [max_chunks, HV, 64, 128] each: Kg, Qg, Kd (ChunkWorkspaceLayout::tc_kg, tc_qg, tc_kd)
  bf16* kg;
  bf16* qg;
  bf16* kd;
  // The bf16 rows the state kernel reads: the inputs, or the copies the prepare kernel writes.
  const bf16* q16;
  const bf16* k16;
  const bf16* v16;
  int64_t q16_st, q16_sh, k16_st, k16_sh, v16_st, v16_sh;
  bool copies;  // the prepare kernel writes q16 / k16 / v16 (KDA: v16 only)
  // Side by side (gated_delta_rule_chunk_mma.cu): [max_chunks, HV] flags, item (chunk, hv)
  // prepared; the state kernel runs as the prepare kernel's dependent and waits for its chunks.
  // Null: the state kernel runs after the prepare kernel.
  uint32_t* ready;
  // Context parallelism (gated_delta_rule_chunk_mma.cu): `segments` segments a sequence; the
  // calls over segments read initial states from initial_states ([initial_count, HV, d_v, d_k]
  // f32, by initial_slots) instead of the pool; the transfer kernel writes `transfer`.
  int segments;
  const float* initial_states;
  int64_t initial_count;
  float* transfer;  // [B P, HV, d_k + d_v, d_k] f32
  // Side by side: the prepare kernel runs a block on every SM; those on SM ids below
  // reserved_sms (whole TPCs: ids 2i and 2i + 1 share one) leave at once for the state blocks,
  // the others take items from claim[1]; claim[0] counts arrivals (low 16 bits) and workers.
  uint32_t* claim;
  int reserved_sms;
#ifdef HYLA_CHUNK_PROBE
  // The timeline probe (a diagnostic build: -DHYLA_CHUNK_PROBE; tools/gpu/chunk_probe.sh): when
  // a (chunk, value head) item was done, [max_chunks, HV], then per state block of sequence 0
  // (value head, row block) and chunk kProbeWords words (probe_record).
  unsigned long long* probe;
#endif
  // The state kernel's tiles (encode_state_maps): k / q rows (GDN, [T, H, 128]) or Kg / Qg / Kd
  // (KDA, chunk-major), v rows, T and A_qk (chunk-major); 128-byte swizzle, 64-row boxes.
  CUtensorMap map_k, map_q, map_kd, map_v, map_t, map_aqk, map_o;
};

// ---- barriers and flags ----
/// Named barrier `id` of `threads` threads: arrive (no wait) / wait for the others.
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
/// A flag in global memory another block reads (release: this thread's earlier writes, and those
/// it has seen, first).
__device__ __forceinline__ void store_release(uint32_t* flag, uint32_t value) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(flag), "r"(value) : "memory");
}
__device__ __forceinline__ uint32_t load_acquire(const uint32_t* flag) {
  uint32_t value;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(value) : "l"(flag) : "memory");
  return value;
}

#ifdef HYLA_CHUNK_PROBE
constexpr int kProbeWords = 10;  // per state block of sequence 0 and chunk
__device__ __forceinline__ unsigned long long probe_clock() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#endif

// ---- mma.sync / ldmatrix ----

/// A fragment (16x16, row-major rows of 16 bytes at p for lane's row) or two B fragments.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  ldsm_x4(r, smem_addr(p));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
/// c += a b, m16n8k16, bf16 operands, f32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/// Four 8x8 bf16 matrices to the rows lanes 8 i .. 8 i + 7 address (matrix i from r[i], the
/// fragment layout of ldmatrix).
__device__ __forceinline__ void stsm_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}
/// Four 8x8 bf16 matrices, transposed, to the rows lanes 8 i .. 8 i + 7 address (matrix i from
/// r[i], the fragment layout of ldmatrix).
__device__ __forceinline__ void stsm_x4_trans(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
      "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
      : "memory");
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
// Fragment indexing (m16n8k16): lane = 4 g + c holds C rows g and g + 8, columns 2c and 2c + 1.
// ldmatrix addresses: A (row-major [m][k]) row lane % 16, column 8 (lane / 16); B stored [n][k]
// (non-trans) row (lane % 8) + 8 (lane / 16), column 8 ((lane / 8) % 2), giving two n-tiles; B
// stored [k][n] (trans) row (lane % 8) + 8 ((lane / 8) % 2), column 8 (lane / 16).
__device__ __forceinline__ int a_row(int lane) { return lane & 15; }
__device__ __forceinline__ int a_col(int lane) { return (lane >> 4) * 8; }
__device__ __forceinline__ int bn_row(int lane) { return (lane & 7) + ((lane >> 4) << 3); }
__device__ __forceinline__ int bn_col(int lane) { return ((lane >> 3) & 1) * 8; }
__device__ __forceinline__ int bt_row(int lane) { return (lane & 7) + (((lane >> 3) & 1) << 3); }
__device__ __forceinline__ int bt_col(int lane) { return (lane >> 4) * 8; }

/// The A fragment of the 16 x 16 block of a row-major tile at a (its row m0, column k0).
__device__ __forceinline__ void load_a(uint32_t (&af)[4], const bf16* a, int lda, int lane) {
  ldsm_x4(af, a + a_row(lane) * lda + a_col(lane));
}

/// The prepare kernel over every chunk and value head (gated_delta_rule_chunk_mma_prepare.cu):
/// `blocks` blocks of `teams` teams (blocks <= 0: a team a block, one item each).
void launch_prepare(const MmaArgs& a, int teams, int64_t blocks, cudaStream_t s);
/// The prepare kernel's teams a block of at most smem_per_block bytes of shared memory holds.
int prepare_teams(bool kda, size_t smem_per_block);
/// The state kernel (kRoles or kWide) over every sequence, value head and block of value rows,
/// after encoding a's tensor maps (gated_delta_rule_chunk_mma_state.cu); with a.ready, as the
/// prepare kernel's programmatic dependent (d_v a multiple of 64 only). kRoles takes d_v an odd
/// multiple of 32 to its mma.sync kernel.
void launch_state(MmaArgs& a, ChunkStateKernel kernel, cudaStream_t s);
/// Blocks of that state kernel for a call (a value head's d_v / 128, d_v / 64 or d_v / 32 row
/// blocks per sequence).
int64_t state_blocks(const MmaArgs& a, ChunkStateKernel kernel);
/// The wide kernel takes the call (d_v a multiple of 128).
bool wide_fits(const MmaArgs& a);
/// Context parallelism: each segment's transfer (M, L) into a.transfer, over a's segments as
/// sequences (a.B = sequences x a.segments; wide_fits).
void launch_transfer(MmaArgs& a, cudaStream_t s);
/// Context parallelism: every segment's initial state into a.initial_states from the pool's
/// initial states and the transfers; a over the real sequences (a.B of them).
void launch_combine(const MmaArgs& a, cudaStream_t s);

}  // namespace hyla::kernels::cuda::chunk_mma
