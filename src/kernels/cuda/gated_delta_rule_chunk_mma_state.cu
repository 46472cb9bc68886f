// The state kernels of the tensor-core chunk body (gated_delta_rule_chunk_mma.cu has the scheme):
// the chunks of one sequence in order for a block of value rows of one value head, the state in
// registers, each chunk's tiles brought by TMA while the previous one computes. d_v a multiple of
// 64: wgmma_state_kernel (the roles kernel: state and output warpgroups) or, d_v a multiple of 128,
// wgmma_wide_kernel (two warpgroups each doing every product), as the entry's schedule() picks;
// else mma_state_kernel (mma.sync, 32 value rows).
#include "core/cuda_launch.h"
#include "kernels/cuda/gated_delta_rule_chunk_mma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace hyla::kernels::cuda::chunk_mma {

namespace {

// The state kernel's stage tiles arrive by TMA in boxes of 64 rows x 64 bf16 columns (128 bytes)
// with the 128-byte swizzle: piece p (16 bytes) of row r sits at piece p ^ (r % 8), so the eight
// rows an ldmatrix phase reads hit distinct banks without padding. v's tile at VT = 32 has rows
// of 64 bytes in the 64-byte swizzle (piece p at p ^ ((r / 2) % 4)). The kernel computes each
// lane's swizzled offsets once (bn, bt, vt_off in mma_state_kernel); a read adds compile-time
// constants to them.
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
constexpr int kPitchP = 40;  // bf16 row pitch of the P^T hand-over tile
template <int VT, bool kKda>
struct alignas(1024) StateSmem {
  StateStage<VT, kKda> stage[2];
  bf16 st[VT * kLdQK];                 // S^T as bf16, the A operand of the products with K, Q
  bf16 p[VT * kPitchP];                // P^T of tokens 0-31
  bf16 delta[VT * kLdCC];              // Delta^T
  bf16 deltad[kKda ? 8 : VT * kLdCC];  // GDN: Delta^T Diag(kd)
  float o[kC * (VT + 4)];
  uint64_t full[2];  // the stages' mbarriers
};
/// Dynamic shared memory a state block asks: StateSmem and room to align its start to 1024 bytes.
template <int VT, bool kKda>
constexpr size_t kStateSmemBytes = sizeof(StateSmem<VT, kKda>) + 1024;

/// One thread: chunk's tiles for value head hv, value rows v0 .., into a stage, completing on
/// `full`. KDA's Kg / Qg / Kd and every T / A_qk / vec are chunk-major (row (chunk HV + hv) 64).
template <int VT, bool kKda>
__device__ void issue_stage(const MmaArgs& a, StateStage<VT, kKda>& st, uint64_t* full, int chunk,
                            int t0, int kh, int hv, int v0, bool with_v = true) {
  const int row = (chunk * a.HV + hv) * kC;  // < 2^31 (the entry)
  mbar_expect_tx(full, kStageBytes<VT, kKda> - (with_v ? 0u : uint32_t(kC * VT * 2)));
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
  // v: boxes of 64 columns (VT = 32: one box of 32); none for a transfer block
  if (with_v) {
#pragma unroll
    for (int box = 0; box < (VT >= 64 ? VT / 64 : 1); ++box)
      tma_load_3d(st.v + box * kBox, &a.map_v, v0 + 64 * box, hv, t0, full);
  }
  tma_load_2d(st.t, &a.map_t, 0, row, full);
  tma_load_2d(st.aqk, &a.map_aqk, 0, row, full);
  bulk_load(st.vec, a.vec + int64_t(row) * 4, 4 * kC * sizeof(float), full);
}

/// issue_stage's tiles into L2 only, a chunk before their loads are issued (side by side, where
/// the prepare kernel's traffic lengthens the loads' latency).
template <int VT, bool kKda>
__device__ void prefetch_stage(const MmaArgs& a, int chunk, int t0, int kh, int hv, int v0) {
  const int row = (chunk * a.HV + hv) * kC;
#pragma unroll
  for (int box = 0; box < 2; ++box) {
    if constexpr (kKda) {
      tma_prefetch_2d(&a.map_k, 64 * box, row);
      tma_prefetch_2d(&a.map_q, 64 * box, row);
      tma_prefetch_2d(&a.map_kd, 64 * box, row);
    } else {
      tma_prefetch_3d(&a.map_k, 64 * box, kh, t0);
      tma_prefetch_3d(&a.map_q, 64 * box, kh, t0);
    }
  }
#pragma unroll
  for (int box = 0; box < (VT >= 64 ? VT / 64 : 1); ++box)
    tma_prefetch_3d(&a.map_v, v0 + 64 * box, hv, t0);
  tma_prefetch_2d(&a.map_t, 0, row);
  tma_prefetch_2d(&a.map_aqk, 0, row);
  bulk_prefetch(a.vec + int64_t(row) * 4, 4 * kC * sizeof(float));
}

/// Side by side: waits until the prepare kernel has written chunk `chunk` of value head hv (and,
/// when it writes GDN's q / k copies, of the key head's first value head, whose item writes them),
/// then orders those writes before this thread's tensor-map loads (the async proxy).
__device__ __forceinline__ void wait_prepared(const MmaArgs& a, int chunk, int hv, int kh) {
  const uint32_t* flags = a.ready + int64_t(chunk) * a.HV;
  while (load_acquire(flags + hv) == 0) __nanosleep(32);
  if (!a.per_channel && a.copies)
    while (load_acquire(flags + kh * a.group) == 0) __nanosleep(32);
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

/// Rows n .. 63 of a stage's v (and GDN's k, q) tiles to zeros: the boxes brought the next
/// sequence's rows there (zeros only past T), which must not reach this one's products even as
/// 0 x inf. KDA's tiles, T and A_qk are zeros past n already.
template <int VT, bool kKda, int kThreads = VT * 8>
__device__ void zero_tail(StateStage<VT, kKda>& st, int n, int tid) {
  const uint4 zero = make_uint4(0, 0, 0, 0);
  if constexpr (!kKda) {
    for (int e = tid; e < 2 * kC * 8; e += kThreads) {  // 2 boxes x 64 rows x 8 pieces
      const int r = (e >> 3) & (kC - 1), at = (e >> 9) * kBox + r * 64 + (e & 7) * 8;
      if (r >= n) {
        *reinterpret_cast<uint4*>(st.k + at) = zero;
        *reinterpret_cast<uint4*>(st.q + at) = zero;
      }
    }
  }
  // v: [64 tokens][VT] (VT <= 64) or boxes of [64 tokens][64] (VT a multiple of 64)
  constexpr int kPieces = VT < 64 ? VT / 8 : 8;
  for (int e = tid; e < kC * VT / 8; e += kThreads) {
    const int r = (e / kPieces) % kC;
    if (r >= n) *reinterpret_cast<uint4*>(st.v + e * 8) = zero;
  }
}

/// o rows t0 .. t0 + n of value head hv, columns v0 .. v0 + VT, from the f32 tile [64][VT + 4]:
/// 16-byte stores when the rows allow (o_vec), else one element a thread.
template <int VT, int kThreads = VT * 8>
__device__ __forceinline__ void store_o(const MmaArgs& a, const float* tile, int t0, int n, int hv,
                                        int v0, int tid) {
  if (a.o_vec && a.o_bf16) {  // 8 values a store
    constexpr int kPer = VT / 8;
    for (int i = tid; i < n * kPer; i += kThreads) {
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
    for (int i = tid; i < n * kPer; i += kThreads) {
      const int t = i / kPer, col = (i % kPer) * 4;
      *reinterpret_cast<float4*>(static_cast<float*>(a.o) + int64_t(t0 + t) * a.o_st +
                                 int64_t(hv) * a.o_sh + v0 + col) =
          *reinterpret_cast<const float4*>(tile + t * (VT + 4) + col);
    }
  } else {
    for (int i = tid; i < n * VT; i += kThreads) {
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

template <int VT, bool kKda>
__global__ void __launch_bounds__(VT * 8, 1) mma_state_kernel(const __grid_constant__ MmaArgs a) {
  static_assert(VT == 32, "d_v a multiple of 64 takes wgmma_state_kernel");
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
    vt_off = vrow * 64 + (((vpiece & 3) ^ ((lane >> 1) & 3)) << 4);  // 64-byte rows, swizzle
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
    if (n < kC) zero_tail(st, n, threadIdx.x);
    __syncthreads();  // the stage and S^T are in; the last chunk's o tile is complete
    // The next chunk into the other stage, whose readers all passed the barrier.
    if (threadIdx.x == 0 && chunk + 1 < last)
      issue_stage<VT, kKda>(a, s.stage[(use + 1) & 1], &s.full[(use + 1) & 1], chunk + 1,
                            chunk_t0(chunk + 1), kh, hv, v0);
    if (chunk > first) store_o<VT>(a, s.o, prev_t0, prev_n, hv, v0, threadIdx.x);
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
    store_o<VT>(a, s.o, prev_t0, prev_n, hv, v0, threadIdx.x);
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

// ---- state on wgmma: (sequence, value head, 64 value rows) a block, three roles ----
// The state warpgroup (warps 0-3) keeps S^T [64 value rows x 128 keys] in its f32 wgmma
// accumulators (64 a thread: warp w rows 16 w + g, + 8, keys 8 j + 2 c, + 1) and runs the
// recurrence; the output warpgroup (warps 4-7) forms O; warp 8 brings the stage tiles by TMA.
// Per chunk, A operands from registers (state) or shared memory (output), B from the stage tiles
// (TMA's 128-byte-swizzled boxes are wgmma's canonical layouts):
//   state:  X = S^T K^T                            m64n64k16 x 8, A = S^T rounded to bf16
//           P^T = V^T - X Diag(kg)                 registers (V^T by transposed ldmatrix)
//           Delta^T = P^T T^T                      m64n64k16 x 4, B = T [t][j] (K-major)
//           S^T = exp(G_n) S^T + Delta^T Diag(kd) K  m64n128k16 x 4, B = the k tile MN-major
//   output: O^T = (S^T Q^T) Diag(qg) + Delta^T A_qk^T  m64n64k16 x 12, A = the S^T and Delta^T
//           tiles the state warpgroup stores (bf16, two buffers by chunk parity)
// KDA reads Kg, Qg and Kd as the other kernel does and decays S^T's columns.
// Hand-overs: named barriers "S^T in" and "Delta^T in" (state arrives, output waits) and
// "buffers read" (the other way) per buffer parity; the stage's `empty` mbarrier takes one
// arrival from each warpgroup before the TMA warp refills it. Side by side with the prepare
// kernel (MmaArgs::ready) the TMA warp also waits for a chunk's ready flags before loading it.
constexpr int kWgVT = 64;
constexpr int kWgThreads = 288;
// Named barrier ids: the hand-overs (+ buffer parity), and each warpgroup's own.
constexpr int kBarStIn = 1, kBarDeltaIn = 3, kBarRead = 5, kBarOut = 7, kBarState = 8;
template <bool kKda>
struct alignas(1024) WgStateSmem {
  StateStage<kWgVT, kKda> stage[2];
  alignas(1024) bf16 st16[2][2 * kBox];  // S^T at a chunk's start: [64 rows][keys], two boxes
  alignas(1024) bf16 d16[2][kBox];       // Delta^T: [64 rows][64 tokens]
  alignas(1024) bf16 o16[kBox];          // a whole chunk's o for the tensor-map store (o_tma)
  float o[kC * (kWgVT + 4)];             // else o for store_o
  uint64_t full[2], empty[2];
};
template <bool kKda>
constexpr size_t kWgStateSmemBytes = sizeof(WgStateSmem<kKda>) + 1024;

/// The A fragment of 16-deep step ks from a 64 x 64 (or x 128) f32 accumulator, each value
/// times f[column] (f null: 1) and rounded to bf16.
template <int N>
__device__ __forceinline__ void acc_to_a(uint32_t (&af)[4], const float (&acc)[N], int ks,
                                         const float* f, int c) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int j = 2 * ks + half;
    const float2 s = f ? *reinterpret_cast<const float2*>(f + 8 * j + 2 * c) : make_float2(1, 1);
    af[2 * half] = pack_bf16(acc[4 * j] * s.x, acc[4 * j + 1] * s.y);
    af[2 * half + 1] = pack_bf16(acc[4 * j + 2] * s.x, acc[4 * j + 3] * s.y);
  }
}
/// The A fragment of step ks (warp w's 16 rows x 16 k) into a K-major tile at `tile` of 64 rows
/// (boxes of 64 k, 128-byte rows in the 128-byte swizzle), where wgmma reads it as A.
__device__ __forceinline__ void store_a(uint32_t tile, const uint32_t (&af)[4], int ks, int warp,
                                        int lane) {
  const int i = lane >> 3, row = 16 * warp + (i & 1) * 8 + (lane & 7);
  const int piece = (ks & 3) * 2 + (i >> 1);
  stsm_x4(tile + (ks >> 2) * kBoxBytes + row * kRowBytes + ((piece ^ (lane & 7)) << 4), af);
}

#ifdef HYLA_CHUNK_PROBE
/// The probe's record of chunk `use` of this block (sequence 0): the TMA thread's wait start and
/// issue time, the state warpgroup's `full` wait start and end and its SM clock then, then waits
/// (ns): the state warpgroup's for the output warpgroup to have read its tiles (kBarRead), the
/// output warpgroup's for its last o store to have read o16, for S^T, for Delta^T; the SM's id.
__device__ __forceinline__ unsigned long long* probe_record(const MmaArgs& a, int use) {
  return a.probe + int64_t(a.max_chunks) * a.HV +
         (int64_t(blockIdx.y * gridDim.z + blockIdx.z) * a.max_chunks + use) * kProbeWords;
}
#endif

/// A stage tile's descriptor: the stage's, advanced by the tile's (constant) offset and `bytes`.
__device__ __forceinline__ uint64_t tile_desc(uint64_t stage_desc, const void* stage,
                                              const void* tile, uint32_t bytes) {
  const auto offset = uint32_t(static_cast<const char*>(tile) - static_cast<const char*>(stage));
  return wgmma::desc_advance(stage_desc, offset + bytes);
}

/// The TMA warp's lane 0: chunk `use` into stage use % 2 once the stage's readers (the `empty`
/// arrivals) have left chunk use - 2. Side by side it first waits for the chunk's ready flags
/// (their latency passes while the warpgroups still read the stage) and at the end for the prepare
/// kernel (griddepcontrol.wait), so that the kernels after this one on the stream, which wait for
/// this one, see everything the prepare kernel wrote. kProbe: the probe build's records.
template <int VT, bool kKda, bool kProbe>
__device__ __forceinline__ void issue_chunks(const MmaArgs& a, StateStage<VT, kKda> (&stage)[2],
                                             uint64_t (&full)[2], uint64_t (&empty)[2], int first,
                                             int chunks, int begin, int hv, int v0,
                                             bool with_v = true) {
  const int kh = hv / a.group;
  for (int use = 0; use < chunks; ++use) {
#ifdef HYLA_CHUNK_PROBE
    const unsigned long long wait_start = probe_clock();
#endif
    if (a.ready != nullptr) wait_prepared(a, first + use, hv, kh);
    if (use >= 2) mbar_wait(&empty[use & 1], ((use >> 1) - 1) & 1);
#ifdef HYLA_CHUNK_PROBE
    if (kProbe && a.probe != nullptr && blockIdx.x == 0) {
      unsigned long long* at = probe_record(a, use);
      at[0] = wait_start, at[1] = probe_clock();
    }
#endif
    issue_stage<VT, kKda>(a, stage[use & 1], &full[use & 1], first + use, begin + use * kC, kh, hv,
                          v0, with_v);
    if (a.ready != nullptr && use + 1 < chunks)
      prefetch_stage<VT, kKda>(a, first + use + 1, begin + (use + 1) * kC, kh, hv, v0);
  }
  if (a.ready != nullptr) asm volatile("griddepcontrol.wait;" ::: "memory");
}

/// Where a warpgroup's S^T [64 value rows x 128 keys] sits in states [.., HV, d_v, d_k] (pool
/// slots, boundary states): value head hv, rows from v0; in wgmma's m64n128 accumulator layout the
/// thread holds rows row0 and row0 + 8, keys 8 j + 2 c + {0, 1}.
struct StateRows {
  int64_t state_floats;  // d_v d_k
  int hv, row0, c, v0;
  /// Accumulator i's offset in one value head's state.
  __device__ __forceinline__ int64_t offset(int i) const {
    const int row = row0 + ((i >> 1) & 1) * 8, key = 8 * (i >> 2) + 2 * c + (i & 1);
    return int64_t(v0 + row) * kD + key;
  }
  /// ... in pool slot `slot`.
  __device__ __forceinline__ int64_t at(const MmaArgs& a, int64_t slot, int i) const {
    return (slot * a.HV + hv) * state_floats + offset(i);
  }
};
/// Sequence b's initial state slot: in a.initial_states when given (context parallelism: a
/// segment's), else in the pool; -1: zeros.
__device__ __forceinline__ int64_t initial_slot(const MmaArgs& a, int b) {
  return chunk_pool_slot(a.initial_slots, a.initial_stride, b,
                         a.initial_states != nullptr ? a.initial_count : a.num_slots);
}
/// S from initial slot `slot` (initial_slot; slot < 0: zeros).
__device__ __forceinline__ void load_state(const MmaArgs& a, float (&S)[64], int64_t slot,
                                           const StateRows& r) {
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    S[i] = slot < 0                      ? 0.0f
           : a.initial_states != nullptr ? a.initial_states[r.at(a, slot, i)]
           : a.pool_bf16 ? __bfloat162float(static_cast<const bf16*>(a.pool)[r.at(a, slot, i)])
                         : static_cast<const float*>(a.pool)[r.at(a, slot, i)];
  }
}
/// S into pool slot `slot` (slot < 0: nothing).
__device__ __forceinline__ void store_state(const MmaArgs& a, const float (&S)[64], int64_t slot,
                                            const StateRows& r) {
  if (slot < 0) return;
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    if (a.pool_bf16)
      static_cast<bf16*>(a.pool)[r.at(a, slot, i)] = __float2bfloat16_rn(S[i]);
    else
      static_cast<float*>(a.pool)[r.at(a, slot, i)] = S[i];
  }
}
/// After a whole chunk: S as boundary state `boundary` when asked (a.chunk_states), and the count
/// on.
__device__ __forceinline__ void store_chunk_state(const MmaArgs& a, const float (&S)[64],
                                                  int64_t& boundary, const StateRows& r) {
  if (a.chunk_states != nullptr && boundary < a.num_chunk_states) {
    float* dst = a.chunk_states + (boundary * a.HV + r.hv) * r.state_floats;
#pragma unroll
    for (int i = 0; i < 64; i += 2)
      *reinterpret_cast<float2*>(dst + r.offset(i)) = make_float2(S[i], S[i + 1]);
  }
  ++boundary;
}

/// P^T = V^T - X Diag(kg) as the A fragments of Delta^T = P^T T^T: V^T by transposed ldmatrix of
/// the v tile [t][64 value rows] at v_addr (the lane's swizzled offset added), kg GDN's per-token
/// factors (KDA: none).
template <bool kKda>
__device__ __forceinline__ void p_fragments(uint32_t (&pa)[4][4], const float (&X)[32],
                                            uint32_t v_addr, const float* kg, int c) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    uint32_t vt[4];
    ldsm_x4_trans(vt, v_addr + ks * 16 * kRowBytes);
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // vt[i]: rows row0 + 8 (i % 2), tokens 16 ks + 8 (i / 2)
      const int j = 2 * ks + (i >> 1), e = (i & 1) * 2;
      const float2 f =
          kKda ? make_float2(1.0f, 1.0f) : *reinterpret_cast<const float2*>(kg + 8 * j + 2 * c);
      const __nv_bfloat162 v2 = *reinterpret_cast<const __nv_bfloat162*>(&vt[i]);
      pa[ks][(i >> 1) * 2 + (i & 1)] = pack_bf16(__low2float(v2) - X[4 * j + e] * f.x,
                                                 __high2float(v2) - X[4 * j + e + 1] * f.y);
    }
  }
}
/// S^T's decay over a chunk of n tokens: GDN exp(G_n) (G in vec[3 64 ..]), KDA exp(G_n[c]) per
/// key column (vec[0 .. 127]).
template <bool kKda>
__device__ __forceinline__ void decay_state(float (&S)[64], const float* vec, int n, int c) {
  if constexpr (!kKda) {
    const float decay = __expf(vec[3 * kC + n - 1]);
#pragma unroll
    for (int i = 0; i < 64; ++i) S[i] *= decay;
  } else {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const float2 d = *reinterpret_cast<const float2*>(vec + 8 * j + 2 * c);
      S[4 * j] *= d.x, S[4 * j + 1] *= d.y, S[4 * j + 2] *= d.x, S[4 * j + 3] *= d.y;
    }
  }
}
/// The wgmma kernels' shared memory at the block's first 1024-byte boundary (the swizzled boxes'
/// alignment); thread 0 initialises the two stages' mbarriers: `full` completes on the TMA
/// thread's arrival and the bytes, `empty` on one arrival from each of `readers` warpgroups.
template <class Smem>
__device__ __forceinline__ Smem& stage_smem(unsigned char* raw, int readers) {
  Smem& s = *reinterpret_cast<Smem*>(raw + ((1024 - (smem_addr(raw) & 1023)) & 1023));
  if (threadIdx.x == 0) {
    for (int i = 0; i < 2; ++i) mbar_init(&s.full[i], 1), mbar_init(&s.empty[i], readers);
    mbar_init_fence();
  }
  return s;
}
/// V^T's fragments: transposed ldmatrix of a v box [t][64 value rows], token rows 16 j + 8 (lane /
/// 16) + lane % 8, value piece 2 w + (lane / 8) % 2 (swizzled by row % 8), w the warp's index in
/// its warpgroup: the lane's byte offset in the box.
__device__ __forceinline__ uint32_t vt_offset(int w, int lane) {
  const int lane7 = lane & 7;
  return (8 * (lane >> 4) + lane7) * kRowBytes + ((((2 * w) | ((lane >> 3) & 1)) ^ lane7) << 4);
}
/// A partial chunk (n < 64 rows): rows n .. of the stage's tiles to zeros (zero_tail) by the
/// kThreads threads that read it, fenced for wgmma and joined on named barrier `bar` (each warp's
/// share of a product reads every row of B).
template <int VT, bool kKda, int kThreads>
__device__ __forceinline__ void zero_partial_chunk(StateStage<VT, kKda>& st, int n, int bar) {
  if (n < kC) {
    zero_tail<VT, kKda, kThreads>(st, n, threadIdx.x);
    fence_proxy_async();  // the zeros, written by threads, before wgmma reads the tiles
    named_sync(bar, kThreads);
  }
}

