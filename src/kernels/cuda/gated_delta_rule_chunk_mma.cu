// Tensor-core body of gated_delta_rule_chunk (kernels/gated_delta_rule.h) for the scalar gate
// (GDN), d_k = 128 and d_v a multiple of 32: bf16 operands into mma.sync m16n8k16 with fp32
// accumulation, the state kept in fp32 registers. cpu/gated_delta_rule.cpp (chunk_step) is the
// specification; gated_delta_rule_chunk.cu is the fp32 body of every other shape.
//
// Per chunk of n <= 64 tokens of one sequence and value head, with G_t = sum_{s<=t} g_s (within
// the chunk) and the state S^T [d_v, d_k] (the pool's layout):
//   A_kk[t, j] = beta_t exp(G_t - G_j) <k_t, k_j>  (t > j),  A_qk[t, j] = exp(G_t - G_j) <q_t, k_j>
//   T = (I + A_kk)^-1 Diag(beta)                          (the delta rule's UT transform)
//   Delta = T (V - Diag(exp(G)) K S)                      (the state's correction of each token)
//   O = Diag(exp(G)) Q S + A_qk Delta
//   S = exp(G_n) S + (Diag(exp(G_n - G)) K)^T Delta
// q and k enter the products raw (bf16); their l2norm and scale are per-row factors applied to the
// products' rows and columns, as are the decays, so no normalised copy is written.
//
// Three launches on the caller's stream; scratch in the caller's workspace (ChunkWorkspaceLayout
// tc_*, chunk-major and padded to 64 tokens):
//   plan     <<<1, 1>>>                  chunk numbering (gated_delta_rule_chunk_plan.cuh)
//   prepare  <<<(max_chunks, H), 256>>>   one chunk of one key head and its value heads: the norms,
//                                        K K^T and Q K^T on tensor cores, then per value head G,
//                                        T (blockwise inverse of the 64x64 unit triangle) and A_qk;
//                                        bf16 copies of q, k, v when the inputs are not bf16 rows
//   state    <<<(B, HV, d_v / VT), 4 VT>>> the chunks of one sequence in order for VT value rows
//                                        of one value head; the next chunk's operands stream in
//                                        (cp.async) while this one computes
#include <cuda_bf16.h>

#include <algorithm>
#include <mutex>

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
constexpr int kLdF = kC + 1;         // f32 row pitch of 64x64 tiles

struct MmaArgs {
  const void* q;  // [T, H, 128]
  const void* k;  // [T, H, 128]
  const void* v;  // [T, HV, d_v]
  void* o;        // [T, HV, d_v]
  int64_t q_st, q_sh, k_st, k_sh, v_st, v_sh, o_st, o_sh;
  bool q_bf16, k_bf16, v_bf16, o_bf16;
  bool o_vec;      // o's rows take 16-byte stores at every 4 (f32) or 8 (bf16) columns
  const float* g;  // [T, HV]
  int64_t g_st, g_sh;
  const float* beta;  // [T, HV]
  int64_t beta_st, beta_sh;
  const int32_t* cu;
  int64_t cu_stride;
  void* pool;  // [slots, HV, d_v, 128]
  bool pool_bf16;
  int64_t num_slots;
  const int32_t* initial_slots;
  int64_t initial_stride;
  const int32_t* final_slots;
  int64_t final_stride;
  float* chunk_states;  // [N, HV, d_v, 128] or null
  int64_t num_chunk_states;
  bool l2norm;
  float scale;
  int T, B, H, HV, group, d_v;
  int max_chunks;
  int32_t* chunk_first;
  int32_t* chunk_seq;
  int32_t* boundary_first;
  bf16* tmat;   // [max_chunks, HV, 64, 64]
  bf16* aqk;    // [max_chunks, HV, 64, 64]
  float* gcum;  // [max_chunks, HV, 64]
  float* qinv;  // [max_chunks, H, 64]
  float* kinv;  // [max_chunks, H, 64]
  // The bf16 rows the state kernel reads: the inputs, or the copies the prepare kernel writes.
  const bf16* q16;
  const bf16* k16;
  const bf16* v16;
  int64_t q16_st, q16_sh, k16_st, k16_sh, v16_st, v16_sh;
  bool copies;  // the prepare kernel writes q16 / k16 / v16
};

