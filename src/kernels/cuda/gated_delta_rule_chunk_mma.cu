// Tensor-core body of gated_delta_rule_chunk (kernels/gated_delta_rule.h) for GDN's scalar gate and
// KDA's per-channel one, d_k = 128 and d_v a multiple of 32: bf16 operands into mma.sync m16n8k16
// with fp32 accumulation, the state kept in fp32 registers. cpu/gated_delta_rule.cpp (chunk_step)
// is the specification; gated_delta_rule_chunk.cu is the fp32 body of every other shape.
//
// Per chunk of n <= 64 tokens of one sequence and value head, with G_t = sum_{s<=t} g_s (within
// the chunk) and the state S^T [d_v, d_k] (the pool's layout):
//   A_kk[t, j] = beta_t exp(G_t - G_j) <k_t, k_j>  (t > j),  A_qk[t, j] = exp(G_t - G_j) <q_t, k_j>
//   T = (I + A_kk)^-1 Diag(beta)                          (the delta rule's UT transform)
//   Delta = T (V - Diag(exp(G)) K S)                      (the state's correction of each token)
//   O = Diag(exp(G)) Q S + A_qk Delta
//   S = exp(G_n) S + (Diag(exp(G_n - G)) K)^T Delta
// q and k enter the products raw (bf16); their l2norm and scale are per-row factors applied to the
// products' rows and columns, as are the decays, so no normalised copy is written: the per-token
// factors kg = exp(G) / |k|, qg = scale exp(G) / |q| and kd = exp(G_n - G) / |k|.
// KDA's decays differ per key channel c, so they cannot leave the products as row factors: the
// prepare kernel writes the scaled tiles Kg = K exp(G) / |k|, Qg = scale Q exp(G) / |q| and
// Kd = K exp(G_n - G) / |k| (every factor <= 1) that the state kernel reads in place of K and Q,
// and S's columns decay by exp(G_n[c]). Its A_kk and A_qk sum exp(G_t[c] - G_j[c]) inside the
// products, one 16-row block at a time against a reference row (kda_products).
//
// Three launches on the caller's stream; scratch in the caller's workspace (ChunkWorkspaceLayout
// tc_*, chunk-major and padded to 64 tokens):
//   plan     <<<1, 1>>>                    chunk numbering (gated_delta_rule_chunk_plan.cuh)
//   prepare  <<<(HV, chunks), 128>>>       a chunk of one value head at a time (the value heads
//                                          of a key head run side by side and share its rows in
//                                          L2): the norms, K K^T and Q K^T on tensor cores, G, T
//                                          (blockwise inverse of the 64x64 unit triangle), A_qk and
//                                          the per-token factors kg, qg, kd; bf16 copies of q, k, v
//                                          when the inputs are not bf16 rows
//   state    <<<(B, HV, d_v / VT), 8 VT>>> the chunks of one sequence in order for VT value rows
//                                          of one value head, four warps per 16 rows; the next
//                                          chunk's tiles stream in (TMA boxes completing on an
//                                          mbarrier per stage) while this one computes
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gated_delta_rule_chunk_plan.cuh"
#include "kernels/gated_delta_rule.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cuda {

namespace {

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
  bool g_vec;     // KDA: g's rows take 16-byte copies
  bool qk_async;  // q and k are bf16 rows of 16-byte pieces: the prepare kernel copies them into
                  // its tiles by cp.async (no register staging) and takes the norms from there
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
  // The state kernel's tiles (encode_state_maps): k / q rows (GDN, [T, H, 128]) or Kg / Qg / Kd
  // (KDA, chunk-major), v rows, T and A_qk (chunk-major); 128-byte swizzle, 64-row boxes.
  CUtensorMap map_k, map_q, map_kd, map_v, map_t, map_aqk;
};

// ---- mma.sync / ldmatrix / cp.async ----

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
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
/// 16 bytes global -> shared, or zeros when !valid.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
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

/// 8 consecutive elements of a row (f32 or bf16, 16-byte loads when aligned) as floats.
__device__ __forceinline__ void load8(const void* base, bool is_bf16, int64_t i, float (&x)[8]) {
  if (is_bf16) {
    const bf16* h = static_cast<const bf16*>(base) + i;
    if ((reinterpret_cast<uintptr_t>(h) & 15) == 0) {
      const uint4 u = *reinterpret_cast<const uint4*>(h);
      const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const __nv_bfloat162 pair = *reinterpret_cast<const __nv_bfloat162*>(&w[j]);
        x[2 * j] = __low2float(pair), x[2 * j + 1] = __high2float(pair);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) x[j] = __bfloat162float(h[j]);
    }
  } else {
    const float* f = static_cast<const float*>(base) + i;
    if ((reinterpret_cast<uintptr_t>(f) & 15) == 0) {
      const float4 lo = *reinterpret_cast<const float4*>(f);
      const float4 hi = *reinterpret_cast<const float4*>(f + 4);
      x[0] = lo.x, x[1] = lo.y, x[2] = lo.z, x[3] = lo.w;
      x[4] = hi.x, x[5] = hi.y, x[6] = hi.z, x[7] = hi.w;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) x[j] = f[j];
    }
  }
}
__device__ __forceinline__ uint4 pack8_bf16(const float (&x)[8]) {
  return make_uint4(pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]), pack_bf16(x[4], x[5]),
                    pack_bf16(x[6], x[7]));
}
__device__ __forceinline__ void unpack8_bf16(const uint4 u, float (&x)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[j]));
    x[2 * j] = f.x, x[2 * j + 1] = f.y;
  }
}
/// Two consecutive bf16 of shared memory as floats.
__device__ __forceinline__ float2 load2_bf16(const bf16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

// The state kernel's stage tiles arrive by TMA in boxes of 64 rows x 64 bf16 columns (128 bytes)
// with the 128-byte swizzle: piece p (16 bytes) of row r sits at piece p ^ (r % 8), so the eight
// rows an ldmatrix phase reads hit distinct banks without padding. v's tile at VT = 32 has rows
// of 64 bytes in the 64-byte swizzle (piece p at p ^ ((r / 2) % 4)). The kernel computes each
// lane's swizzled offsets once (SwizzledOffsets); a read adds compile-time constants to them.
constexpr int kBox = kC * 64;             // bf16 elements of a 64 x 64 box
constexpr uint32_t kBoxBytes = kBox * 2;  // 8 KB
constexpr uint32_t kRowBytes = 128;       // a box row

/// acc[2 NP] (16 rows x 16 NP columns) += A B^T for one 16-deep step: A the fragment af, B's
/// ldmatrix rows at addr (n-tile pairs 16 rows apart), B stored [n][k].
template <int NP>
__device__ __forceinline__ void mma_bn(float (&acc)[2 * NP][4], const uint32_t (&af)[4],
                                       uint32_t addr) {
#pragma unroll
  for (int np = 0; np < NP; ++np) {
    uint32_t bfr[4];
    ldsm_x4(bfr, addr + np * 16 * kRowBytes);
    mma_bf16(acc[2 * np], af, bfr[0], bfr[1]);
    mma_bf16(acc[2 * np + 1], af, bfr[2], bfr[3]);
  }
}
/// The same with B stored [k][n] (transposed ldmatrix), the n-tile pairs at addr[np].
template <int NP>
__device__ __forceinline__ void mma_bt(float (&acc)[2 * NP][4], const uint32_t (&af)[4],
                                       const uint32_t (&addr)[NP]) {
#pragma unroll
  for (int np = 0; np < NP; ++np) {
    uint32_t bfr[4];
    ldsm_x4_trans(bfr, addr[np]);
    mma_bf16(acc[2 * np], af, bfr[0], bfr[1]);
    mma_bf16(acc[2 * np + 1], af, bfr[2], bfr[3]);
  }
}
/// The A fragment of the 16 x 16 block of a row-major tile at a (its row m0, column k0).
__device__ __forceinline__ void load_a(uint32_t (&af)[4], const bf16* a, int lda, int lane) {
  ldsm_x4(af, a + a_row(lane) * lda + a_col(lane));
}

/// c += a b, m16n8k8, tf32 operands, f32 accumulators.
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
/// acc (16 x 8) += X Y over 8 K8 columns of X: f32 row-major tiles, X at its (row, column)
/// start with pitch ldx, Y [k][n] at its start with pitch ldy; tf32 products.
template <int K8>
__device__ __forceinline__ void mma_tf32_tiles(float (&acc)[4], const float* x, int ldx,
                                               const float* y, int ldy, int lane) {
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int kk = 0; kk < K8; ++kk) {
    const float* xk = x + kk * 8;
    const float* yk = y + kk * 8 * ldy;
    const uint32_t a[4] = {to_tf32(xk[g * ldx + c]), to_tf32(xk[(g + 8) * ldx + c]),
                           to_tf32(xk[g * ldx + c + 4]), to_tf32(xk[(g + 8) * ldx + c + 4])};
    mma_tf32(acc, a, to_tf32(yk[c * ldy + g]), to_tf32(yk[(c + 4) * ldy + g]));
  }
}
/// The 16 x 8 accumulator tile times f, to the f32 row-major tile at dst.
__device__ __forceinline__ void store_tile_f32(float* dst, int ld, const float (&acc)[4], float f,
                                               int lane) {
  const int g = lane >> 2, c = lane & 3;
  dst[g * ld + 2 * c] = f * acc[0], dst[g * ld + 2 * c + 1] = f * acc[1];
  dst[(g + 8) * ld + 2 * c] = f * acc[2], dst[(g + 8) * ld + 2 * c + 1] = f * acc[3];
}