/// The products every state warpgroup issues (no commit or wait: the callers order them), over a
/// stage whose descriptors start at k_major (K-major tiles) or mn_major (the k tile MN-major).
/// S^T as bf16 A fragments of the 128-key products.
__device__ __forceinline__ void s_fragments(uint32_t (&sa)[8][4], const float (&S)[64], int c) {
#pragma unroll
  for (int ks = 0; ks < 8; ++ks) acc_to_a(sa[ks], S, ks, nullptr, c);
}
/// Y = S^T R^T for the stage's 128-key tile R (k or q): m64n64k16 x 8.
template <class Stage>
__device__ __forceinline__ void issue_keys_product(float (&Y)[32], const uint32_t (&sa)[8][4],
                                                   uint64_t k_major, const Stage& st,
                                                   const bf16* tile) {
#pragma unroll
  for (int ks = 0; ks < 8; ++ks)
    wgmma::mma_m64n64k16<0>(Y, sa[ks], tile_desc(k_major, &st, tile, wgmma::k_step_bytes(ks)),
                            ks > 0);
}
/// Delta^T = P^T T^T: m64n64k16 x 4.
template <class Stage>
__device__ __forceinline__ void issue_delta_product(float (&D)[32], const uint32_t (&pa)[4][4],
                                                    uint64_t k_major, const Stage& st) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
    wgmma::mma_m64n64k16<0>(D, pa[ks], tile_desc(k_major, &st, st.t, wgmma::k_step_bytes(ks)),
                            ks > 0);
}
/// Delta^T as A fragments: da plain, dd (GDN) times kd, the update's operand.
template <bool kKda>
__device__ __forceinline__ void delta_fragments(uint32_t (&da)[4][4], uint32_t (&dd)[4][4],
                                                const float (&D)[32], const float* kd, int c) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    acc_to_a(da[ks], D, ks, nullptr, c);
    if constexpr (!kKda) acc_to_a(dd[ks], D, ks, kd, c);
  }
}
/// S^T += Delta^T Diag(kd) K (KDA: Delta^T Kd), S^T decayed before: m64n128k16 x 4.
template <bool kKda, class Stage>
__device__ __forceinline__ void issue_state_update(float (&S)[64], const uint32_t (&da)[4][4],
                                                   const uint32_t (&dd)[4][4], uint64_t mn_major,
                                                   const Stage& st) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
    wgmma::mma_m64n128k16<1>(S, kKda ? da[ks] : dd[ks],
                             tile_desc(mn_major, &st, kKda ? st.kd : st.k, ks * 16 * kRowBytes),
                             true);
}