// ---- mma.sync / ldmatrix / cp.async ----

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
/// A fragment (16x16, row-major rows of 16 bytes at p for lane's row) or two B fragments.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
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

__device__ __forceinline__ void load4(const void* base, bool is_bf16, int64_t i, float (&x)[4]) {
  if (is_bf16 && (reinterpret_cast<uintptr_t>(static_cast<const bf16*>(base) + i) & 7) != 0) {
    const bf16* h = static_cast<const bf16*>(base) + i;  // a row that starts off 8 bytes
    x[0] = __bfloat162float(h[0]), x[1] = __bfloat162float(h[1]), x[2] = __bfloat162float(h[2]),
    x[3] = __bfloat162float(h[3]);
  } else if (is_bf16) {
    const uint2 u = *reinterpret_cast<const uint2*>(static_cast<const bf16*>(base) + i);
    const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&u.x);
    const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&u.y);
    x[0] = __low2float(lo), x[1] = __high2float(lo), x[2] = __low2float(hi),
    x[3] = __high2float(hi);
  } else {
    const float* f = static_cast<const float*>(base) + i;
    x[0] = f[0], x[1] = f[1], x[2] = f[2], x[3] = f[3];
  }
}
__device__ __forceinline__ void store4_bf16(bf16* dst, const float (&x)[4]) {
  uint2 u;
  u.x = pack_bf16(x[0], x[1]);
  u.y = pack_bf16(x[2], x[3]);
  *reinterpret_cast<uint2*>(dst) = u;
}

// ---- prepare: one chunk of one key head ----
struct PrepareSmem {
  bf16 q[kC * kLdQK];  // raw q rows (zeros past the sequence); later A_kk and T (f32) alias them
  bf16 k[kC * kLdQK];
  float kk[kC * kLdF];  // <k_t, k_j> / (|k_t| |k_j|)
  float qk[kC * kLdF];  // scale <q_t, k_j> / (|q_t| |k_j|)
  float level[3 * 16 * 17];
  float qinv[kC], kinv[kC], G[kC], beta[kC];
};
static_assert(2 * kC * kLdF * sizeof(float) <= 2 * kC * kLdQK * sizeof(bf16));