// ---- prepare: one chunk of one value head ----
constexpr int kLdG = kD + 8;  // f32 row pitch of KDA's per-channel G tile (a fragment's float2
                              // reads hit distinct banks)
/// KDA keeps G in log2 units (G log2(e)): its exponents are differences that ex2.approx.ftz takes
/// as they are (no range fix-ups; results below 2^-126 flush to zero). The reference-point factors
/// inside a 16-row block stay below 2^kMaxFactorExponent2 ~ e^60 ~ 1e26 (the CPU body's bound), far
/// from bf16's and fp32's 3.4e38.
constexpr float kMaxFactorExponent2 = 86.5f;
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

template <bool kKda>
struct PrepareSmem {
  bf16 q[kC * kLdQK];  // raw q rows (zeros past the sequence); A_kk and T (f32) alias q and k
  bf16 k[kC * kLdQK];
  float m[32 * 40];  // the inverse's block products (pitch 40: B fragments hit distinct banks)
  float qinv[kC], kinv[kC], G[kC], beta[kC];  // G: GDN's scanned scalar gate
  float Gc[kKda ? kC * kLdG : 4];  // KDA: G log2(e) per channel, [64][kLdG]; rows past n repeat
                                   // G_{n-1}
};
static_assert(2 * kC * kLdF * sizeof(float) <= 2 * kC * kLdQK * sizeof(bf16));

/// KDA: the state kernel's tiles Kg = K exp(G) / |k|, Qg = scale Q exp(G) / |q| and
/// Kd = K exp(G_{n-1} - G) / |k| (zeros past n, since the q and k rows are), and the per-channel
/// decay exp(G_{n-1}[c]).
__device__ __forceinline__ void kda_tiles(const MmaArgs& a, const PrepareSmem<true>& s,
                                          int64_t chunk_head) {
  const float* g_last = s.Gc + (kC - 1) * kLdG;
  const int64_t tile = chunk_head * kC * kD;
  for (int e = threadIdx.x; e < kC * kD / 8; e += blockDim.x) {
    const int t = e / (kD / 8), c0 = e % (kD / 8) * 8;
    float kx[8], qx[8], kg[8], qg[8], kd[8];
    unpack8_bf16(*reinterpret_cast<const uint4*>(s.k + t * kLdQK + c0), kx);
    unpack8_bf16(*reinterpret_cast<const uint4*>(s.q + t * kLdQK + c0), qx);
    const float ki = s.kinv[t], qi = s.qinv[t];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float G = s.Gc[t * kLdG + c0 + i], eg = exp2_ftz(G);
      kg[i] = kx[i] * ki * eg;
      qg[i] = qx[i] * qi * eg;
      kd[i] = kx[i] * ki * exp2_ftz(g_last[c0 + i] - G);
    }
    const int64_t at = tile + t * kD + c0;
    *reinterpret_cast<uint4*>(a.kg + at) = pack8_bf16(kg);
    *reinterpret_cast<uint4*>(a.qg + at) = pack8_bf16(qg);
    *reinterpret_cast<uint4*>(a.kd + at) = pack8_bf16(kd);
  }
  for (int c = threadIdx.x; c < kD; c += blockDim.x)
    a.vec[chunk_head * 4 * kC + c] = exp2_ftz(g_last[c]);
}

/// KDA: sum_c k_t[c] k_j[c] exp(G_t[c] - G_j[c]) and the same with q_t (raw rows: the norms, scale
/// and beta come after) for warp w's rows t = 16 w .., columns j <= t, as the fragments of
/// kk / qk (8 column tiles of 8). As the CPU body: against the block's first row r,
///   sum_c k_t[c] exp(G_t[c] - G_r[c]) * k_j[c] exp(G_r[c] - G_j[c]),
/// left factors <= 1, right ones <= 1 for j < r and <= 2^range inside the block (G in log2 units),
/// with range = max_c (G_r[c] - G_{r+15}[c]); past kMaxFactorExponent2 the diagonal block is summed
/// pair by pair instead, every exponent G_t - G_j <= 0 (decay that strong is rare).
__device__ __forceinline__ void kda_products(const PrepareSmem<true>& s, int warp, int lane,
                                             float (&kk)[8][4], float (&qk)[8][4]) {
  const int g = lane >> 2, c = lane & 3, r = warp * 16;
  const float* Gr = s.Gc + r * kLdG;
  float range = 0.0f;
  for (int i = lane; i < kD; i += 32) range = fmaxf(range, Gr[i] - Gr[15 * kLdG + i]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) range = fmaxf(range, __shfl_xor_sync(0xffffffffu, range, o));
  const bool factored = range <= kMaxFactorExponent2;
  const int tiles = 2 * warp + (factored ? 2 : 0);  // column tiles of 8 the products cover
#pragma unroll 2
  for (int ks = 0; ks < kD / 16; ++ks) {
    const int ch = ks * 16 + 2 * c;
    const float2 gr[2] = {*reinterpret_cast<const float2*>(Gr + ch),
                          *reinterpret_cast<const float2*>(Gr + ch + 8)};
    uint32_t ak[4], aq[4];  // rows r + g (+ 8), channels ch (+ 8)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = r + g + 8 * (i & 1), col = ch + 8 * (i >> 1);
      const float2 gt = *reinterpret_cast<const float2*>(s.Gc + row * kLdG + col);
      const float f0 = exp2_ftz(gt.x - gr[i >> 1].x), f1 = exp2_ftz(gt.y - gr[i >> 1].y);
      const float2 kv = load2_bf16(s.k + row * kLdQK + col);
      const float2 qv = load2_bf16(s.q + row * kLdQK + col);
      ak[i] = pack_bf16(kv.x * f0, kv.y * f1);
      aq[i] = pack_bf16(qv.x * f0, qv.y * f1);
    }
#pragma unroll
    for (int j8 = 0; j8 < 8; ++j8) {
      if (j8 >= tiles) break;
      const int row = j8 * 8 + g;  // column j of the products
      uint32_t bf[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float2 gj = *reinterpret_cast<const float2*>(s.Gc + row * kLdG + ch + 8 * h);
        const float2 kv = load2_bf16(s.k + row * kLdQK + ch + 8 * h);
        bf[h] = pack_bf16(kv.x * exp2_ftz(gr[h].x - gj.x), kv.y * exp2_ftz(gr[h].y - gj.y));
      }
      mma_bf16(kk[j8], ak, bf[0], bf[1]);
      mma_bf16(qk[j8], aq, bf[0], bf[1]);
    }
  }
  if (factored) return;