/// GDN: O^T's token columns times qg.
__device__ __forceinline__ void scale_columns(float (&O)[32], const float* qg, int c) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float2 f = *reinterpret_cast<const float2*>(qg + 8 * j + 2 * c);
    O[4 * j] *= f.x, O[4 * j + 1] *= f.y, O[4 * j + 2] *= f.x, O[4 * j + 3] *= f.y;
  }
}
/// Warp w's part of O^T (value rows 16 w ..) transposed into the bf16 tile o16 [t][64 value rows]
/// (128-byte swizzle) for the tensor-map store: matrix i of step jp holds tokens 8 j .. + 7, j =
/// 2 jp + i / 2, value rows 16 w + 8 (i % 2) ..
__device__ __forceinline__ void o_to_tile(const float (&O)[32], uint32_t o16, int w, int lane) {
#pragma unroll
  for (int jp = 0; jp < 4; ++jp) {
    uint32_t r[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int j = 2 * jp + (i >> 1), e = (i & 1) * 2;
      r[i] = pack_bf16(O[4 * j + e], O[4 * j + e + 1]);
    }
    const int i = lane >> 3, lane7 = lane & 7, t = 8 * (2 * jp + (i >> 1)) + lane7;
    stsm_x4_trans(o16 + t * kRowBytes + ((((2 * w) | (i & 1)) ^ lane7) << 4), r);
  }
}
/// ... or into the f32 tile o [t][64 + 4] for store_o.
__device__ __forceinline__ void o_to_f32(const float (&O)[32], float* o, int w, int g, int c) {
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int row = 16 * w + g + ((i >> 1) & 1) * 8, t = 8 * (i >> 2) + 2 * c + (i & 1);
    o[t * (kWgVT + 4) + row] = O[i];
  }
}