__global__ void __launch_bounds__(256) mma_prepare_kernel(const __grid_constant__ MmaArgs a) {
  const int chunk = blockIdx.x, kh = blockIdx.y;
  const int b = a.chunk_seq[chunk];
  if (b < 0) return;
  int begin, end;
  chunk_sequence_range(a.cu, a.cu_stride, a.T, b, begin, end);
  const int t0 = begin + (chunk - a.chunk_first[b]) * kC;
  const int n = min(kC, end - t0);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  PrepareSmem& s = *reinterpret_cast<PrepareSmem*>(smem_raw);
  float* A = reinterpret_cast<float*>(s.q);  // [64][kLdF] A_kk, strictly lower
  float* Tm = A + kC * kLdF;                 // [64][kLdF] (I + A_kk)^-1

  // q and k rows, one warp per row, 4 channels a lane; the norms from the unrounded values.
  for (int r = warp; r < 2 * kC; r += 8) {
    const bool is_q = r < kC;
    const int t = is_q ? r : r - kC;
    float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (t < n) {
      const int64_t at = is_q ? int64_t(t0 + t) * a.q_st + int64_t(kh) * a.q_sh
                              : int64_t(t0 + t) * a.k_st + int64_t(kh) * a.k_sh;
      load4(is_q ? a.q : a.k, is_q ? a.q_bf16 : a.k_bf16, at + lane * 4, x);
    }
    const float ss = warp_sum(x[0] * x[0] + x[1] * x[1] + x[2] * x[2] + x[3] * x[3]);
    store4_bf16((is_q ? s.q : s.k) + t * kLdQK + lane * 4, x);
    if (a.copies && t < n) {
      bf16* copy = const_cast<bf16*>(is_q ? a.q16 : a.k16);
      store4_bf16(copy + int64_t(t0 + t) * a.q16_st + int64_t(kh) * a.q16_sh + lane * 4, x);
    }
    if (lane == 0) {
      float inv = 0.0f;
      if (t < n) {
        if (is_q)
          inv = a.l2norm ? a.scale / sqrtf(ss + kL2NormEps) : a.scale;
        else
          inv = a.l2norm ? 1.0f / sqrtf(ss + kL2NormEps) : 1.0f;
      }
      (is_q ? s.qinv : s.kinv)[t] = inv;
      (is_q ? a.qinv : a.kinv)[(int64_t(chunk) * a.H + kh) * kC + t] = inv;
    }
  }
  if (a.copies) {  // v rows of this key head's value heads
    bf16* v16 = const_cast<bf16*>(a.v16);
    const int per_row = a.d_v / 4;
    for (int i = threadIdx.x; i < n * a.group * per_row; i += blockDim.x) {
      const int c = i % per_row, rest = i / per_row;
      const int hv = kh * a.group + rest % a.group, t = rest / a.group;
      float x[4];
      load4(a.v, a.v_bf16, int64_t(t0 + t) * a.v_st + int64_t(hv) * a.v_sh + c * 4, x);
      store4_bf16(v16 + int64_t(t0 + t) * a.v16_st + int64_t(hv) * a.v16_sh + c * 4, x);
    }
  }
  __syncthreads();

  // K K^T (warps 0-3) and Q K^T (warps 4-7): 16 rows a warp, all 64 columns, over 128 channels.
  {
    const bool is_q = warp >= 4;
    const int m0 = (warp & 3) * 16;
    const bf16* rows = is_q ? s.q : s.k;
    float acc[8][4] = {};
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      uint32_t af[4];
      ldsm_x4(af, rows + (m0 + a_row(lane)) * kLdQK + ks * 16 + a_col(lane));
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bfr[4];
        ldsm_x4(bfr, s.k + (np * 16 + bn_row(lane)) * kLdQK + ks * 16 + bn_col(lane));
        mma_bf16(acc[2 * np], af, bfr[0], bfr[1]);
        mma_bf16(acc[2 * np + 1], af, bfr[2], bfr[3]);
      }
    }
    float* dst = is_q ? s.qk : s.kk;
    const float* row_inv = is_q ? s.qinv : s.kinv;
    const int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = m0 + g + (e >> 1) * 8, col = nt * 8 + 2 * c + (e & 1);
        dst[row * kLdF + col] = acc[nt][e] * row_inv[row] * s.kinv[col];
      }
  }
  __syncthreads();  // q, k tiles dead from here: A and T alias them

  for (int i = 0; i < a.group; ++i) {
    const int hv = kh * a.group + i;
    const int64_t chunk_head = int64_t(chunk) * a.HV + hv;
    if (warp == 0) {  // G: inclusive scan of the gates, two tokens a lane; beta
      const int t = 2 * lane;
      const float g0 = t < n ? a.g[int64_t(t0 + t) * a.g_st + int64_t(hv) * a.g_sh] : 0.0f;
      const float g1 = t + 1 < n ? a.g[int64_t(t0 + t + 1) * a.g_st + int64_t(hv) * a.g_sh] : 0.0f;
      float sum = g0 + g1;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const float up = __shfl_up_sync(0xffffffffu, sum, o);
        if (lane >= o) sum += up;
      }
      const float before = sum - (g0 + g1);
      s.G[t] = before + g0;
      s.G[t + 1] = before + g0 + g1;
      a.gcum[chunk_head * kC + t] = before + g0;
      a.gcum[chunk_head * kC + t + 1] = before + g0 + g1;
      s.beta[t] = t < n ? a.beta[int64_t(t0 + t) * a.beta_st + int64_t(hv) * a.beta_sh] : 0.0f;
      s.beta[t + 1] =
          t + 1 < n ? a.beta[int64_t(t0 + t + 1) * a.beta_st + int64_t(hv) * a.beta_sh] : 0.0f;
    }
    __syncthreads();
    // A_kk (strictly lower), T zeroed, A_qk (lower with the diagonal) out as bf16.
    bf16* aqk_out = a.aqk + chunk_head * kC * kC;
    for (int e = threadIdx.x; e < kC * kC / 2; e += blockDim.x) {
      const int t = (2 * e) / kC, j = (2 * e) % kC;
      float q2[2];
#pragma unroll
      for (int d = 0; d < 2; ++d) {
        const int jj = j + d;
        const float decay = jj <= t ? __expf(s.G[t] - s.G[jj]) : 0.0f;
        A[t * kLdF + jj] = jj < t ? s.beta[t] * decay * s.kk[t * kLdF + jj] : 0.0f;
        Tm[t * kLdF + jj] = 0.0f;
        q2[d] = decay * s.qk[t * kLdF + jj];
      }
      reinterpret_cast<uint32_t*>(aqk_out)[e] = pack_bf16(q2[0], q2[1]);
    }
    __syncthreads();
    // (I + A)^-1: the four 16x16 diagonal blocks by forward substitution (a warp each, a lane a
    // column), then the blocks below by distance d: T_ij = -T_ii sum_{m=j}^{i-1} A_im T_mj.
    if (warp < 4 && lane < 16) {
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
    for (int d = 1; d < 4; ++d) {
      const int blocks = 4 - d;
      for (int e = threadIdx.x; e < blocks * 256; e += blockDim.x) {
        const int jb = e >> 8, r = (e >> 4) & 15, c = e & 15, ib = jb + d;
        float sum = 0.0f;
        for (int m = jb * 16; m < ib * 16; ++m)
          sum += A[(ib * 16 + r) * kLdF + m] * Tm[m * kLdF + jb * 16 + c];
        s.level[(jb * 16 + r) * 17 + c] = sum;
      }
      __syncthreads();
      for (int e = threadIdx.x; e < blocks * 256; e += blockDim.x) {
        const int jb = e >> 8, r = (e >> 4) & 15, c = e & 15, ib = jb + d;
        float sum = 0.0f;
        for (int m = 0; m <= r; ++m)
          sum += Tm[(ib * 16 + r) * kLdF + ib * 16 + m] * s.level[(jb * 16 + m) * 17 + c];
        Tm[(ib * 16 + r) * kLdF + jb * 16 + c] = -sum;
      }
      __syncthreads();
    }
    // T Diag(beta) out as bf16.
    bf16* t_out = a.tmat + chunk_head * kC * kC;
    for (int e = threadIdx.x; e < kC * kC / 2; e += blockDim.x) {
      const int t = (2 * e) / kC, j = (2 * e) % kC;
      reinterpret_cast<uint32_t*>(t_out)[e] =
          pack_bf16(Tm[t * kLdF + j] * s.beta[j], Tm[t * kLdF + j + 1] * s.beta[j + 1]);
    }
    __syncthreads();  // the next value head rewrites G, beta, A and T
  }
}