#pragma unroll
  for (int j8 = 0; j8 < 8; ++j8) {
    if (j8 >> 1 != warp) continue;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int t = r + g + 8 * (e >> 1), j = j8 * 8 + 2 * c + (e & 1);
      float sk = 0.0f, sq = 0.0f;
      if (j <= t) {
        for (int i = 0; i < kD; ++i) {
          const float kjd = __bfloat162float(s.k[j * kLdQK + i]) *
                            exp2_ftz(s.Gc[t * kLdG + i] - s.Gc[j * kLdG + i]);
          sk += __bfloat162float(s.k[t * kLdQK + i]) * kjd;
          sq += __bfloat162float(s.q[t * kLdQK + i]) * kjd;
        }
      }
      kk[j8][e] = sk, qk[j8][e] = sq;
    }
  }
}

/// GDN: the per-token factors out (warp 0; G scanned in place, two tokens a lane).
__device__ __forceinline__ void gdn_vec(const MmaArgs& a, PrepareSmem<false>& s, int n, int lane,
                                        int64_t chunk_head) {
  const int t = 2 * lane;
  const float g0 = s.G[t], g1 = s.G[t + 1];
  float sum = g0 + g1;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float up = __shfl_up_sync(0xffffffffu, sum, o);
    if (lane >= o) sum += up;
  }
  const float G0 = sum - g1, G1 = sum;
  const int last = max(n - 1, 0);
  const float L0 = __shfl_sync(0xffffffffu, G0, last >> 1);
  const float L1 = __shfl_sync(0xffffffffu, G1, last >> 1);
  const float Gn = (last & 1) ? L1 : L0;
  s.G[t] = G0, s.G[t + 1] = G1;
  float* vec = a.vec + chunk_head * 4 * kC;
  const float e0 = __expf(G0), e1 = __expf(G1);
  *reinterpret_cast<float2*>(vec + t) = make_float2(s.kinv[t] * e0, s.kinv[t + 1] * e1);
  *reinterpret_cast<float2*>(vec + kC + t) = make_float2(s.qinv[t] * e0, s.qinv[t + 1] * e1);
  *reinterpret_cast<float2*>(vec + 2 * kC + t) =
      make_float2(s.kinv[t] * __expf(Gn - G0), s.kinv[t + 1] * __expf(Gn - G1));
  *reinterpret_cast<float2*>(vec + 3 * kC + t) = make_float2(G0, G1);
}