/// step.template operator()<use % 2>(use) for use = 0 .. chunks - 1: the stage parity as a
/// template argument, so that every descriptor and barrier id of a step is a constant offset from
/// the block's shared-memory base (no per-chunk address arithmetic on the wgmma path).
template <class Step>
__device__ __forceinline__ void for_each_chunk(int chunks, const Step& step) {
  for (int use = 0; use < chunks; use += 2) {
    step.template operator()<0>(use);
    if (use + 1 < chunks) step.template operator()<1>(use + 1);
  }
}

template <bool kKda>
__global__ void __launch_bounds__(kWgThreads, 1)
    wgmma_state_kernel(const __grid_constant__ MmaArgs a) {
  constexpr int VT = kWgVT;
  const int b = blockIdx.x, hv = blockIdx.y, v0 = blockIdx.z * VT;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  WgStateSmem<kKda>& s = stage_smem<WgStateSmem<kKda>>(smem_raw, 2);
  int begin, end;
  chunk_sequence_range(a.cu, a.cu_stride, a.T, b, begin, end);
  const int first = a.chunk_first[b], last = a.chunk_first[b + 1], chunks = last - first;
  const auto chunk_t0 = [&](int use) { return begin + use * kC; };
  __syncthreads();  // the mbarriers are initialised

  if (warp == 8) {  // TMA
    if (lane == 0)
      issue_chunks<VT, kKda, true>(a, s.stage, s.full, s.empty, first, chunks, begin, hv, v0);
    return;
  }

  if (warp >= 4) {  // the output warpgroup
    const int tid = threadIdx.x - 128, ow = warp - 4;
    const auto output_chunk = [&]<int p>(int use) {
      const int t0 = chunk_t0(use), n = min(kC, end - t0);
      StateStage<VT, kKda>& st = s.stage[p];
      mbar_wait(&s.full[p], (use >> 1) & 1);
      const uint64_t stage_k = wgmma::desc_k_major(smem_addr(&st));
      const uint64_t st_k = wgmma::desc_k_major(smem_addr(s.st16[p]));
      const uint64_t d_k = wgmma::desc_k_major(smem_addr(s.d16[p]));
      float O[32];
#ifdef HYLA_CHUNK_PROBE
      unsigned long long t_probe = probe_clock();
      const bool probe_here = a.probe != nullptr && b == 0 && tid == 0;
#endif
      named_sync(kBarStIn + p, 256);
#ifdef HYLA_CHUNK_PROBE
      if (probe_here) probe_record(a, use)[7] = probe_clock() - t_probe;
#endif
      wgmma::fence();
#pragma unroll
      for (int ks = 0; ks < 8; ++ks)
        wgmma::mma_m64n64k16_ss(O, wgmma::desc_advance(st_k, wgmma::k_step_bytes(ks)),
                                tile_desc(stage_k, &st, st.q, wgmma::k_step_bytes(ks)), ks > 0);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operand(O);
      if constexpr (!kKda) scale_columns(O, st.vec + kC, c);
#ifdef HYLA_CHUNK_PROBE
      t_probe = probe_clock();
#endif
      named_sync(kBarDeltaIn + p, 256);
#ifdef HYLA_CHUNK_PROBE
      if (probe_here) probe_record(a, use)[8] = probe_clock() - t_probe;
#endif
      wgmma::fence();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
        wgmma::mma_m64n64k16_ss(O, wgmma::desc_advance(d_k, wgmma::k_step_bytes(ks)),
                                tile_desc(stage_k, &st, st.aqk, wgmma::k_step_bytes(ks)), true);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operand(O);
      if (use + 2 < chunks) named_arrive(kBarRead + p, 256);  // st16[p], d16[p] read
      if (tid == 0) mbar_arrive(&s.empty[p]);                 // and the stage
      if (a.o_tma && n == kC) {
#ifdef HYLA_CHUNK_PROBE
        t_probe = probe_clock();
#endif
        if (tid == 0) bulk_wait_read<0>();  // the last o16 tile has left
        named_sync(kBarOut, 128);
#ifdef HYLA_CHUNK_PROBE
        if (probe_here) probe_record(a, use)[6] = probe_clock() - t_probe;
#endif
        o_to_tile(O, smem_addr(s.o16), ow, lane);
        fence_proxy_async();  // before the tensor-map store reads o16
        named_sync(kBarOut, 128);
        if (tid == 0) tma_store_3d(&a.map_o, s.o16, v0, hv, t0);
      } else {
        named_sync(kBarOut, 128);  // the last store_o has read the tile
        o_to_f32(O, s.o, ow, g, c);
        named_sync(kBarOut, 128);
        store_o<VT, 128>(a, s.o, t0, n, hv, v0, tid);
      }
    };
    for_each_chunk(chunks, output_chunk);
    if (tid == 0) bulk_wait_read<0>();  // before the block's memory goes
    return;
  }

  // The state warpgroup.
  const int row0 = warp * 16 + g;  // this thread's state rows row0, row0 + 8
  // V^T's fragments in the v box, as vt_offset(warp, lane).
  const uint32_t vt_off = (8 * (lane >> 4) + (lane & 7)) * kRowBytes +
                          ((((2 * warp) | ((lane >> 3) & 1)) ^ (lane & 7)) << 4);
  float S[64];
  const StateRows rows{int64_t(a.d_v) * kD, hv, row0, c, v0};
  load_state(a, S, initial_slot(a, b), rows);
  int64_t boundary = a.boundary_first[b];
  const auto state_chunk = [&]<int p>(int use) {
    const int n = min(kC, end - chunk_t0(use));
    StateStage<VT, kKda>& st = s.stage[p];
#ifdef HYLA_CHUNK_PROBE
    const unsigned long long full_start = probe_clock();
#endif
    mbar_wait(&s.full[p], (use >> 1) & 1);
#ifdef HYLA_CHUNK_PROBE
    if (a.probe != nullptr && b == 0 && threadIdx.x == 0) {
      unsigned long long* at = probe_record(a, use);
      uint32_t smid;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
      at[2] = full_start, at[3] = probe_clock(), at[4] = clock64(), at[9] = smid;
    }
#endif
    zero_partial_chunk<VT, kKda, 128>(st, n, kBarState);
    const float* kg = kKda ? nullptr : st.vec;  // GDN's per-token factors
    [[maybe_unused]] const float* kd = kKda ? nullptr : st.vec + 2 * kC;
    const uint32_t stage_addr = smem_addr(&st);
    const uint64_t k_major = wgmma::desc_k_major(stage_addr);

    // X = S^T K^T, A = S^T as bf16, which also goes to the output warpgroup's tile meanwhile.
    uint32_t sa[8][4];
    s_fragments(sa, S, c);
    float X[32];
    wgmma::fence();
    issue_keys_product(X, sa, k_major, st, st.k);
    wgmma::commit();
#ifdef HYLA_CHUNK_PROBE
    const unsigned long long read_start = probe_clock();
#endif
    if (use >= 2) named_sync(kBarRead + p, 256);  // chunk use - 2's tiles are read
#ifdef HYLA_CHUNK_PROBE
    if (a.probe != nullptr && b == 0 && threadIdx.x == 0)
      probe_record(a, use)[5] = probe_clock() - read_start;
#endif
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) store_a(smem_addr(s.st16[p]), sa[ks], ks, warp, lane);
    fence_proxy_async();
    named_arrive(kBarStIn + p, 256);
    wgmma::wait<0>();
    wgmma::fence_operand(X);

    // P^T = V^T - X Diag(kg), then Delta^T = P^T T^T.
    uint32_t pa[4][4];
    p_fragments<kKda>(pa, X, smem_addr(st.v) + vt_off, kg, c);
    float D[32];
    wgmma::fence();
    issue_delta_product(D, pa, k_major, st);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operand(D);

    // S^T = exp(G_n) S^T + Delta^T Diag(kd) K; Delta^T to the output warpgroup meanwhile.
    uint32_t da[4][4], dd[4][4];
    delta_fragments<kKda>(da, dd, D, kd, c);
    decay_state<kKda>(S, st.vec, n, c);
    const uint64_t mn_major = wgmma::desc_mn_major(stage_addr, kBoxBytes);
    wgmma::fence();
    issue_state_update<kKda>(S, da, dd, mn_major, st);
    wgmma::commit();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) store_a(smem_addr(s.d16[p]), da[ks], ks, warp, lane);
    fence_proxy_async();
    named_arrive(kBarDeltaIn + p, 256);
    wgmma::wait<0>();
    wgmma::fence_operand(S);
    if (threadIdx.x == 0) mbar_arrive(&s.empty[p]);  // the stage is read
    if (n == kC) store_chunk_state(a, S, boundary, rows);
  };
  for_each_chunk(chunks, state_chunk);

  store_state(a, S, chunk_pool_slot(a.final_slots, a.final_stride, b, a.num_slots), rows);
}