// ---- state: the chunks of one sequence in order, VT value rows of one value head ----
// Warps: VT / 16 row blocks x 2 halves. Half 0 computes K S (then Delta), half 1 Q S (then O);
// both update their half of the state's keys.
template <int VT>
struct StateStage {
  bf16 k[kC * kLdQK];
  bf16 q[kC * kLdQK];
  bf16 v[kC * (VT + 8)];
  bf16 t[kC * kLdCC];
  bf16 aqk[kC * kLdCC];
  float G[kC], qinv[kC], kinv[kC];
};
template <int VT>
struct StateSmem {
  StateStage<VT> stage[2];
  bf16 st[VT * kLdQK];      // S^T as bf16, the A operand of the next chunk's products
  bf16 delta[VT * kLdCC];   // Delta^T
  bf16 deltad[VT * kLdCC];  // Delta^T Diag(kinv exp(G_n - G))
  float o[kC * (VT + 4)];
};

/// Where one thread's cp.async pieces of a stage come from: fixed per block, offset per chunk.
struct StageSources {
  const bf16* k;  // this thread's piece of row 0 of key head kh (row t: + t k16_st)
  const bf16* q;
  const bf16* v;  // value head hv, columns v0 ..
};

template <int VT>
__device__ void load_stage(const MmaArgs& a, const StageSources& src, StateStage<VT>& st, int chunk,
                           int t0, int n, int hv) {
  constexpr int kThreads = VT * 4, kRowsPerPass = kThreads / 16;
  const int tid = threadIdx.x, piece = tid & 15, r0 = tid >> 4;
  const int64_t chunk_head = int64_t(chunk) * a.HV + hv;
  // q and k: 16 pieces of 8 channels a row; rows past the sequence are zeros.
  {
    const bf16* k = src.k + int64_t(t0 + r0) * a.k16_st;
    const bf16* q = src.q + int64_t(t0 + r0) * a.q16_st;
#pragma unroll
    for (int j = 0; j < kC / kRowsPerPass; ++j) {
      const int r = r0 + j * kRowsPerPass;
      const bool valid = r < n;
      cp_async16(st.k + r * kLdQK + piece * 8, valid ? k : src.k, valid);
      cp_async16(st.q + r * kLdQK + piece * 8, valid ? q : src.q, valid);
      k += kRowsPerPass * a.k16_st;
      q += kRowsPerPass * a.q16_st;
    }
  }
  constexpr int kVPieces = VT / 8;  // 4 or 8 pieces a row
  {
    const int vp = tid % kVPieces, vr0 = tid / kVPieces;
    constexpr int kVRowsPerPass = kThreads / kVPieces;
    const bf16* v = src.v + int64_t(t0 + vr0) * a.v16_st + vp * 8;
#pragma unroll
    for (int j = 0; j < kC / kVRowsPerPass; ++j) {
      const int r = vr0 + j * kVRowsPerPass;
      const bool valid = r < n;
      cp_async16(st.v + r * (VT + 8) + vp * 8, valid ? v : src.v, valid);
      v += kVRowsPerPass * a.v16_st;
    }
  }
  {  // T and A_qk: 8 pieces a row of 64
    const bf16* tm = a.tmat + chunk_head * kC * kC;
    const bf16* aq = a.aqk + chunk_head * kC * kC;
    const int p8 = tid & 7, rr0 = tid >> 3;
    constexpr int kPass = kThreads / 8;
#pragma unroll
    for (int j = 0; j < kC / kPass; ++j) {
      const int r = rr0 + j * kPass;
      cp_async16(st.t + r * kLdCC + p8 * 8, tm + r * kC + p8 * 8, true);
      cp_async16(st.aqk + r * kLdCC + p8 * 8, aq + r * kC + p8 * 8, true);
    }
  }
  if (tid < 48) {
    const int which = tid / 16, p16 = tid % 16;
    const int kh = hv / a.group;
    const float* from = which == 0   ? a.gcum + chunk_head * kC
                        : which == 1 ? a.qinv + (int64_t(chunk) * a.H + kh) * kC
                                     : a.kinv + (int64_t(chunk) * a.H + kh) * kC;
    float* to = which == 0 ? st.G : which == 1 ? st.qinv : st.kinv;
    cp_async16(to + p16 * 4, from + p16 * 4, true);
  }
}

