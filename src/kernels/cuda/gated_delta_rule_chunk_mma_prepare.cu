// The prepare kernel of the tensor-core chunk body (gated_delta_rule_chunk_mma.cu has the scheme):
// per (chunk, value head), the norms, G, K K^T and Q K^T on tensor cores, T = (I + A_kk)^-1
// Diag(beta) by blocks, A_qk and the per-token factors (KDA: the scaled tiles Kg, Qg, Kd), into
// the workspace the state kernel reads.
#include <algorithm>

#include "kernels/cuda/gated_delta_rule_chunk_mma.cuh"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cuda::chunk_mma {

namespace {

// ---- row loads ----
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

/// Value heads an item takes: GDN's value heads of one key head share the q and k rows, so an item
/// is two of them (the norms and the products once; A, its inverse and the outputs per head);
/// KDA's decays enter the products per value head, so an item is one.
template <bool kKda>
constexpr int kItemHeads = kKda ? 1 : 2;

template <bool kKda>
struct alignas(16) PrepareSmem {  // teams' copies sit back to back: 16-byte tiles
  bf16 q[kC * kLdQK];  // raw q rows (zeros past the sequence); then value head h's A_kk (f32),
                       // inverted in place, over q (h = 0) or k (h = 1)
  bf16 k[kC * kLdQK];
  float m[32 * 40];  // the inverse's block products (pitch 40: B fragments hit distinct banks)
  float qinv[kC], kinv[kC];
  float G[kItemHeads<kKda>][kC], beta[kItemHeads<kKda>][kC];  // per value head; G: GDN's scanned
                                                              // scalar gate
  float Gc[kKda ? kC * kLdG : 4];  // KDA: G log2(e) per channel, [64][kLdG]; rows past n repeat
                                   // G_{n-1}
  int next_item;                   // side by side: the team's next item from the counter
};
static_assert(2 * kC * kLdF * sizeof(float) <= 2 * kC * kLdQK * sizeof(bf16));
/// A block is one to kMaxTeams teams of kTeamThreads threads, each working on its own item with
/// its own PrepareSmem (as many teams as the registers of one SM allow at the kernel's limit:
/// GDN 5 x 128 threads of <= 102 registers, KDA 3 x 128 of <= 170).
constexpr int kTeamThreads = 128;
template <bool kKda>
constexpr int kMaxTeams = kKda ? 3 : 5;
/// The calling thread's team's barrier (named barrier 1 + team, its kTeamThreads threads; the id
/// recomputed from threadIdx, which is cheaper than a register held through the kernel).
__device__ __forceinline__ void team_sync() {
  named_sync(1 + threadIdx.x / kTeamThreads, kTeamThreads);
}

/// KDA: the state kernel's tiles Kg = K exp(G) / |k|, Qg = scale Q exp(G) / |q| and
/// Kd = K exp(G_{n-1} - G) / |k| (zeros past n, since the q and k rows are), and the per-channel
/// decay exp(G_{n-1}[c]).
__device__ __forceinline__ void kda_tiles(const MmaArgs& a, const PrepareSmem<true>& s,
                                          int64_t chunk_head, int tid) {
  const float* g_last = s.Gc + (kC - 1) * kLdG;
  const int64_t tile = chunk_head * kC * kD;
  for (int e = tid; e < kC * kD / 8; e += kTeamThreads) {
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
  for (int c = tid; c < kD; c += kTeamThreads) a.vec[chunk_head * 4 * kC + c] = exp2_ftz(g_last[c]);
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

/// GDN: the per-token factors of the item's value head h out (a warp; G[h] scanned in place, two
/// tokens a lane).
__device__ __forceinline__ void gdn_vec(const MmaArgs& a, PrepareSmem<false>& s, int n, int lane,
                                        int h, int64_t chunk_head) {
  const int t = 2 * lane;
  float* G = s.G[h];
  const float g0 = G[t], g1 = G[t + 1];
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
  G[t] = G0, G[t + 1] = G1;
  float* vec = a.vec + chunk_head * 4 * kC;
  const float e0 = __expf(G0), e1 = __expf(G1);
  *reinterpret_cast<float2*>(vec + t) = make_float2(s.kinv[t] * e0, s.kinv[t + 1] * e1);
  *reinterpret_cast<float2*>(vec + kC + t) = make_float2(s.qinv[t] * e0, s.qinv[t + 1] * e1);
  *reinterpret_cast<float2*>(vec + 2 * kC + t) =
      make_float2(s.kinv[t] * __expf(Gn - G0), s.kinv[t + 1] * __expf(Gn - G1));
  *reinterpret_cast<float2*>(vec + 3 * kC + t) = make_float2(G0, G1);
}

/// Chunk `chunk` of the value heads hv0 .. hv0 + heads - 1 (heads <= kItemHeads, one key head) by
/// the calling thread's team (kTeamThreads threads of the block, its own shared memory s).
/// kAsync: MmaArgs::qk_async (a separate instantiation: the staged path's registers stay its own).
template <bool kKda, bool kAsync>
__device__ __forceinline__ void prepare_chunk(const MmaArgs& a, PrepareSmem<kKda>& s, int hv0,
                                              int heads, int chunk) {
  const int kh = hv0 / a.group;
  const int b = a.chunk_seq[chunk];
  if (b < 0) return;
  int begin, end;
  chunk_sequence_range(a.cu, a.cu_stride, a.T, b, begin, end);
  const int t0 = begin + (chunk - a.chunk_first[b]) * kC;
  const int n = min(kC, end - t0);
  const int tid = threadIdx.x % kTeamThreads, lane = tid & 31, warp = tid >> 5;
  // Head h's A_kk [64][kLdF] (strictly lower), inverted in place: over the q tile (h = 0), the k
  // tile (h = 1), once the products are formed.
  const auto A_of = [&](int h) { return reinterpret_cast<float*>(s.q) + h * kC * kLdF; };
  const int64_t chunk_head = int64_t(chunk) * a.HV + hv0;  // of head 0; head h's is + h

  // Gates and betas, then q and k: a row is 16 pieces of 8 channels, one per lane of a half warp,
  // so the norms reduce within the half warp. All of a tile's loads are issued before any is used.
  if constexpr (kKda) {
    const int hv = hv0;
    if (tid < kC)
      s.beta[0][tid] =
          tid < n ? a.beta[int64_t(t0 + tid) * a.beta_st + int64_t(hv) * a.beta_sh] : 0.0f;
    // The raw gate tile into Gc (zeros past n), in flight beside the q and k loads; scanned below.
    const float* g = a.g + int64_t(hv) * a.g_sh;
    if (a.g_vec) {
      for (int e = tid; e < kC * kD / 4; e += kTeamThreads) {
        const int t = e / (kD / 4), c4 = e % (kD / 4) * 4;
        cp_async16(s.Gc + t * kLdG + c4, t < n ? g + int64_t(t0 + t) * a.g_st + c4 : g, t < n);
      }
      cp_async_commit();
    } else {
      for (int e = tid; e < kC * kD; e += kTeamThreads) {
        const int t = e / kD, c = e % kD;
        s.Gc[t * kLdG + c] = t < n ? g[int64_t(t0 + t) * a.g_st + c] : 0.0f;
      }
    }
  } else {  // raw gates (gdn_vec scans them) by threads 0-63, betas by 64-127
    const int t = tid & (kC - 1);
    for (int h = 0; h < heads; ++h) {
      const int64_t at = int64_t(t0 + t) * (tid < kC ? a.g_st : a.beta_st) +
                         int64_t(hv0 + h) * (tid < kC ? a.g_sh : a.beta_sh);
      (tid < kC ? s.G[h] : s.beta[h])[t] = t < n ? (tid < kC ? a.g : a.beta)[at] : 0.0f;
    }
  }
  const bool writes_copies = !kKda && a.copies && hv0 % a.group == 0;
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
  if (a.copies) {  // the item's value heads' v rows
    bf16* v16 = const_cast<bf16*>(a.v16);
    const int per_row = a.d_v / 8;
    for (int i = tid; i < heads * n * per_row; i += kTeamThreads) {
      const int hv = hv0 + i / (n * per_row), t = i % (n * per_row) / per_row;
      const int col = (i % per_row) * 8;
      float x[8];
      load8(a.v, a.v_bf16, int64_t(t0 + t) * a.v_st + int64_t(hv) * a.v_sh + col, x);
      *reinterpret_cast<uint4*>(v16 + int64_t(t0 + t) * a.v16_st + int64_t(hv) * a.v16_sh + col) =
          pack8_bf16(x);
    }
  }
  if constexpr (kKda || kAsync) {
    cp_async_wait<0>();
    team_sync();
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
  team_sync();

  // K K^T and Q K^T: a warp's 16 rows, all 64 columns, over 128 channels (KDA: the decays inside).
  const int m0 = warp * 16, g = lane >> 2, c = lane & 3;
  float kk[8][4] = {}, qk[8][4] = {};
  if constexpr (kKda) {
    kda_tiles(a, s, chunk_head, tid);
    kda_products(s, warp, lane, kk, qk);
  } else {
    if (warp < heads) gdn_vec(a, s, n, lane, warp, chunk_head + warp);
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
  team_sync();  // G is scanned; the q and k tiles are dead (the heads' A alias them)

  // Per head: A_kk[t, j] = beta_t exp(G_t - G_j) <k_t, k_j> / (|k_t| |k_j|) (j < t) into shared
  // memory; A_qk[t, j] = exp(G_t - G_j) scale <q_t, k_j> / (|q_t| |k_j|) (j <= t) out as bf16.
  // KDA's products hold their decays already. The heads innermost, so that each product dies once
  // both heads have it (the heads' tiles and rows are constant offsets apart).
  bf16* aqk_out = a.aqk + chunk_head * kC * kC;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int t = m0 + g + 8 * h;
    const float qt = s.qinv[t];
    float Gt[kItemHeads<kKda>], bk[kItemHeads<kKda>];
#pragma unroll
    for (int hh = 0; hh < kItemHeads<kKda>; ++hh)
      Gt[hh] = kKda ? 0.0f : s.G[hh][t], bk[hh] = s.beta[hh][t] * s.kinv[t];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int j = nt * 8 + 2 * c;
#pragma unroll
      for (int hh = 0; hh < kItemHeads<kKda>; ++hh) {
        if (hh >= heads) break;
        float pair[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float decay = 0.0f;
          if (j + e <= t) decay = (kKda ? 1.0f : __expf(Gt[hh] - s.G[hh][j + e])) * s.kinv[j + e];
          A_of(hh)[t * kLdF + j + e] = j + e < t ? bk[hh] * decay * kk[nt][2 * h + e] : 0.0f;
          pair[e] = j + e <= t ? qt * decay * qk[nt][2 * h + e] : 0.0f;
        }
        *reinterpret_cast<uint32_t*>(aqk_out + hh * kC * kC + t * kC + j) =
            pack_bf16(pair[0], pair[1]);
      }
    }
  }
  team_sync();

  // (I + A)^-1 by blocks, in place over A (whose blocks above the diagonal, which the products
  // read, are zeros): the four 16x16 diagonal blocks by forward substitution (a warp each, a lane a
  // column; head h on lanes 16 h ..), in fp32; then T_10 = -T_11 A_10 T_00 for the 16-blocks
  // (1, 0) and (3, 2), then for the 32-block (1, 0), on tensor cores in tf32 (T is rounded to
  // bf16 after).
  if (lane < 16 * heads) {
    float* T = A_of(lane >> 4);
    const int o = warp * 16, col = lane & 15;
    const unsigned lanes = heads == 2 ? 0xffffffffu : 0x0000ffffu;
    float x[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      float sum = r == col ? 1.0f : 0.0f;
#pragma unroll
      for (int m = 0; m < r; ++m) sum -= T[(o + r) * kLdF + o + m] * x[m];
      x[r] = sum;
      __syncwarp(lanes);  // row r of A is read by every lane before any lane overwrites it
      T[(o + r) * kLdF + o + col] = sum;
    }
  }
  team_sync();
  // 16-blocks: warp w takes the pair (i, j) = (2p + 1, 2p), p = w / 2, columns 8 (w % 2) .., of
  // every head (M = A_10 T_00 of head h in s.m at 512 h + 128 w).
  const int i0 = 32 * (warp >> 1) + 16, j0 = i0 - 16, n0 = j0 + 8 * (warp & 1);
#pragma unroll
  for (int hh = 0; hh < kItemHeads<kKda>; ++hh) {
    if (hh >= heads) break;
    const float* T = A_of(hh);
    float acc[4] = {};
    mma_tf32_tiles<2>(acc, T + i0 * kLdF + j0, kLdF, T + j0 * kLdF + n0, kLdF, lane);
    store_tile_f32(s.m + hh * 512 + warp * 128, 8, acc, 1.0f, lane);
  }
  team_sync();  // both warps of a pair have read A_10, which T_10 replaces
#pragma unroll
  for (int hh = 0; hh < kItemHeads<kKda>; ++hh) {
    if (hh >= heads) break;
    float* T = A_of(hh);
    float out[4] = {};
    mma_tf32_tiles<2>(out, T + i0 * kLdF + i0, kLdF, s.m + hh * 512 + warp * 128, 8, lane);
    store_tile_f32(T + i0 * kLdF + n0, kLdF, out, -1.0f, lane);
  }
  // The 32-block, a head at a time (s.m holds one M): warp w takes rows 32 + 16 (w / 2) ..,
  // columns 16 (w % 2) .. (two 8-column tiles).
  const int r2 = 32 + 16 * (warp >> 1), c2 = 16 * (warp & 1);
#pragma unroll
  for (int hh = 0; hh < kItemHeads<kKda>; ++hh) {
    if (hh >= heads) break;
    float* T = A_of(hh);
    team_sync();  // T's 16-blocks are in; the last head's M is read
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      float acc[4] = {};
      mma_tf32_tiles<4>(acc, T + r2 * kLdF, kLdF, T + c2 + 8 * nt, kLdF, lane);
      store_tile_f32(s.m + (r2 - 32) * 40 + c2 + 8 * nt, 40, acc, 1.0f, lane);
    }
    team_sync();
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      float out[4] = {};
      mma_tf32_tiles<4>(out, T + r2 * kLdF + 32, kLdF, s.m + c2 + 8 * nt, 40, lane);
      store_tile_f32(T + r2 * kLdF + c2 + 8 * nt, kLdF, out, -1.0f, lane);
    }
  }
  team_sync();

  // T Diag(beta) out as bf16, 8 columns a store; the blocks above the diagonal are zeros.
  for (int e = tid; e < heads * kC * kC / 8; e += kTeamThreads) {
    const int hh = e / (kC * kC / 8), t = (e >> 3) & (kC - 1), j = (e & 7) * 8;
    const float* T = A_of(hh);
    float x[8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
      x[i] = j / 16 <= t / 16 ? T[t * kLdF + j + i] * s.beta[hh][j + i] : 0.0f;
    *reinterpret_cast<uint4*>(a.tmat + (chunk_head + hh) * kC * kC + t * kC + j) = pack8_bf16(x);
  }
}

/// Items: (chunk, key head, pair) in chunk-major order, a pair being kItemHeads of the key head's
/// value heads (the last one of an odd group alone); MmaArgs::group / kItemHeads rounded up a key
/// head.
template <bool kKda>
__host__ __device__ __forceinline__ int item_pairs(const MmaArgs& a) {
  return (a.group + kItemHeads<kKda> - 1) / kItemHeads<kKda>;
}

/// Teams of kTeamThreads threads, each with its own PrepareSmem, take the items in order: team t of
/// block b the items b teams + t, + the grid's teams, ... With a.ready (side by side with the state
/// kernel) a team flags each of its value heads ready once its stores are out. The block lets the
/// state kernel launch at once (it is launched as this kernel's programmatic dependent only side
/// by side; elsewhere the trigger does nothing).
template <bool kKda, bool kAsync>
__global__ void __launch_bounds__(kTeamThreads* kMaxTeams<kKda>, 1)
    mma_prepare_kernel(const __grid_constant__ MmaArgs a) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int team = threadIdx.x / kTeamThreads, teams = blockDim.x / kTeamThreads;
  PrepareSmem<kKda>& s = reinterpret_cast<PrepareSmem<kKda>*>(smem_raw)[team];
  const int pairs = item_pairs<kKda>(a), per_chunk = a.H * pairs;
  const int items = a.max_chunks * per_chunk, stride = gridDim.x * teams;  // < 2^25 (the entry)
  const bool lead = threadIdx.x % kTeamThreads == 0;
  const bool claimed = a.claim != nullptr;
  if (claimed) {  // side by side: leave the state kernel's SMs, unless no other block works
    int works = 0;
    if (threadIdx.x == 0) {
      uint32_t smid;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
      const bool reserved = int(smid) < a.reserved_sms;
      const uint32_t before = atomicAdd(a.claim, reserved ? 1u : 1u + (1u << 16));
      // The last block to arrive works when none of the others does (all reserved).
      works = !reserved || ((before & 0xffffu) + 1 == gridDim.x && (before >> 16) == 0);
    }
    if (!__syncthreads_or(works)) return;
    if (lead) s.next_item = int(atomicAdd(a.claim + 1, 1u));
    team_sync();
  }
  int item = claimed ? s.next_item : blockIdx.x * teams + team;
  while (item < items) {
    int pending = 0;
    if (claimed && lead) pending = int(atomicAdd(a.claim + 1, 1u));  // in flight meanwhile
    const int chunk = item / per_chunk, kh = item % per_chunk / pairs, pair = item % pairs;
    const int hv0 = kh * a.group + pair * kItemHeads<kKda>;
    const int heads = min(kItemHeads<kKda>, a.group - pair * kItemHeads<kKda>);
    prepare_chunk<kKda, kAsync>(a, s, hv0, heads, chunk);
    team_sync();  // the item's stores are issued; the next item rewrites the shared tiles
    if (a.ready != nullptr && lead) {
      __threadfence();
      for (int h = 0; h < heads; ++h) store_release(a.ready + chunk * a.HV + hv0 + h, 1u);
    }
#ifdef HYLA_CHUNK_PROBE
    if (a.probe != nullptr && lead)
      for (int h = 0; h < heads; ++h) a.probe[chunk * a.HV + hv0 + h] = probe_clock();
#endif
    if (claimed) {
      if (lead) s.next_item = pending;
      team_sync();
      item = s.next_item;
    } else {
      item += stride;
    }
  }
}

template <bool kKda, bool kAsync>
void launch_kernel(const MmaArgs& a, int teams, int64_t blocks, cudaStream_t s) {
  const size_t smem = size_t(teams) * sizeof(PrepareSmem<kKda>);
  allow_dynamic_smem(mma_prepare_kernel<kKda, kAsync>, smem);
  mma_prepare_kernel<kKda, kAsync><<<unsigned(blocks), kTeamThreads * teams, smem, s>>>(a);
  HYLA_CUDA_CHECK_LAUNCH();
}

}  // namespace

int prepare_teams(bool kda, size_t smem_per_block) {
  const size_t team = kda ? sizeof(PrepareSmem<true>) : sizeof(PrepareSmem<false>);
  return int(std::min<size_t>(kda ? kMaxTeams<true> : kMaxTeams<false>, smem_per_block / team));
}

void launch_prepare(const MmaArgs& a, int teams, int64_t blocks, cudaStream_t s) {
  HYLA_CHECK(teams >= 1 && teams <= (a.per_channel ? kMaxTeams<true> : kMaxTeams<false>),
             "prepare teams ", teams);
  if (blocks <= 0)  // a team a block, one item each
    blocks =
        int64_t(a.max_chunks) * a.H * (a.per_channel ? item_pairs<true>(a) : item_pairs<false>(a));
  if (a.per_channel)
    a.qk_async ? launch_kernel<true, true>(a, teams, blocks, s)
               : launch_kernel<true, false>(a, teams, blocks, s);
  else
    a.qk_async ? launch_kernel<false, true>(a, teams, blocks, s)
               : launch_kernel<false, false>(a, teams, blocks, s);
}

}  // namespace hyla::kernels::cuda::chunk_mma