// ---- the wide kernel: 128 value rows a block, every product in each row warpgroup ----
// Two warpgroups of 64 value rows share each stage (q, k, T, A_qk and the factors come once for 128
// rows: the roles kernel's blocks read them once per 64), and each works alone on its rows: X =
// S^T K^T and Xq = S^T Q^T from the same register A, P^T and Delta^T, O^T = Xq Diag(qg) + Delta^T
// A_qk^T and the state's update, Delta^T as register A for both. No hand-over tiles, so the two
// fit beside two stages and their chains fill each other's waits: more chunks a second per SM than
// the roles kernel (many blocks), each chunk later (few blocks). The third warpgroup is the TMA
// warp's (its other warps leave at once); it gives its registers to the two by setmaxnreg (~230 a
// thread without spills).
constexpr int kWide = 2;  // row warpgroups
constexpr int kWideThreads = 128 * (kWide + 1);
template <bool kKda>
struct alignas(1024) WideSmem {
  StateStage<64 * kWide, kKda> stage[2];
  alignas(1024) bf16 o16[kWide][kBox];  // each warpgroup's chunk of o for the tensor-map store
  float o[kWide][kC * (kWgVT + 4)];     // else o for store_o
  uint64_t full[2], empty[2];
};
template <bool kKda>
constexpr size_t kWideSmemBytes = sizeof(WideSmem<kKda>) + 1024;
constexpr int kBarWideTail = 1, kBarWideOut = 2;  // + warpgroup