/// kAsync: MmaArgs::qk_async (a separate instantiation: the staged path's registers stay its own).
template <bool kKda, bool kAsync>
__device__ __forceinline__ void prepare_chunk(const MmaArgs& a, PrepareSmem<kKda>& s, int hv,
                                              int chunk) {
  const int kh = hv / a.group;
  const int b = a.chunk_seq[chunk];
  if (b < 0) return;
  int begin, end;
  chunk_sequence_range(a.cu, a.cu_stride, a.T, b, begin, end);
  const int t0 = begin + (chunk - a.chunk_first[b]) * kC;
  const int n = min(kC, end - t0);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float* A = reinterpret_cast<float*>(s.q);  // [64][kLdF] A_kk, strictly lower
  float* Tm = A + kC * kLdF;                 // [64][kLdF] (I + A_kk)^-1
  const int64_t chunk_head = int64_t(chunk) * a.HV + hv;

  // Gates and betas, then q and k: a row is 16 pieces of 8 channels, one per lane of a half warp,
  // so the norms reduce within the half warp. All of a tile's loads are issued before any is used.
  if constexpr (kKda) {
    if (tid < kC)
      s.beta[tid] =
          tid < n ? a.beta[int64_t(t0 + tid) * a.beta_st + int64_t(hv) * a.beta_sh] : 0.0f;
    // The raw gate tile into Gc (zeros past n), in flight beside the q and k loads; scanned below.
    const float* g = a.g + int64_t(hv) * a.g_sh;
    if (a.g_vec) {
      for (int e = tid; e < kC * kD / 4; e += blockDim.x) {
        const int t = e / (kD / 4), c4 = e % (kD / 4) * 4;
        cp_async16(s.Gc + t * kLdG + c4, t < n ? g + int64_t(t0 + t) * a.g_st + c4 : g, t < n);
      }
      cp_async_commit();
    } else {
      for (int e = tid; e < kC * kD; e += blockDim.x) {
        const int t = e / kD, c = e % kD;
        s.Gc[t * kLdG + c] = t < n ? g[int64_t(t0 + t) * a.g_st + c] : 0.0f;
      }
    }
  } else if (tid < kC) {  // raw; gdn_vec scans them
    s.G[tid] = tid < n ? a.g[int64_t(t0 + tid) * a.g_st + int64_t(hv) * a.g_sh] : 0.0f;
  } else {
    const int t = tid - kC;
    s.beta[t] = t < n ? a.beta[int64_t(t0 + t) * a.beta_st + int64_t(hv) * a.beta_sh] : 0.0f;
  }
  const bool writes_copies = !kKda && a.copies && hv % a.group == 0;
  const int piece = tid & 15, r0 = tid >> 4;
  // 1 / |row| (times scale for q) of the tile row r from its sum of squares ss; 0 past n.
  // (rsqrtf: 2 ulp, far inside bf16's rounding of the products it scales.)
  const auto inverse_norm = [&](bool is_q, int r, float ss) {
    if (r >= n) return 0.0f;
    const float inv = a.l2norm ? rsqrtf(ss + kL2NormEps) : 1.0f;
    return is_q ? a.scale * inv : inv;
  };
  if constexpr (kAsync) {
#pragma unroll
    for (int which = 0; which < 2; ++which) {
      const bool is_q = which == 0;
      const bf16* src = static_cast<const bf16*>(is_q ? a.q : a.k);
      const int64_t st = is_q ? a.q_st : a.k_st;
      const bf16* row = src + int64_t(kh) * (is_q ? a.q_sh : a.k_sh) + piece * 8 + (t0 + r0) * st;
      bf16* tile = is_q ? s.q : s.k;
#pragma unroll
      for (int j = 0; j < 8; ++j, row += 8 * st) {
        const int r = r0 + 8 * j;
        cp_async16(tile + r * kLdQK + piece * 8, r < n ? row : src, r < n);
      }
    }
    cp_async_commit();
  } else {
#pragma unroll
    for (int which = 0; which < 2; ++which) {
      const bool is_q = which == 0;
      const void* src = is_q ? a.q : a.k;
      const bool src_bf16 = is_q ? a.q_bf16 : a.k_bf16;
      const int64_t row_stride = is_q ? a.q_st : a.k_st;
      const int64_t at = int64_t(kh) * (is_q ? a.q_sh : a.k_sh) + piece * 8;
      float x[8][8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int r = r0 + 8 * j;
        if (r < n) {
          load8(src, src_bf16, int64_t(t0 + r) * row_stride + at, x[j]);
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e) x[j][e] = 0.0f;
        }
      }
      bf16* tile = is_q ? s.q : s.k;
      bf16* copy = const_cast<bf16*>(is_q ? a.q16 : a.k16);
      const int64_t copy_st = is_q ? a.q16_st : a.k16_st;
      const int64_t copy_at = int64_t(kh) * (is_q ? a.q16_sh : a.k16_sh) + piece * 8;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int r = r0 + 8 * j;
        float ss = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) ss += x[j][e] * x[j][e];
#pragma unroll
        for (int o = 8; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const uint4 packed = pack8_bf16(x[j]);
        *reinterpret_cast<uint4*>(tile + r * kLdQK + piece * 8) = packed;
        if (writes_copies && r < n)
          *reinterpret_cast<uint4*>(copy + int64_t(t0 + r) * copy_st + copy_at) = packed;
        if (piece == 0) (is_q ? s.qinv : s.kinv)[r] = inverse_norm(is_q, r, ss);
      }
    }
  }
  if (a.copies) {  // this value head's v rows
    bf16* v16 = const_cast<bf16*>(a.v16);
    const int per_row = a.d_v / 8;
    for (int i = tid; i < n * per_row; i += blockDim.x) {
      const int t = i / per_row, col = (i % per_row) * 8;
      float x[8];
      load8(a.v, a.v_bf16, int64_t(t0 + t) * a.v_st + int64_t(hv) * a.v_sh + col, x);
      *reinterpret_cast<uint4*>(v16 + int64_t(t0 + t) * a.v16_st + int64_t(hv) * a.v16_sh + col) =
          pack8_bf16(x);
    }
  }
  if constexpr (kKda || kAsync) {
    cp_async_wait<0>();
    __syncthreads();
  }
  if constexpr (kAsync) {  // the norms from the tiles, a thread a row (q: threads 0-63, k: 64-127)
    const bool is_q = tid < kC;
    const int r = tid & (kC - 1);
    const bf16* row = (is_q ? s.q : s.k) + r * kLdQK;
    float ss = 0.0f;
#pragma unroll
    for (int p = 0; p < kD / 8; ++p) {
      float x[8];
      unpack8_bf16(*reinterpret_cast<const uint4*>(row + p * 8), x);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss += x[e] * x[e];
    }
    (is_q ? s.qinv : s.kinv)[r] = inverse_norm(is_q, r, ss);
  }
  if constexpr (kKda) {
    // Thread c scans channel c: G[t][c] = log2(e) sum_{s <= t} g_s[c] (d_k = 128 = blockDim).
    float run = 0.0f;
#pragma unroll 16
    for (int t = 0; t < kC; ++t) {
      run += s.Gc[t * kLdG + tid] * kLog2e;
      s.Gc[t * kLdG + tid] = run;
    }
  }
  __syncthreads();

  // K K^T and Q K^T: a warp's 16 rows, all 64 columns, over 128 channels (KDA: the decays inside).
  const int m0 = warp * 16, g = lane >> 2, c = lane & 3;
  float kk[8][4] = {}, qk[8][4] = {};
  if constexpr (kKda) {
    kda_tiles(a, s, chunk_head);
    kda_products(s, warp, lane, kk, qk);
  } else {
    if (warp == 0) gdn_vec(a, s, n, lane, chunk_head);
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      uint32_t ak[4], aq[4];
      load_a(ak, s.k + m0 * kLdQK + ks * 16, kLdQK, lane);
      load_a(aq, s.q + m0 * kLdQK + ks * 16, kLdQK, lane);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bfr[4];
        ldsm_x4(bfr, s.k + (np * 16 + bn_row(lane)) * kLdQK + ks * 16 + bn_col(lane));
        mma_bf16(kk[2 * np], ak, bfr[0], bfr[1]);
        mma_bf16(kk[2 * np + 1], ak, bfr[2], bfr[3]);
        mma_bf16(qk[2 * np], aq, bfr[0], bfr[1]);
        mma_bf16(qk[2 * np + 1], aq, bfr[2], bfr[3]);
      }
    }
  }
  __syncthreads();  // G is scanned; the q and k tiles are dead (A and T alias them)

  // A_kk[t, j] = beta_t exp(G_t - G_j) <k_t, k_j> / (|k_t| |k_j|) (j < t) into shared memory;
  // A_qk[t, j] = exp(G_t - G_j) scale <q_t, k_j> / (|q_t| |k_j|) (j <= t) out as bf16. KDA's
  // products hold their decays already.
  bf16* aqk_out = a.aqk + chunk_head * kC * kC;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int t = m0 + g + 8 * h;
    const float Gt = kKda ? 0.0f : s.G[t], bk = s.beta[t] * s.kinv[t], qt = s.qinv[t];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int j = nt * 8 + 2 * c;
      float pair[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float decay = 0.0f;
        if (j + e <= t) decay = (kKda ? 1.0f : __expf(Gt - s.G[j + e])) * s.kinv[j + e];
        A[t * kLdF + j + e] = j + e < t ? bk * decay * kk[nt][2 * h + e] : 0.0f;
        pair[e] = j + e <= t ? qt * decay * qk[nt][2 * h + e] : 0.0f;
      }
      *reinterpret_cast<uint32_t*>(aqk_out + t * kC + j) = pack_bf16(pair[0], pair[1]);
    }
  }
  __syncthreads();

  // (I + A)^-1 by blocks: the four 16x16 diagonal blocks by forward substitution (a warp each, a
  // lane a column), in fp32; then T_10 = -T_11 A_10 T_00 for the 16-blocks (1, 0) and (3, 2), then
  // for the 32-block (1, 0), on tensor cores in tf32 (T is rounded to bf16 after). The blocks
  // above the diagonal that the products read are zeros.
  for (int e = tid; e < 2 * 256; e += 128) {
    const int o = (e >> 8) * 32, r = (e >> 4) & 15, col = e & 15;
    Tm[(o + r) * kLdF + o + 16 + col] = 0.0f;
  }
  if (lane < 16) {
    const int o = warp * 16;
    float x[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      float sum = r == lane ? 1.0f : 0.0f;
#pragma unroll
      for (int m = 0; m < r; ++m) sum -= A[(o + r) * kLdF + o + m] * x[m];
      x[r] = sum;
      Tm[(o + r) * kLdF + o + lane] = sum;
    }
  }
  __syncthreads();
  {  // 16-blocks: warp w takes the pair (i, j) = (2p + 1, 2p), p = w / 2, columns 8 (w % 2) ..
    const int i0 = 32 * (warp >> 1) + 16, j0 = i0 - 16, n0 = j0 + 8 * (warp & 1);
    float* m = s.m + warp * 16 * 8;  // this warp's 16 x 8 M = A_10 T_00
    float acc[4] = {};
    mma_tf32_tiles<2>(acc, A + i0 * kLdF + j0, kLdF, Tm + j0 * kLdF + n0, kLdF, lane);
    store_tile_f32(m, 8, acc, 1.0f, lane);
    __syncwarp();
    float out[4] = {};
    mma_tf32_tiles<2>(out, Tm + i0 * kLdF + i0, kLdF, m, 8, lane);
    store_tile_f32(Tm + i0 * kLdF + n0, kLdF, out, -1.0f, lane);
  }
  __syncthreads();
  // The 32-block: warp w takes rows 32 + 16 (w / 2) .., columns 16 (w % 2) .. (two 8-column tiles).
  const int r2 = 32 + 16 * (warp >> 1), c2 = 16 * (warp & 1);
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    float acc[4] = {};
    mma_tf32_tiles<4>(acc, A + r2 * kLdF, kLdF, Tm + c2 + 8 * nt, kLdF, lane);
    store_tile_f32(s.m + (r2 - 32) * 40 + c2 + 8 * nt, 40, acc, 1.0f, lane);
  }
  __syncthreads();
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    float out[4] = {};
    mma_tf32_tiles<4>(out, Tm + r2 * kLdF + 32, kLdF, s.m + c2 + 8 * nt, 40, lane);
    store_tile_f32(Tm + r2 * kLdF + c2 + 8 * nt, kLdF, out, -1.0f, lane);
  }
  __syncthreads();

  // T Diag(beta) out as bf16, 8 columns a store; the blocks above the diagonal are zeros.
  bf16* t_out = a.tmat + chunk_head * kC * kC;
  for (int e = tid; e < kC * kC / 8; e += 128) {
    const int t = e >> 3, j = (e & 7) * 8;
    float x[8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
      x[i] = j / 16 <= t / 16 ? Tm[t * kLdF + j + i] * s.beta[j + i] : 0.0f;
    *reinterpret_cast<uint4*>(t_out + t * kC + j) = pack8_bf16(x);
  }
}