/// o rows t0 .. t0 + n of value head hv, columns v0 .. v0 + VT, from the f32 tile [64][VT + 4]:
/// 16-byte stores when the rows allow (o_vec), else one element a thread.
template <int VT>
__device__ __forceinline__ void store_o(const MmaArgs& a, const float* tile, int t0, int n, int hv,
                                        int v0) {
  constexpr int kThreads = VT * 4;
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

template <int VT>
__global__ void __launch_bounds__(VT * 4) mma_state_kernel(const __grid_constant__ MmaArgs a) {
  constexpr int kRowBlocks = VT / 16;
  const int b = blockIdx.x, hv = blockIdx.y, v0 = blockIdx.z * VT;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rb = warp % kRowBlocks, half = warp / kRowBlocks;
  const int g = lane >> 2, c = lane & 3;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  StateSmem<VT>& s = *reinterpret_cast<StateSmem<VT>*>(smem_raw);

  // This warp's part of S^T: rows v0 + 16 rb + {g, g + 8}, keys 64 half + 8 nt + 2c + {0, 1}.
  const int row0 = rb * 16 + g;
  const int key0 = half * 64 + 2 * c;
  const int64_t state_floats = int64_t(a.d_v) * kD;
  float S[8][4];
  const int64_t initial = chunk_pool_slot(a.initial_slots, a.initial_stride, b, a.num_slots);
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
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
    for (int nt = 0; nt < 8; ++nt)
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
  const StageSources src{.k = a.k16 + int64_t(kh) * a.k16_sh + (threadIdx.x & 15) * 8,
                         .q = a.q16 + int64_t(kh) * a.q16_sh + (threadIdx.x & 15) * 8,
                         .v = a.v16 + int64_t(hv) * a.v16_sh + v0};
  if (first < last) {
    load_stage<VT>(a, src, s.stage[0], first, begin, min(kC, end - begin), hv);
    cp_async_commit();
  }
  for (int chunk = first; chunk < last; ++chunk) {
    const int t0 = chunk_t0(chunk), n = min(kC, end - t0);
    StateStage<VT>& st = s.stage[(chunk - first) & 1];
    if (chunk + 1 < last) {
      const int t1 = chunk_t0(chunk + 1);
      load_stage<VT>(a, src, s.stage[(chunk + 1 - first) & 1], chunk + 1, t1, min(kC, end - t1),
                     hv);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // the stage has landed; S^T (st) is written; o is free

    // X = S^T K^T (half 0) or S^T Q^T (half 1): 16 value rows x 64 tokens over 128 keys.
    const bf16* rows_kq = half == 0 ? st.k : st.q;
    float X[8][4] = {};
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      uint32_t af[4];
      ldsm_x4(af, s.st + (rb * 16 + a_row(lane)) * kLdQK + ks * 16 + a_col(lane));
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bfr[4];
        ldsm_x4(bfr, rows_kq + (np * 16 + bn_row(lane)) * kLdQK + ks * 16 + bn_col(lane));
        mma_bf16(X[2 * np], af, bfr[0], bfr[1]);
        mma_bf16(X[2 * np + 1], af, bfr[2], bfr[3]);
      }
    }
    const float Gn = st.G[n - 1];
    if (half == 0) {
      // P^T = V^T - X Diag(kinv exp(G)); Delta^T = P^T T^T (beta is inside T).
      uint32_t pa[4][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        float p[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = row0 + (e >> 1) * 8, t = nt * 8 + 2 * c + (e & 1);
          p[e] = __bfloat162float(st.v[t * (VT + 8) + row]) -
                 X[nt][e] * (st.kinv[t] * __expf(st.G[t]));
        }
        pa[nt >> 1][(nt & 1) * 2] = pack_bf16(p[0], p[1]);
        pa[nt >> 1][(nt & 1) * 2 + 1] = pack_bf16(p[2], p[3]);
      }
      float D[8][4] = {};
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t bfr[4];
          ldsm_x4(bfr, st.t + (np * 16 + bn_row(lane)) * kLdCC + ks * 16 + bn_col(lane));
          mma_bf16(D[2 * np], pa[ks], bfr[0], bfr[1]);
          mma_bf16(D[2 * np + 1], pa[ks], bfr[2], bfr[3]);
        }
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int t = nt * 8 + 2 * c;
        const float d0 = st.kinv[t] * __expf(Gn - st.G[t]);
        const float d1 = st.kinv[t + 1] * __expf(Gn - st.G[t + 1]);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row0 + h * 8;
          *reinterpret_cast<uint32_t*>(s.delta + row * kLdCC + t) =
              pack_bf16(D[nt][2 * h], D[nt][2 * h + 1]);
          *reinterpret_cast<uint32_t*>(s.deltad + row * kLdCC + t) =
              pack_bf16(D[nt][2 * h] * d0, D[nt][2 * h + 1] * d1);
        }
      }
    }
    __syncthreads();  // Delta^T is in shared memory; every warp has read S^T

    if (half == 1) {  // O^T = X Diag(qinv exp(G)) + Delta^T A_qk^T
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int t = nt * 8 + 2 * c + (e & 1);
          X[nt][e] *= st.qinv[t] * __expf(st.G[t]);
        }
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        uint32_t af[4];
        ldsm_x4(af, s.delta + (rb * 16 + a_row(lane)) * kLdCC + ks * 16 + a_col(lane));
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t bfr[4];
          ldsm_x4(bfr, st.aqk + (np * 16 + bn_row(lane)) * kLdCC + ks * 16 + bn_col(lane));
          mma_bf16(X[2 * np], af, bfr[0], bfr[1]);
          mma_bf16(X[2 * np + 1], af, bfr[2], bfr[3]);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = row0 + (e >> 1) * 8, t = nt * 8 + 2 * c + (e & 1);
          s.o[t * (VT + 4) + row] = X[nt][e];
        }
    }

    // S^T = exp(G_n) S^T + Delta^T Diag(kinv exp(G_n - G)) K over this half's 64 keys.
    const float decay = __expf(Gn);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) S[nt][e] *= decay;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      uint32_t af[4];
      ldsm_x4(af, s.deltad + (rb * 16 + a_row(lane)) * kLdCC + ks * 16 + a_col(lane));
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bfr[4];
        ldsm_x4_trans(bfr,
                      st.k + (ks * 16 + bt_row(lane)) * kLdQK + half * 64 + np * 16 + bt_col(lane));
        mma_bf16(S[2 * np], af, bfr[0], bfr[1]);
        mma_bf16(S[2 * np + 1], af, bfr[2], bfr[3]);
      }
    }
    if (n == kC) {
      if (a.chunk_states != nullptr && boundary < a.num_chunk_states) {
        float* dst = a.chunk_states + (boundary * a.HV + hv) * state_floats;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            *reinterpret_cast<float2*>(dst + int64_t(v0 + row0 + h * 8) * kD + key0 + nt * 8) =
                make_float2(S[nt][2 * h], S[nt][2 * h + 1]);
      }
      ++boundary;
    }
    store_st();
    __syncthreads();  // o is complete

    store_o<VT>(a, s.o, t0, n, hv, v0);
  }

  const int64_t final_slot = chunk_pool_slot(a.final_slots, a.final_stride, b, a.num_slots);
  if (final_slot < 0) return;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
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