/// The calling warpgroup's registers a thread (setmaxnreg: .dec gives them back to the SM, .inc
/// waits until enough are free).
template <int kRegs, bool kInc>
__device__ __forceinline__ void set_max_registers() {
  if constexpr (kInc)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
  else
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

template <bool kKda>
__global__ void __launch_bounds__(kWideThreads, 1)
    wgmma_wide_kernel(const __grid_constant__ MmaArgs a) {
  constexpr int VT = 64 * kWide;  // the block's value rows
  const int b = blockIdx.x, hv = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wg = warp >> 2, wwarp = warp & 3, tid = threadIdx.x & 127;
  const int v0 = blockIdx.z * VT + wg * kWgVT;  // this warpgroup's value rows
  const int g = lane >> 2, c = lane & 3;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  WideSmem<kKda>& s = stage_smem<WideSmem<kKda>>(smem_raw, kWide);
  int begin, end;
  chunk_sequence_range(a.cu, a.cu_stride, a.T, b, begin, end);
  const int first = a.chunk_first[b], last = a.chunk_first[b + 1], chunks = last - first;
  const auto chunk_t0 = [&](int use) { return begin + use * kC; };
  __syncthreads();  // the mbarriers are initialised

  if (warp >= 4 * kWide) {  // TMA
    set_max_registers<40, false>();
    if (warp == 4 * kWide && lane == 0)
      issue_chunks<VT, kKda, false>(a, s.stage, s.full, s.empty, first, chunks, begin, hv,
                                    blockIdx.z * VT);
    return;
  }
  set_max_registers<232, true>();
  const int row0 = wwarp * 16 + g;  // this thread's state rows row0, row0 + 8
  const uint32_t vt_off = wg * kBoxBytes + vt_offset(wwarp, lane);  // this warpgroup's v box
  float S[64];
  const StateRows rows{int64_t(a.d_v) * kD, hv, row0, c, v0};
  load_state(a, S, initial_slot(a, b), rows);
  int64_t boundary = a.boundary_first[b];
  const auto chunk = [&]<int p>(int use) {
    const int t0 = chunk_t0(use), n = min(kC, end - t0);
    StateStage<VT, kKda>& st = s.stage[p];
    mbar_wait(&s.full[p], (use >> 1) & 1);
    zero_partial_chunk<VT, kKda, 128 * kWide>(st, n, kBarWideTail);
    const uint32_t stage_addr = smem_addr(&st);
    const uint64_t k_major = wgmma::desc_k_major(stage_addr);

    // X = S^T K^T and Xq = S^T Q^T (into O), A = S^T as bf16; X first.
    uint32_t sa[8][4];
    s_fragments(sa, S, c);
    float X[32], O[32];
    wgmma::fence();
    issue_keys_product(X, sa, k_major, st, st.k);
    wgmma::commit();
    issue_keys_product(O, sa, k_major, st, st.q);
    wgmma::commit();
    wgmma::wait<1>();
    wgmma::fence_operand(X);

    // P^T = V^T - X Diag(kg), then Delta^T = P^T T^T.
    const float* kg = kKda ? nullptr : st.vec;
    [[maybe_unused]] const float* qg = kKda ? nullptr : st.vec + kC;
    [[maybe_unused]] const float* kd = kKda ? nullptr : st.vec + 2 * kC;
    uint32_t pa[4][4];
    p_fragments<kKda>(pa, X, smem_addr(st.v) + vt_off, kg, c);
    float D[32];
    wgmma::fence();
    issue_delta_product(D, pa, k_major, st);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operand(D);
    wgmma::fence_operand(O);

    // O^T = Xq Diag(qg) + Delta^T A_qk^T; S^T = exp(G_n) S^T + Delta^T Diag(kd) K.
    if constexpr (!kKda) scale_columns(O, qg, c);
    uint32_t da[4][4], dd[4][4];
    delta_fragments<kKda>(da, dd, D, kd, c);
    decay_state<kKda>(S, st.vec, n, c);
    const uint64_t mn_major = wgmma::desc_mn_major(stage_addr, kBoxBytes);
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
      wgmma::mma_m64n64k16<0>(O, da[ks], tile_desc(k_major, &st, st.aqk, wgmma::k_step_bytes(ks)),
                              true);
    issue_state_update<kKda>(S, da, dd, mn_major, st);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operand(O);
    wgmma::fence_operand(S);
    if (tid == 0) mbar_arrive(&s.empty[p]);  // this warpgroup has read the stage
    if (n == kC) store_chunk_state(a, S, boundary, rows);

    // o by tensor-map store of whole chunks, else through the f32 tile.
    if (a.o_tma && n == kC) {
      if (tid == 0) bulk_wait_read<0>();  // the last o16 tile has left
      named_sync(kBarWideOut + wg, 128);
      o_to_tile(O, smem_addr(s.o16[wg]), wwarp, lane);
      fence_proxy_async();  // before the tensor-map store reads o16
      named_sync(kBarWideOut + wg, 128);
      if (tid == 0) tma_store_3d(&a.map_o, s.o16[wg], v0, hv, t0);
    } else {
      named_sync(kBarWideOut + wg, 128);  // the last store_o has read the tile
      o_to_f32(O, s.o[wg], wwarp, g, c);
      named_sync(kBarWideOut + wg, 128);
      store_o<kWgVT, 128>(a, s.o[wg], t0, n, hv, v0, tid);
    }
  };
  for_each_chunk(chunks, chunk);
  if (tid == 0) bulk_wait_read<0>();  // before the block's memory goes

  store_state(a, S, chunk_pool_slot(a.final_slots, a.final_stride, b, a.num_slots), rows);
}

// ---- context parallelism: a segment's transfer (gated_delta_rule_chunk_mma.cu has the scheme)
// ---- Over a segment of chunks the state maps as S^T_end = S^T_start M + L: M = the product of the
// chunks' [d_k, d_k] maps (the recurrence run from S^T = I with v = 0), L = the segment run from
// zeros with its v. This kernel runs both as rows of one augmented state, 128 rows a block: block z
// = 0 the d_k rows of M (identity start, no v tile), z >= 1 the value rows 128 (z - 1) .. of L;
// no o, no boundary states; the rows go to a.transfer [B', HV, d_k + d_v, d_k]. Two row warpgroups
// and a TMA warpgroup, as the wide kernel; the last segment of each sequence needs no transfer.
template <bool kKda>
__global__ void __launch_bounds__(kWideThreads, 1)
    wgmma_transfer_kernel(const __grid_constant__ MmaArgs a) {
  constexpr int VT = 64 * kWide;
  const int b = blockIdx.x, hv = blockIdx.y;
  if (b % a.segments == a.segments - 1) return;  // the whole block: no barrier yet
  const bool m_rows = blockIdx.z == 0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wg = warp >> 2, wwarp = warp & 3, tid = threadIdx.x & 127;
  const int g = lane >> 2, c = lane & 3;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  WideSmem<kKda>& s = stage_smem<WideSmem<kKda>>(smem_raw, kWide);
  int begin, end;
  chunk_sequence_range(a.cu, a.cu_stride, a.T, b, begin, end);
  const int first = a.chunk_first[b], last = a.chunk_first[b + 1], chunks = last - first;
  __syncthreads();  // the mbarriers are initialised

  if (warp >= 4 * kWide) {  // TMA
    set_max_registers<40, false>();
    if (warp == 4 * kWide && lane == 0)
      issue_chunks<VT, kKda, false>(a, s.stage, s.full, s.empty, first, chunks, begin, hv,
                                    m_rows ? 0 : (blockIdx.z - 1) * VT, /*with_v=*/!m_rows);
    return;
  }
  set_max_registers<232, true>();
  const int row0 = wwarp * 16 + g;
  const uint32_t vt_off = wg * kBoxBytes + vt_offset(wwarp, lane);
  // Start: M's rows the identity's (row r of this warpgroup is key 64 wg + r), L's zeros.
  float S[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    const int row = 64 * wg + row0 + ((i >> 1) & 1) * 8, key = 8 * (i >> 2) + 2 * c + (i & 1);
    S[i] = m_rows && row == key ? 1.0f : 0.0f;
  }
  const auto chunk = [&]<int p>(int use) {
    const int n = min(kC, end - (begin + use * kC));
    StateStage<VT, kKda>& st = s.stage[p];
    mbar_wait(&s.full[p], (use >> 1) & 1);
    zero_partial_chunk<VT, kKda, 128 * kWide>(st, n, kBarWideTail);
    const uint32_t stage_addr = smem_addr(&st);
    const uint64_t k_major = wgmma::desc_k_major(stage_addr);
    uint32_t sa[8][4];
    s_fragments(sa, S, c);
    float X[32];
    wgmma::fence();
    issue_keys_product(X, sa, k_major, st, st.k);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operand(X);
    // P^T = V^T - X Diag(kg) (M's rows: v = 0), Delta^T = P^T T^T.
    const float* kg = kKda ? nullptr : st.vec;
    [[maybe_unused]] const float* kd = kKda ? nullptr : st.vec + 2 * kC;
    uint32_t pa[4][4];
    if (m_rows) {
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int j = 2 * ks + (i >> 1), e = (i & 1) * 2;
          const float2 f =
              kKda ? make_float2(1.0f, 1.0f) : *reinterpret_cast<const float2*>(kg + 8 * j + 2 * c);
          pa[ks][(i >> 1) * 2 + (i & 1)] = pack_bf16(-X[4 * j + e] * f.x, -X[4 * j + e + 1] * f.y);
        }
    } else {
      p_fragments<kKda>(pa, X, smem_addr(st.v) + vt_off, kg, c);
    }
    float D[32];
    wgmma::fence();
    issue_delta_product(D, pa, k_major, st);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operand(D);
    uint32_t da[4][4], dd[4][4];
    delta_fragments<kKda>(da, dd, D, kd, c);
    decay_state<kKda>(S, st.vec, n, c);
    const uint64_t mn_major = wgmma::desc_mn_major(stage_addr, kBoxBytes);
    wgmma::fence();
    issue_state_update<kKda>(S, da, dd, mn_major, st);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operand(S);
    if (tid == 0) mbar_arrive(&s.empty[p]);
  };
  for_each_chunk(chunks, chunk);

  // Rows 128 z + 64 wg .. of the segment's [d_k + d_v, d_k] transfer.
  const StateRows rows{int64_t(kD + a.d_v) * kD, hv, row0, c, int(VT * blockIdx.z) + 64 * wg};
#pragma unroll
  for (int i = 0; i < 64; i += 2)
    *reinterpret_cast<float2*>(a.transfer + rows.at(a, b, i)) = make_float2(S[i], S[i + 1]);
}