/// Chunks blockIdx.y, + gridDim.y, ... (the grid's y extent is capped at 65535) of value head
/// blockIdx.x.
template <bool kKda, bool kAsync>
__global__ void __launch_bounds__(128, kKda ? 3 : 5)
    mma_prepare_kernel(const __grid_constant__ MmaArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  PrepareSmem<kKda>& s = *reinterpret_cast<PrepareSmem<kKda>*>(smem_raw);
  for (int chunk = blockIdx.y; chunk < a.max_chunks; chunk += gridDim.y) {
    prepare_chunk<kKda, kAsync>(a, s, blockIdx.x, chunk);
    __syncthreads();  // the next chunk rewrites the shared tiles
  }
}

// ---- state: the chunks of one sequence in order, VT value rows of one value head ----
// Warp w works on the value rows 16 (w % R) .. + 15 (R = VT / 16 row blocks) in role w / R:
//   roles 0 and 1: X = S^T K^T, P^T = V^T - X Diag(kg) and Delta^T = P^T T^T over tokens
//                  0-31 / 32-63 (role 1 also needs role 0's P^T: handed over in shared memory
//                  under a named barrier of the pair);
//   roles 2 and 3: X = S^T Q^T and O^T = X Diag(qg) + Delta^T A_qk^T over tokens 0-31 / 32-63;
//   every role:    S^T = exp(G_n) S^T + Delta^T Diag(kd) K over keys 32 role .. + 31, the part of
//                  the state the warp keeps in registers.
// KDA reads Kg, Qg and Kd in place of K, Q and K with their factors, and decays S^T's columns.
// Two block barriers a chunk: the stage and S^T are in; Delta^T is in.
template <int VT, bool kKda>
struct StateStage {  // filled by TMA (issue_stage); boxes 1024-byte aligned for the swizzle
  alignas(1024) bf16 k[2 * kBox];              // [keys 0-63, 64-127][64 tokens] GDN: k; KDA: Kg
  alignas(1024) bf16 q[2 * kBox];              // GDN: q rows; KDA: Qg
  alignas(1024) bf16 kd[kKda ? 2 * kBox : 8];  // KDA: Kd
  alignas(1024) bf16 t[kBox];                  // [64 tokens][64 tokens]
  alignas(1024) bf16 aqk[kBox];
  alignas(1024) bf16 v[kC * VT];  // [64 tokens][VT value rows]
  alignas(16) float vec[4 * kC];  // GDN: kg, qg, kd, G; KDA: exp(G_n[c]) (tc_vec)
};
/// The bytes a stage's copies bring (every box counts whole, zeros past the tensor included).
template <int VT, bool kKda>
constexpr uint32_t kStageBytes = (kKda ? 8 : 6) * kBox * 2 + kC* VT * 2 + 4 * kC * 4;
template <int VT, bool kKda>
struct alignas(1024) StateSmem {
  StateStage<VT, kKda> stage[2];
  bf16 st[VT * kLdQK];                 // S^T as bf16, the A operand of the products with K, Q
  bf16 p[VT * 40];                     // P^T of tokens 0-31
  bf16 delta[VT * kLdCC];              // Delta^T
  bf16 deltad[kKda ? 8 : VT * kLdCC];  // GDN: Delta^T Diag(kd)
  float o[kC * (VT + 4)];
  uint64_t full[2];  // the stages' mbarriers
};
constexpr int kPitchP = 40;
/// Dynamic shared memory a state block asks: StateSmem and room to align its start to 1024 bytes.
template <int VT, bool kKda>
constexpr size_t kStateSmemBytes = sizeof(StateSmem<VT, kKda>) + 1024;

/// One thread: chunk's tiles for value head hv, value rows v0 .., into a stage, completing on
/// `full`. KDA's Kg / Qg / Kd and every T / A_qk / vec are chunk-major (row (chunk HV + hv) 64).
template <int VT, bool kKda>
__device__ void issue_stage(const MmaArgs& a, StateStage<VT, kKda>& st, uint64_t* full, int chunk,
                            int t0, int kh, int hv, int v0) {
  const int row = (chunk * a.HV + hv) * kC;  // < 2^31 (encode_state_maps)
  mbar_expect_tx(full, kStageBytes<VT, kKda>);
#pragma unroll
  for (int box = 0; box < 2; ++box) {
    if constexpr (kKda) {
      tma_load_2d(st.k + box * kBox, &a.map_k, 64 * box, row, full);
      tma_load_2d(st.q + box * kBox, &a.map_q, 64 * box, row, full);
      tma_load_2d(st.kd + box * kBox, &a.map_kd, 64 * box, row, full);
    } else {
      tma_load_3d(st.k + box * kBox, &a.map_k, 64 * box, kh, t0, full);
      tma_load_3d(st.q + box * kBox, &a.map_q, 64 * box, kh, t0, full);
    }
  }
  tma_load_3d(st.v, &a.map_v, v0, hv, t0, full);
  tma_load_2d(st.t, &a.map_t, 0, row, full);
  tma_load_2d(st.aqk, &a.map_aqk, 0, row, full);
  bulk_load(st.vec, a.vec + int64_t(row) * 4, 4 * kC * sizeof(float), full);
}