template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes, std::once_flag& once) {
  std::call_once(once, [&] {
    HYLA_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  });
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

template <int VT>
void launch_state(const MmaArgs& a, cudaStream_t s) {
  static std::once_flag once;
  allow_smem(mma_state_kernel<VT>, sizeof(StateSmem<VT>), once);
  mma_state_kernel<VT><<<dim3(unsigned(a.B), unsigned(a.HV), unsigned(a.d_v / VT)), VT * 4,
                         sizeof(StateSmem<VT>), s>>>(a);
  HYLA_CUDA_CHECK_LAUNCH();
}

}  // namespace

Status gated_delta_rule_chunk_mma(const GatedDeltaRuleParams& p, Stream stream) {
  const ChunkWorkspaceShape shape = chunk_workspace_shape(p);
  const ChunkWorkspaceLayout layout = chunk_workspace_layout(shape);
  if (shape.HV == 0) return ok_status();

  MmaArgs a{};
  a.q = p.q.raw();
  a.k = p.k.raw();
  a.v = p.v.raw();
  a.o = p.o.raw();
  a.q_st = p.q.stride(0), a.q_sh = p.q.stride(1);
  a.k_st = p.k.stride(0), a.k_sh = p.k.stride(1);
  a.v_st = p.v.stride(0), a.v_sh = p.v.stride(1);
  a.o_st = p.o.stride(0), a.o_sh = p.o.stride(1);
  a.q_bf16 = p.q.dtype() == DType::kBF16;
  a.k_bf16 = p.k.dtype() == DType::kBF16;
  a.v_bf16 = p.v.dtype() == DType::kBF16;
  a.o_bf16 = p.o.dtype() == DType::kBF16;
  {
    const int64_t per16 = a.o_bf16 ? 8 : 4;
    a.o_vec = p.o.stride(2) == 1 && a.o_st % per16 == 0 && a.o_sh % per16 == 0 &&
              reinterpret_cast<uintptr_t>(a.o) % 16 == 0;
  }
  a.g = ptr<const float>(p.g);
  a.g_st = p.g.stride(0), a.g_sh = p.g.stride(1);
  a.beta = ptr<const float>(p.beta);
  a.beta_st = p.beta.stride(0), a.beta_sh = p.beta.stride(1);
  a.cu = ptr<const int32_t>(p.cu_seqlens);
  a.cu_stride = p.cu_seqlens.stride(0);
  const bool uses_pool = p.initial_slots.defined() || p.final_slots.defined();
  a.pool = uses_pool ? p.state_pool.raw() : nullptr;
  a.pool_bf16 = uses_pool && p.state_pool.dtype() == DType::kBF16;
  a.num_slots = uses_pool ? p.state_pool.size(0) : 0;
  a.initial_slots = p.initial_slots.defined() ? ptr<const int32_t>(p.initial_slots) : nullptr;
  a.initial_stride = p.initial_slots.defined() ? p.initial_slots.stride(0) : 0;
  a.final_slots = p.final_slots.defined() ? ptr<const int32_t>(p.final_slots) : nullptr;
  a.final_stride = p.final_slots.defined() ? p.final_slots.stride(0) : 0;
  a.chunk_states = p.chunk_states.defined() ? ptr<float>(p.chunk_states) : nullptr;
  a.num_chunk_states = p.chunk_states.defined() ? p.chunk_states.size(0) : 0;
  a.l2norm = p.use_qk_l2norm;
  a.scale = p.scale > 0.0f ? p.scale : 1.0f / sqrtf(float(kD));
  a.T = int(shape.T), a.B = int(shape.B), a.H = int(shape.H), a.HV = int(shape.HV);
  a.group = int(shape.HV / shape.H);
  a.d_v = int(shape.d_v);

  float* ws = ptr<float>(p.workspace);
  a.max_chunks = int(layout.max_chunks);
  a.chunk_first = reinterpret_cast<int32_t*>(ws + layout.chunk_first);
  a.chunk_seq = reinterpret_cast<int32_t*>(ws + layout.chunk_seq);
  a.boundary_first = reinterpret_cast<int32_t*>(ws + layout.boundary_first);
  a.tmat = reinterpret_cast<bf16*>(ws + layout.tc_t);
  a.aqk = reinterpret_cast<bf16*>(ws + layout.tc_aqk);
  a.gcum = ws + layout.tc_g;
  a.qinv = ws + layout.tc_qinv;
  a.kinv = ws + layout.tc_kinv;
  a.copies = shape.bf16_copies;
  if (a.copies) {  // packed [T, heads, d] copies
    a.q16 = reinterpret_cast<const bf16*>(ws + layout.tc_q);
    a.k16 = reinterpret_cast<const bf16*>(ws + layout.tc_k);
    a.v16 = reinterpret_cast<const bf16*>(ws + layout.tc_v);
    a.q16_st = a.k16_st = int64_t(a.H) * kD, a.q16_sh = a.k16_sh = kD;
    a.v16_st = int64_t(a.HV) * a.d_v, a.v16_sh = a.d_v;
  } else {
    a.q16 = ptr<const bf16>(p.q);
    a.k16 = ptr<const bf16>(p.k);
    a.v16 = ptr<const bf16>(p.v);
    a.q16_st = a.q_st, a.q16_sh = a.q_sh, a.k16_st = a.k_st, a.k16_sh = a.k_sh;
    a.v16_st = a.v_st, a.v16_sh = a.v_sh;
  }

  const cudaStream_t s = to_cuda(stream);
  chunk_plan_kernel<<<1, 1, 0, s>>>(ChunkPlan{.cu = a.cu,
                                              .cu_stride = a.cu_stride,
                                              .T = a.T,
                                              .B = a.B,
                                              .max_chunks = a.max_chunks,
                                              .chunk_first = a.chunk_first,
                                              .chunk_seq = a.chunk_seq,
                                              .boundary_first = a.boundary_first});
  HYLA_CUDA_CHECK_LAUNCH();
  if (a.max_chunks > 0 && a.H > 0) {
    static std::once_flag once;
    allow_smem(mma_prepare_kernel, sizeof(PrepareSmem), once);
    mma_prepare_kernel<<<dim3(unsigned(a.max_chunks), unsigned(a.H)), 256, sizeof(PrepareSmem),
                         s>>>(a);
    HYLA_CUDA_CHECK_LAUNCH();
  }
  if (a.B == 0) return ok_status();
  // 64 value rows a block (8 warps) when that still gives every SM two blocks, else 32 (4 warps).
  const bool wide = a.d_v % 64 == 0 && int64_t(a.B) * a.HV * (a.d_v / 64) >= 2 * sm_count();
  if (wide)
    launch_state<64>(a, s);
  else
    launch_state<32>(a, s);
  return ok_status();
}

}  // namespace hyla::kernels::cuda