/// Context parallelism's combine, <<<(B, HV, d_v / 16), 256>>>: each sequence's segment initial
/// states in order, S_0 from the pool (zeros without a slot) and S_{j+1} = S_j M_j + L_j from
/// segment j's transfer, into a.initial_states [B', HV, d_v, d_k] f32 (entry b P + j). Rows are
/// independent: a block takes 16 value rows, thread t row t / 16 and 8 keys at 8 (t % 16).
__global__ void __launch_bounds__(256) segment_combine_kernel(const __grid_constant__ MmaArgs a) {
  const int b = blockIdx.x, hv = blockIdx.y, P = a.segments;
  const int r = threadIdx.x / 16, col = 8 * (threadIdx.x % 16), row = 16 * blockIdx.z + r;
  __shared__ float sj[16][kD];
  const int64_t slot = chunk_pool_slot(a.initial_slots, a.initial_stride, b, a.num_slots);
  const int64_t state_floats = int64_t(a.d_v) * kD;
  float x[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int64_t at = (slot * a.HV + hv) * state_floats + int64_t(row) * kD + col + e;
    x[e] = slot < 0      ? 0.0f
           : a.pool_bf16 ? __bfloat162float(static_cast<const bf16*>(a.pool)[at])
                         : static_cast<const float*>(a.pool)[at];
  }
  float* out = const_cast<float*>(a.initial_states);
  for (int j = 0;; ++j) {
    const int64_t seg = int64_t(b) * P + j;
    float* dst = out + (seg * a.HV + hv) * state_floats + int64_t(row) * kD + col;
#pragma unroll
    for (int e = 0; e < 8; ++e) dst[e] = x[e], sj[r][col + e] = x[e];
    if (j == P - 1) break;
    __syncthreads();
    const float* ml = a.transfer + (seg * a.HV + hv) * int64_t(kD + a.d_v) * kD;
    const float* l = ml + int64_t(kD + row) * kD + col;
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = l[e];
    for (int k = 0; k < kD; ++k) {
      const float s = sj[r][k];
      const float4 m0 = *reinterpret_cast<const float4*>(ml + int64_t(k) * kD + col);
      const float4 m1 = *reinterpret_cast<const float4*>(ml + int64_t(k) * kD + col + 4);
      x[0] += s * m0.x, x[1] += s * m0.y, x[2] += s * m0.z, x[3] += s * m0.w;
      x[4] += s * m1.x, x[5] += s * m1.y, x[6] += s * m1.z, x[7] += s * m1.w;
    }
    __syncthreads();
  }
}