/// Rows n .. 63 of a stage's v (and GDN's k, q) tiles to zeros: the boxes brought the next
/// sequence's rows there (zeros only past T), which must not reach this one's products even as
/// 0 x inf. KDA's tiles, T and A_qk are zeros past n already.
template <int VT, bool kKda>
__device__ void zero_tail(StateStage<VT, kKda>& st, int n) {
  constexpr int kThreads = VT * 8;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  if constexpr (!kKda) {
    for (int e = threadIdx.x; e < 2 * kC * 8; e += kThreads) {  // 2 boxes x 64 rows x 8 pieces
      const int r = (e >> 3) & (kC - 1), at = (e >> 9) * kBox + r * 64 + (e & 7) * 8;
      if (r >= n) {
        *reinterpret_cast<uint4*>(st.k + at) = zero;
        *reinterpret_cast<uint4*>(st.q + at) = zero;
      }
    }
  }
  for (int e = threadIdx.x; e < kC * VT / 8; e += kThreads) {
    const int r = e / (VT / 8);
    if (r >= n) *reinterpret_cast<uint4*>(st.v + e * 8) = zero;
  }
}

/// o rows t0 .. t0 + n of value head hv, columns v0 .. v0 + VT, from the f32 tile [64][VT + 4]:
/// 16-byte stores when the rows allow (o_vec), else one element a thread.
template <int VT>
__device__ __forceinline__ void store_o(const MmaArgs& a, const float* tile, int t0, int n, int hv,
                                        int v0) {
  constexpr int kThreads = VT * 8;
  if (a.o_vec && a.o_bf16) {  // 8 values a store
    constexpr int kPer = VT / 8;
    for (int i = threadIdx.x; i < n * kPer; i += kThreads) {
      const int t = i / kPer, col = (i % kPer) * 8;
      const float4 x0 = *reinterpret_cast<const float4*>(tile + t * (VT + 4) + col);
      const float4 x1 = *reinterpret_cast<const float4*>(tile + t * (VT + 4) + col + 4);
      uint4 u;
      u.x = pack_bf16(x0.x, x0.y), u.y = pack_bf16(x0.z, x0.w);
      u.z = pack_bf16(x1.x, x1.y), u.w = pack_bf16(x1.z, x1.w);
      *reinterpret_cast<uint4*>(static_cast<bf16*>(a.o) + int64_t(t0 + t) * a.o_st +
                                int64_t(hv) * a.o_sh + v0 + col) = u;
    }
  } else if (a.o_vec) {  // 4 values a store
    constexpr int kPer = VT / 4;
    for (int i = threadIdx.x; i < n * kPer; i += kThreads) {
      const int t = i / kPer, col = (i % kPer) * 4;
      *reinterpret_cast<float4*>(static_cast<float*>(a.o) + int64_t(t0 + t) * a.o_st +
                                 int64_t(hv) * a.o_sh + v0 + col) =
          *reinterpret_cast<const float4*>(tile + t * (VT + 4) + col);
    }
  } else {
    for (int i = threadIdx.x; i < n * VT; i += kThreads) {
      const int t = i / VT, col = i % VT;
      const int64_t at = int64_t(t0 + t) * a.o_st + int64_t(hv) * a.o_sh + v0 + col;
      const float x = tile[t * (VT + 4) + col];
      if (a.o_bf16)
        static_cast<bf16*>(a.o)[at] = __float2bfloat16_rn(x);
      else
        static_cast<float*>(a.o)[at] = x;
    }
  }
}

/// Named barrier `id` of `threads` threads: arrive (no wait) / wait for the others.
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

template <int VT, bool kKda>
__global__ void __launch_bounds__(VT * 8, 1) mma_state_kernel(const __grid_constant__ MmaArgs a) {
  constexpr int kRowBlocks = VT / 16;
  const int b = blockIdx.x, hv = blockIdx.y, v0 = blockIdx.z * VT;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rb = warp % kRowBlocks, role = warp / kRowBlocks;
  const int half = role & 1, tok0 = half * 32;  // this warp's tokens in X, Delta and O
  const bool o_warp = role >= 2;
  const int g = lane >> 2, c = lane & 3;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  StateSmem<VT, kKda>& s = *reinterpret_cast<StateSmem<VT, kKda>*>(
      smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023));  // 1024-byte aligned
  if (threadIdx.x == 0) {
    mbar_init(&s.full[0], 1);
    mbar_init(&s.full[1], 1);
    mbar_init_fence();
  }

  // This warp's part of S^T: rows 16 rb + {g, g + 8}, keys 32 role + 8 nt + 2c + {0, 1}.
  const int row0 = rb * 16 + g;
  const int key0 = role * 32 + 2 * c;

  // This lane's ldmatrix row offsets in the swizzled stage tiles (bytes from the tile):
  // bn[K2]: B [n][k] rows tok0 + bn_row, columns 16 K2 + bn_col of a box (the row's piece
  //         (2 K2 + bn_col / 8) ^ (row % 8), row % 8 = lane % 8); a read adds box and n-tile;
  // bt[np]: B [k][n] rows bt_row, columns 32 role + 16 np + bt_col (S's update; + 16 ks rows);
  // vt:     v rows tok0 + 8 (lane / 16) + lane % 8, columns 16 rb + 8 ((lane / 8) % 2).
  const int lane7 = lane & 7;
  uint32_t bn[4], bt[2];
#pragma unroll
  for (int k2 = 0; k2 < 4; ++k2)
    bn[k2] = (tok0 + bn_row(lane)) * kRowBytes + (((2 * k2 | (bn_col(lane) >> 3)) ^ lane7) << 4);