/// The state kernels' tensor maps (MmaArgs::map_*) for value tiles of VT columns; o's (whole
/// chunks written by the wgmma kernel) when a.o_tma. The rows read or written as they are passed
/// chunk_bf16_rows (16-byte aligned, strides multiples of 16 bytes, heads inside tokens), as TMA
/// wants; the chunk-major rows fit TMA's 32-bit coordinates (the entry checks).
void encode_state_maps(MmaArgs& a, bool kda, int VT) {
  const uint64_t chunk_rows = uint64_t(a.max_chunks) * uint64_t(a.HV) * kC;
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
  if (a.o_tma && VT == kWgVT)
    a.map_o = token_major(static_cast<const bf16*>(a.o), uint64_t(a.d_v), uint64_t(a.HV), a.o_st,
                          a.o_sh, 64);
}

template <int VT, bool kKda>
void launch_kernel(MmaArgs& a, cudaStream_t s) {
  if (a.T > 0) encode_state_maps(a, kKda, VT);  // else no sequence has a chunk
  allow_dynamic_smem(mma_state_kernel<VT, kKda>, kStateSmemBytes<VT, kKda>);
  mma_state_kernel<VT, kKda><<<dim3(unsigned(a.B), unsigned(a.HV), unsigned(a.d_v / VT)), VT * 8,
                               kStateSmemBytes<VT, kKda>, s>>>(a);
  HYLA_CUDA_CHECK_LAUNCH();
}

template <bool kKda>
void launch_wgmma(MmaArgs& a, cudaStream_t s) {
  if (a.T > 0) encode_state_maps(a, kKda, kWgVT);
  allow_dynamic_smem(wgmma_state_kernel<kKda>, kWgStateSmemBytes<kKda>);
  launch_kernel_ex<wgmma_state_kernel<kKda>>(
      LaunchShape{.grid = dim3(unsigned(a.B), unsigned(a.HV), unsigned(a.d_v / kWgVT)),
                  .block = dim3(kWgThreads),
                  .shared_bytes = kWgStateSmemBytes<kKda>,
                  .dependent = a.ready != nullptr},
      s, a);
}

template <bool kKda>
void launch_wide(MmaArgs& a, cudaStream_t s) {
  if (a.T > 0) encode_state_maps(a, kKda, kWgVT);
  allow_dynamic_smem(wgmma_wide_kernel<kKda>, kWideSmemBytes<kKda>);
  launch_kernel_ex<wgmma_wide_kernel<kKda>>(
      LaunchShape{.grid = dim3(unsigned(a.B), unsigned(a.HV), unsigned(a.d_v / (kWgVT * kWide))),
                  .block = dim3(kWideThreads),
                  .shared_bytes = kWideSmemBytes<kKda>,
                  .dependent = a.ready != nullptr},
      s, a);
}

}  // namespace

bool wide_fits(const MmaArgs& a) { return a.d_v % (kWgVT * kWide) == 0; }

void launch_transfer(MmaArgs& a, cudaStream_t s) {
  HYLA_CHECK(wide_fits(a) && a.segments > 1 && a.transfer != nullptr, "transfer kernel");
  if (a.T > 0) encode_state_maps(a, a.per_channel, kWgVT);
  const dim3 grid(unsigned(a.B), unsigned(a.HV), unsigned(1 + a.d_v / (kWgVT * kWide)));
  if (a.per_channel) {
    allow_dynamic_smem(wgmma_transfer_kernel<true>, kWideSmemBytes<true>);
    wgmma_transfer_kernel<true><<<grid, kWideThreads, kWideSmemBytes<true>, s>>>(a);
  } else {
    allow_dynamic_smem(wgmma_transfer_kernel<false>, kWideSmemBytes<false>);
    wgmma_transfer_kernel<false><<<grid, kWideThreads, kWideSmemBytes<false>, s>>>(a);
  }
  HYLA_CUDA_CHECK_LAUNCH();
}

void launch_combine(const MmaArgs& a, cudaStream_t s) {
  HYLA_CHECK(a.segments > 1 && a.d_v % 16 == 0, "combine kernel");
  segment_combine_kernel<<<dim3(unsigned(a.B), unsigned(a.HV), unsigned(a.d_v / 16)), 256, 0, s>>>(
      a);
  HYLA_CUDA_CHECK_LAUNCH();
}

int64_t state_blocks(const MmaArgs& a, ChunkStateKernel kernel) {
  const int64_t rows = kernel == ChunkStateKernel::kWide ? kWgVT * kWide
                       : a.d_v % kWgVT == 0              ? kWgVT
                                                         : 32;
  return int64_t(a.B) * a.HV * (a.d_v / rows);
}

void launch_state(MmaArgs& a, ChunkStateKernel kernel, cudaStream_t s) {
  HYLA_CHECK(a.ready == nullptr || a.d_v % kWgVT == 0, "side by side needs d_v % 64 == 0");
  if (kernel == ChunkStateKernel::kWide) {
    HYLA_CHECK(wide_fits(a), "the wide state kernel needs d_v % 128 == 0");
    a.per_channel ? launch_wide<true>(a, s) : launch_wide<false>(a, s);
  } else if (a.d_v % kWgVT == 0) {
    a.per_channel ? launch_wgmma<true>(a, s) : launch_wgmma<false>(a, s);
  } else {  // d_v an odd multiple of 32
    a.per_channel ? launch_kernel<32, true>(a, s) : launch_kernel<32, false>(a, s);
  }
}

}  // namespace hyla::kernels::cuda::chunk_mma