#pragma unroll
  for (int np = 0; np < 2; ++np)
    bt[np] = (role >> 1) * kBoxBytes + bt_row(lane) * kRowBytes +
             (((((role * 4 + np * 2) & 7) | (bt_col(lane) >> 3)) ^ lane7) << 4);
  uint32_t vt_off;
  {
    const int vrow = tok0 + 8 * (lane >> 4) + lane7, vpiece = 2 * rb + ((lane >> 3) & 1);
    vt_off = VT == 64 ? vrow * kRowBytes + ((vpiece ^ lane7) << 4)
                      : vrow * 64 + (((vpiece & 3) ^ ((lane >> 1) & 3)) << 4);
  }
  const int64_t state_floats = int64_t(a.d_v) * kD;
  float S[4][4];
  const int64_t initial = chunk_pool_slot(a.initial_slots, a.initial_stride, b, a.num_slots);
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = row0 + (e >> 1) * 8, key = key0 + nt * 8 + (e & 1);
      const int64_t at = (initial * a.HV + hv) * state_floats + int64_t(v0 + row) * kD + key;
      S[nt][e] = initial < 0   ? 0.0f
                 : a.pool_bf16 ? __bfloat162float(static_cast<const bf16*>(a.pool)[at])
                               : static_cast<const float*>(a.pool)[at];
    }
  const auto store_st = [&] {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<uint32_t*>(s.st + (row0 + h * 8) * kLdQK + key0 + nt * 8) =
            pack_bf16(S[nt][2 * h], S[nt][2 * h + 1]);
  };
  store_st();

  int begin, end;
  chunk_sequence_range(a.cu, a.cu_stride, a.T, b, begin, end);
  const int first = a.chunk_first[b], last = a.chunk_first[b + 1];
  int64_t boundary = a.boundary_first[b];
  const auto chunk_t0 = [&](int chunk) { return begin + (chunk - first) * kC; };
  const int kh = hv / a.group;
  __syncthreads();  // the mbarriers are initialised
  if (threadIdx.x == 0 && first < last)
    issue_stage<VT, kKda>(a, s.stage[0], &s.full[0], first, begin, kh, hv, v0);
  int prev_t0 = 0, prev_n = 0;
  for (int chunk = first; chunk < last; ++chunk) {
    const int t0 = chunk_t0(chunk), n = min(kC, end - t0), use = chunk - first;
    StateStage<VT, kKda>& st = s.stage[use & 1];
    mbar_wait(&s.full[use & 1], (use >> 1) & 1);
    if (n < kC) zero_tail(st, n);
    __syncthreads();  // the stage and S^T are in; the last chunk's o tile is complete
    // The next chunk into the other stage, whose readers all passed the barrier.
    if (threadIdx.x == 0 && chunk + 1 < last)
      issue_stage<VT, kKda>(a, s.stage[(use + 1) & 1], &s.full[(use + 1) & 1], chunk + 1,
                            chunk_t0(chunk + 1), kh, hv, v0);
    if (chunk > first) store_o<VT>(a, s.o, prev_t0, prev_n, hv, v0);
    prev_t0 = t0, prev_n = n;
    const float* kg = st.vec;  // GDN's per-token factors
    const float* qg = st.vec + kC;
    const float* kd = st.vec + 2 * kC;
    const float Gn = kKda ? 0.0f : st.vec[3 * kC + n - 1];

    // X = S^T K^T (roles 0, 1) or S^T Q^T (roles 2, 3): 16 value rows x 32 tokens, 128 keys.
    float X[4][4] = {};
    {
      const uint32_t kq = smem_addr(o_warp ? st.q : st.k);
#pragma unroll
      for (int ks = 0; ks < kD / 16; ++ks) {
        uint32_t af[4];
        load_a(af, s.st + rb * 16 * kLdQK + ks * 16, kLdQK, lane);
        mma_bn<2>(X, af, kq + (ks >> 2) * kBoxBytes + bn[ks & 3]);
      }
    }
    if (!o_warp) {
      // P^T = V^T - X Diag(kg), V^T's fragments by transposed ldmatrix of the V tile [t][row].
      uint32_t vt[2][4];
#pragma unroll
      for (int j = 0; j < 2; ++j) ldsm_x4_trans(vt[j], smem_addr(st.v) + vt_off + j * 16 * VT * 2);
      uint32_t pa[2][4];  // A fragments of P^T, tokens tok0 + 16 ks ..
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const float2 f = kKda ? make_float2(1.0f, 1.0f)
                              : *reinterpret_cast<const float2*>(kg + tok0 + nt * 8 + 2 * c);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const __nv_bfloat162 v2 =
              *reinterpret_cast<const __nv_bfloat162*>(&vt[nt >> 1][(nt & 1) * 2 + h]);
          pa[nt >> 1][(nt & 1) * 2 + h] = pack_bf16(__low2float(v2) - X[nt][2 * h] * f.x,
                                                    __high2float(v2) - X[nt][2 * h + 1] * f.y);
        }
      }
      float D[4][4] = {};  // Delta^T, this warp's 32 tokens
      if (half == 0) {
#pragma unroll
        for (int ks = 0; ks < 2; ++ks)
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int half_k = 0; half_k < 2; ++half_k)
              *reinterpret_cast<uint32_t*>(s.p + (row0 + 8 * h) * kPitchP + ks * 16 + 8 * half_k +
                                           2 * c) = pa[ks][2 * half_k + h];
        named_arrive(1 + rb, 64);
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) mma_bn<2>(D, pa[ks], smem_addr(st.t) + bn[ks]);
      } else {
        named_sync(1 + rb, 64);
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
          uint32_t af[4];
          load_a(af, s.p + rb * 16 * kPitchP + ks * 16, kPitchP, lane);
          mma_bn<2>(D, af, smem_addr(st.t) + bn[ks]);
        }
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) mma_bn<2>(D, pa[ks], smem_addr(st.t) + bn[2 + ks]);
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int t = tok0 + nt * 8 + 2 * c;
        const float2 f = kKda ? make_float2(1.0f, 1.0f) : *reinterpret_cast<const float2*>(kd + t);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row0 + h * 8;
          *reinterpret_cast<uint32_t*>(s.delta + row * kLdCC + t) =
              pack_bf16(D[nt][2 * h], D[nt][2 * h + 1]);
          if constexpr (!kKda) {
            *reinterpret_cast<uint32_t*>(s.deltad + row * kLdCC + t) =
                pack_bf16(D[nt][2 * h] * f.x, D[nt][2 * h + 1] * f.y);
          }
        }
      }
    }
    __syncthreads();  // Delta^T is in; every warp has read S^T

    if (o_warp) {  // O^T = X Diag(qg) + Delta^T A_qk^T (A_qk is lower triangular)
      if constexpr (!kKda) {
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const float2 f = *reinterpret_cast<const float2*>(qg + tok0 + nt * 8 + 2 * c);
#pragma unroll
          for (int h = 0; h < 2; ++h) X[nt][2 * h] *= f.x, X[nt][2 * h + 1] *= f.y;
        }
      }
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        if (ks >= 2 && half == 0) break;
        uint32_t af[4];
        load_a(af, s.delta + rb * 16 * kLdCC + ks * 16, kLdCC, lane);
        mma_bn<2>(X, af, smem_addr(st.aqk) + bn[ks]);
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = row0 + (e >> 1) * 8, t = tok0 + nt * 8 + 2 * c + (e & 1);
          s.o[t * (VT + 4) + row] = X[nt][e];
        }
    }

    // S^T = exp(G_n) S^T + Delta^T Diag(kd) K over this warp's 32 keys (KDA: S^T's columns
    // decay by exp(G_n[c]) and Kd holds kd).
    if constexpr (kKda) {
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const float2 d = *reinterpret_cast<const float2*>(st.vec + key0 + nt * 8);
        S[nt][0] *= d.x, S[nt][1] *= d.y, S[nt][2] *= d.x, S[nt][3] *= d.y;
      }
    } else {
      const float decay = __expf(Gn);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) S[nt][e] *= decay;
    }
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      uint32_t af[4];
      load_a(af, (kKda ? s.delta : s.deltad) + rb * 16 * kLdCC + ks * 16, kLdCC, lane);
      const uint32_t kt = smem_addr(kKda ? st.kd : st.k) + ks * 16 * kRowBytes;
      const uint32_t at[2] = {kt + bt[0], kt + bt[1]};
      mma_bt<2>(S, af, at);
    }
    if (n == kC) {
      if (a.chunk_states != nullptr && boundary < a.num_chunk_states) {
        float* dst = a.chunk_states + (boundary * a.HV + hv) * state_floats;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            *reinterpret_cast<float2*>(dst + int64_t(v0 + row0 + h * 8) * kD + key0 + nt * 8) =
                make_float2(S[nt][2 * h], S[nt][2 * h + 1]);
      }
      ++boundary;
    }
    store_st();
  }
  if (first < last) {
    __syncthreads();  // the last o tile is complete
    store_o<VT>(a, s.o, prev_t0, prev_n, hv, v0);
  }

  const int64_t final_slot = chunk_pool_slot(a.final_slots, a.final_stride, b, a.num_slots);
  if (final_slot < 0) return;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = row0 + (e >> 1) * 8, key = key0 + nt * 8 + (e & 1);
      const int64_t at = (final_slot * a.HV + hv) * state_floats + int64_t(v0 + row) * kD + key;
      if (a.pool_bf16)
        static_cast<bf16*>(a.pool)[at] = __float2bfloat16_rn(S[nt][e]);
      else
        static_cast<float*>(a.pool)[at] = S[nt][e];
    }
}

int sm_count() {
  static const int count = [] {
    int device = 0, n = 0;
    HYLA_CUDA_CHECK(cudaGetDevice(&device));
    HYLA_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    return n;
  }();
  return count;
}

/// The state kernel's tensor maps (MmaArgs::map_*) for value tiles of VT columns. The rows the
/// body reads as they are passed bf16_rows (16-byte aligned, strides multiples of 16 bytes and
/// growing outward), as TMA wants.
void encode_state_maps(MmaArgs& a, bool kda, int VT) {
  const uint64_t chunk_rows = uint64_t(a.max_chunks) * uint64_t(a.HV) * kC;
  HYLA_CHECK(chunk_rows < (uint64_t(1) << 31), "chunk workspace of ", chunk_rows,
             " rows: TMA coordinates are 32-bit");
  const auto chunk_major = [&](const bf16* base, uint64_t cols) {  // [chunk_rows, cols]
    const uint64_t dims[2] = {cols, chunk_rows}, strides[1] = {cols * sizeof(bf16)};
    const uint32_t box[2] = {64, kC};
    return bf16_tensor_map(2, base, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
  };
  // [T, heads, cols] rows with the given strides (elements), boxes of bc columns x 64 tokens.
  const auto token_major = [&](const bf16* base, uint64_t cols, uint64_t heads, int64_t st,
                               int64_t sh, uint32_t bc) {
    const uint64_t dims[3] = {cols, heads, uint64_t(a.T)};
    const uint64_t strides[2] = {uint64_t(sh) * sizeof(bf16), uint64_t(st) * sizeof(bf16)};
    const uint32_t box[3] = {bc, 1, kC};
    return bf16_tensor_map(3, base, dims, strides, box,
                           bc == 64 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B);
  };
  a.map_t = chunk_major(a.tmat, kC);
  a.map_aqk = chunk_major(a.aqk, kC);
  if (kda) {
    a.map_k = chunk_major(a.kg, kD);
    a.map_q = chunk_major(a.qg, kD);
    a.map_kd = chunk_major(a.kd, kD);
  } else {
    a.map_k = token_major(a.k16, kD, uint64_t(a.H), a.k16_st, a.k16_sh, 64);
    a.map_q = token_major(a.q16, kD, uint64_t(a.H), a.q16_st, a.q16_sh, 64);
  }
  a.map_v = token_major(a.v16, uint64_t(a.d_v), uint64_t(a.HV), a.v16_st, a.v16_sh, uint32_t(VT));
}

template <int VT, bool kKda>
void launch_state(MmaArgs& a, cudaStream_t s) {
  if (a.T > 0) encode_state_maps(a, kKda, VT);  // else no sequence has a chunk
  allow_dynamic_smem(mma_state_kernel<VT, kKda>, kStateSmemBytes<VT, kKda>);
  mma_state_kernel<VT, kKda><<<dim3(unsigned(a.B), unsigned(a.HV), unsigned(a.d_v / VT)), VT * 8,
                               kStateSmemBytes<VT, kKda>, s>>>(a);
  HYLA_CUDA_CHECK_LAUNCH();
}

template <bool kKda, bool kAsync>
void launch_prepare(const MmaArgs& a, cudaStream_t s) {
  allow_dynamic_smem(mma_prepare_kernel<kKda, kAsync>, sizeof(PrepareSmem<kKda>));
  mma_prepare_kernel<kKda, kAsync><<<dim3(unsigned(a.HV), unsigned(std::min(a.max_chunks, 65535))),
                                     128, sizeof(PrepareSmem<kKda>), s>>>(a);
  HYLA_CUDA_CHECK_LAUNCH();
}

}  // namespace

Status gated_delta_rule_chunk_mma(const GatedDeltaRuleParams& p, Stream stream) {
  const ChunkWorkspaceShape shape = chunk_workspace_shape(p);
  const ChunkWorkspaceLayout layout = chunk_workspace_layout(shape);
  if (shape.HV == 0) return ok_status();

  MmaArgs a{};
  static_cast<ChunkCall&>(a) = chunk_call(p, shape, layout);
  {
    const int64_t per16 = a.o_bf16 ? 8 : 4;
    a.o_vec = p.o.stride(2) == 1 && a.o_st % per16 == 0 && a.o_sh % per16 == 0 &&
              reinterpret_cast<uintptr_t>(a.o) % 16 == 0;
    a.g_vec = a.g_st % 4 == 0 && a.g_sh % 4 == 0 && reinterpret_cast<uintptr_t>(a.g) % 16 == 0;
  }
  float* ws = ptr<float>(p.workspace);
  a.tmat = reinterpret_cast<bf16*>(ws + layout.tc_t);
  a.aqk = reinterpret_cast<bf16*>(ws + layout.tc_aqk);
  a.vec = ws + layout.tc_vec;
  const bool kda = shape.per_channel;
  if (kda) {
    a.kg = reinterpret_cast<bf16*>(ws + layout.tc_kg);
    a.qg = reinterpret_cast<bf16*>(ws + layout.tc_qg);
    a.kd = reinterpret_cast<bf16*>(ws + layout.tc_kd);
  }
  a.copies = shape.bf16_copies;
  {  // GDN's q / k copies are written from the registers of the staged path
    const auto pieces = [](const void* x, bool is_bf16, int64_t st, int64_t sh) {
      return is_bf16 && st % 8 == 0 && sh % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
    };
    a.qk_async = (kda || !a.copies) && pieces(a.q, a.q_bf16, a.q_st, a.q_sh) &&
                 pieces(a.k, a.k_bf16, a.k_st, a.k_sh);
  }
  if (a.copies) {  // packed [T, heads, d] copies (KDA: of v only)
    if (!kda) {
      a.q16 = reinterpret_cast<const bf16*>(ws + layout.tc_q);
      a.k16 = reinterpret_cast<const bf16*>(ws + layout.tc_k);
      a.q16_st = a.k16_st = int64_t(a.H) * kD, a.q16_sh = a.k16_sh = kD;
    }
    a.v16 = reinterpret_cast<const bf16*>(ws + layout.tc_v);
    a.v16_st = int64_t(a.HV) * a.d_v, a.v16_sh = a.d_v;
  } else {
    if (!kda) {
      a.q16 = ptr<const bf16>(p.q);
      a.k16 = ptr<const bf16>(p.k);
      a.q16_st = a.q_st, a.q16_sh = a.q_sh, a.k16_st = a.k_st, a.k16_sh = a.k_sh;
    }
    a.v16 = ptr<const bf16>(p.v);
    a.v16_st = a.v_st, a.v16_sh = a.v_sh;
  }

  const cudaStream_t s = to_cuda(stream);
  launch_chunk_plan(a, s);
  if (a.max_chunks > 0 && a.H > 0) {
    if (kda)
      a.qk_async ? launch_prepare<true, true>(a, s) : launch_prepare<true, false>(a, s);
    else
      a.qk_async ? launch_prepare<false, true>(a, s) : launch_prepare<false, false>(a, s);
  }
  if (a.B == 0) return ok_status();
  // 64 value rows a block (16 warps) when that still gives every SM two blocks, else 32 (8 warps).
  const bool wide = a.d_v % 64 == 0 && int64_t(a.B) * a.HV * (a.d_v / 64) >= 2 * sm_count();
  if (kda)
    wide ? launch_state<64, true>(a, s) : launch_state<32, true>(a, s);
  else
    wide ? launch_state<64, false>(a, s) : launch_state<32, false>(a, s);
  return ok_status();
}

}  // namespace hyla::kernels::cuda
