// CUDA body of the grouped expert projection (see kernels/moe_grouped_linear.h). Two launches on
// the caller's stream, whatever the routing, and no host sync:
//   table: one block turns expert_offsets into row tiles {expert, first row, end row} of at most
//          BM rows (expert e: ceil(count_e / BM) tiles, prefix-summed over e) in the workspace,
//          after a header holding the tile count. The host sizes the grid by the bound
//          min(E, N) + ceil(N / BM) on the count; blocks past the count exit.
//   gemm:  one block per (tile, 64 output columns): y[rows, cols] = x[rows] W[e, cols]^T over K
//          in steps of 64.
//     bf16 W (K % 8 == 0, x and W rows 16-byte aligned): W tiles [64 cols, 64 k] stream through
//       kStages shared-memory buffers by cp.async (each W byte read once per tile); the x tile
//       [BM, 64] is loaded a step ahead into registers, rounded to bf16 (nearest even) and
//       staged in shared memory; 4 warps multiply with wmma bf16 16x16x16, fp32 accumulate.
//       BM = 16 / 32 / 64 by the mean rows per expert (decode: ~1 row, so 16; prefill: 64).
//     otherwise (f32 W, odd K, misaligned views): CUDA cores, BM = 16, one warp per output column
//       at a time, lanes over K, fp32 sums of the values as given.
// Shared memory layout (bf16 path): [kStages][64][72] bf16 W stages | [BM][72] bf16 x tile; the
// epilogue reuses the W stages as a [BM][68] f32 tile so the stores to y are row-contiguous.
// Rows are padded by 16 bytes (72 = 64 + 8 elements): every row stays 16-byte aligned for
// cp.async and wmma, and the 8 rows a fragment load touches start 4 banks apart.
#include <mma.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/moe_grouped_linear.h"

namespace hyla::kernels::cuda {

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kTableThreads = 1024;
constexpr int kThreads = 128;  // 4 warps per GEMM block
constexpr int kBN = 64;        // output columns per block
constexpr int kBK = 64;        // K per pipeline step
constexpr int kStages = 3;     // W tiles in flight
constexpr int kLdW = kBK + 8;  // W stage row pitch (bf16 elements)
constexpr int kLdA = kBK + 8;  // x tile row pitch (bf16 elements)
constexpr int kLdC = kBN + 4;  // epilogue row pitch (f32 elements)
constexpr int kSimpleBM = int(kMoeGroupedLinearMinTileRows);
static_assert(kSimpleBM == 16, "the simple kernel keeps one accumulator per tile row");

// ---- tile table ----

struct TableArgs {
  const int32_t* expert_offsets;  // [E + 1]
  int4* table;                    // [1 + bound]: {count, 0, 0, 0}, then {expert, begin, end, 0}
  int E, N, BM;
  int64_t bound;
};

/// Inclusive prefix sum over the block (blockDim.x = kTableThreads); `sums` holds 32 values of
/// shared memory. Returns the thread's inclusive sum and the block total in *total. Starts and
/// ends with a barrier, so `sums` may be reused by the next call.
__device__ int64_t block_inclusive_scan(int64_t v, int64_t* sums, int64_t* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int64_t below = __shfl_up_sync(kFullMask, v, o);
    if (lane >= o) v += below;
  }
  __syncthreads();
  if (lane == 31) sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int64_t s = lane < warps ? sums[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int64_t below = __shfl_up_sync(kFullMask, s, o);
      if (lane >= o) s += below;
    }
    if (lane < warps) sums[lane] = s;
  }
  __syncthreads();
  if (warp > 0) v += sums[warp - 1];
  *total = sums[warps - 1];
  __syncthreads();
  return v;
}

/// One block: thread e (per round of kTableThreads experts) writes expert e's tiles. Offsets are
/// clamped into [0, N] so that bad ones cannot send a GEMM block out of bounds; entries past the
/// bound are dropped (only bad offsets make more tiles than the bound).
__global__ void __launch_bounds__(kTableThreads)
    moe_tile_table_kernel(const __grid_constant__ TableArgs a) {
  __shared__ int64_t sums[32];
  int64_t carry = 0;
  for (int base = 0; base < a.E; base += kTableThreads) {  // same trip count on every thread
    const int e = base + int(threadIdx.x);
    int begin = 0, end = 0;
    if (e < a.E) {
      begin = min(max(a.expert_offsets[e], 0), a.N);
      end = min(max(a.expert_offsets[e + 1], begin), a.N);
    }
    const int64_t tiles = (end - begin + a.BM - 1) / a.BM;
    int64_t total = 0;
    const int64_t first = carry + block_inclusive_scan(tiles, sums, &total) - tiles;
    for (int64_t j = 0; j < tiles && first + j < a.bound; ++j) {
      const int row = begin + int(j) * a.BM;
      a.table[1 + first + j] = make_int4(e, row, min(row + a.BM, end), 0);
    }
    carry += total;
  }
  if (threadIdx.x == 0) a.table[0] = make_int4(int(min(carry, a.bound)), 0, 0, 0);
}

// ---- tensor-core GEMM (bf16 W) ----

struct GemmArgs {
  const float* x;          // [N, K], row stride x_row (a multiple of 4), 16-byte aligned
  const __nv_bfloat16* w;  // [E, Nout, K], expert stride w_expert (a multiple of 8), rows of K
  float* y;                // [N, Nout], row stride y_row
  const int4* table;
  int64_t x_row, w_expert, y_row;
  int K, Nout;
};

template <int kBM>
struct TcTiling {
  static constexpr int kWarpsM = kBM == 16 ? 1 : 2;   // warps over rows
  static constexpr int kWarpsN = 4 / kWarpsM;         // warps over columns
  static constexpr int kFragsM = kBM / 16 / kWarpsM;  // 16x16 fragments per warp
  static constexpr int kFragsN = kBN / 16 / kWarpsN;
  static constexpr int kXVecs = kBM * kBK / 4 / kThreads;  // float4 of x per thread per step
  static constexpr int kWBytes = kStages * kBN * kLdW * 2;
  static constexpr int kABytes = kBM * kLdA * 2;
  static_assert(kWarpsM * kWarpsN * 32 == kThreads && kFragsM >= 1 && kFragsN >= 1);
  static_assert(kXVecs >= 1 && kXVecs * 4 * kThreads == kBM * kBK);
  static_assert(kBM * kLdC * 4 <= kWBytes, "the epilogue tile fits in the W stages");
  static_assert(kWBytes % 128 == 0 && kWBytes + kABytes <= 48 * 1024);
};

template <int kBM>
__global__ void __launch_bounds__(kThreads)
    moe_grouped_gemm_bf16_kernel(const __grid_constant__ GemmArgs a) {
  namespace wmma = nvcuda::wmma;
  using Tiling = TcTiling<kBM>;
  if (int(blockIdx.x) >= a.table[0].x) return;  // past the tile count: uniform per block
  const int4 tile = a.table[1 + blockIdx.x];
  const int row0 = tile.y, rows = tile.z - tile.y;  // rows in [1, kBM]
  const int n0 = int(blockIdx.y) * kBN;
  const __nv_bfloat16* w = a.w + int64_t(tile.x) * a.w_expert;

  __shared__ __align__(128) unsigned char smem[Tiling::kWBytes + Tiling::kABytes];
  __nv_bfloat16* w_stages = reinterpret_cast<__nv_bfloat16*>(smem);  // [kStages][kBN][kLdW]
  __nv_bfloat16* x_tile = reinterpret_cast<__nv_bfloat16*>(smem + Tiling::kWBytes);  // [kBM][kLdA]
  float* c_tile = reinterpret_cast<float*>(smem);  // [kBM][kLdC], after the main loop

  // W[e, n0 : n0 + 64, k0 : k0 + 64] -> stage, 16 bytes per cp.async, zeros past Nout or K
  auto load_w = [&](int stage, int step) {
    constexpr int kChunksPerRow = kBK / 8;
    const int k0 = step * kBK;
    __nv_bfloat16* dst = w_stages + stage * kBN * kLdW;
#pragma unroll
    for (int i = 0; i < kBN * kChunksPerRow / kThreads; ++i) {
      const int c = int(threadIdx.x) + i * kThreads;
      const int n = c / kChunksPerRow, k = (c % kChunksPerRow) * 8;
      const bool valid = n0 + n < a.Nout && k0 + k < a.K;
      const __nv_bfloat16* src = valid ? w + int64_t(n0 + n) * a.K + k0 + k : w;
      cp_async16(dst + n * kLdW + k, src, valid);
    }
  };
  // x[row0 : row0 + rows, k0 : k0 + 64] -> registers (zeros past rows or K)
  float4 xr[Tiling::kXVecs];
  auto load_x = [&](int step) {
    constexpr int kVecsPerRow = kBK / 4;
    const int k0 = step * kBK;
#pragma unroll
    for (int i = 0; i < Tiling::kXVecs; ++i) {
      const int v = int(threadIdx.x) + i * kThreads;
      const int m = v / kVecsPerRow, k = (v % kVecsPerRow) * 4;
      xr[i] = m < rows && k0 + k < a.K
                  ? *reinterpret_cast<const float4*>(a.x + int64_t(row0 + m) * a.x_row + k0 + k)
                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  };
  // registers -> x tile, rounded to bf16 (nearest even)
  auto store_x = [&]() {
    constexpr int kVecsPerRow = kBK / 4;
#pragma unroll
    for (int i = 0; i < Tiling::kXVecs; ++i) {
      const int v = int(threadIdx.x) + i * kThreads;
      const int m = v / kVecsPerRow, k = (v % kVecsPerRow) * 4;
      const __nv_bfloat162 lo = __floats2bfloat162_rn(xr[i].x, xr[i].y);
      const __nv_bfloat162 hi = __floats2bfloat162_rn(xr[i].z, xr[i].w);
      uint2 packed;
      packed.x = *reinterpret_cast<const uint32_t*>(&lo);
      packed.y = *reinterpret_cast<const uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(x_tile + m * kLdA + k) = packed;  // 8-byte aligned: k % 4 == 0
    }
  };

  const int warp = int(threadIdx.x) / 32;
  const int warp_m = warp / Tiling::kWarpsN, warp_n = warp % Tiling::kWarpsN;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[Tiling::kFragsM][Tiling::kFragsN];
#pragma unroll
  for (int i = 0; i < Tiling::kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < Tiling::kFragsN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  // Pipeline: W steps 0 .. kStages - 2 in flight before the loop; step s + kStages - 1 is issued
  // once step s's buffer is ready, into the buffer step s - 1 used. One commit group per step
  // (empty past the end), so wait_group<kStages - 2> at step s means steps <= s have landed.
  const int steps = int(ceil_div(a.K, kBK));
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load_w(s, s);
    cp_async_commit();
  }
  load_x(0);
  for (int step = 0; step < steps; ++step) {
    store_x();  // the x tile's readers of step - 1 passed the barrier at its end
    if (step + 1 < steps) load_x(step + 1);  // in flight during this step's multiply
    cp_async_wait<kStages - 2>();
    __syncthreads();  // x tile and W stage `step` visible to all; stage step - 1 free
    const int next = step + kStages - 1;
    if (next < steps) load_w(next % kStages, next);
    cp_async_commit();

    const __nv_bfloat16* w_stage = w_stages + (step % kStages) * kBN * kLdW;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>
          a_frag[Tiling::kFragsM];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major>
          b_frag[Tiling::kFragsN];
#pragma unroll
      for (int i = 0; i < Tiling::kFragsM; ++i)
        wmma::load_matrix_sync(a_frag[i], x_tile + (warp_m * Tiling::kFragsM + i) * 16 * kLdA + kk,
                               kLdA);
        // B[k, n] = W[n, k]: the stage's [n][k] rows read column-major
#pragma unroll
      for (int j = 0; j < Tiling::kFragsN; ++j)
        wmma::load_matrix_sync(b_frag[j], w_stage + (warp_n * Tiling::kFragsN + j) * 16 * kLdW + kk,
                               kLdW);
#pragma unroll
      for (int i = 0; i < Tiling::kFragsM; ++i)
#pragma unroll
        for (int j = 0; j < Tiling::kFragsN; ++j)
          wmma::mma_sync(acc[i][j], a_frag[i], b_frag[j], acc[i][j]);
    }
    __syncthreads();  // every warp is done with the x tile and W stage `step`
  }

  // Epilogue: fragments -> c_tile (over the W stages, no copy pending) -> y, rows < `rows` only
  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int i = 0; i < Tiling::kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < Tiling::kFragsN; ++j)
      wmma::store_matrix_sync(
          c_tile + (warp_m * Tiling::kFragsM + i) * 16 * kLdC + (warp_n * Tiling::kFragsN + j) * 16,
          acc[i][j], kLdC, wmma::mem_row_major);
  __syncthreads();
  for (int i = int(threadIdx.x); i < kBM * kBN; i += kThreads) {
    const int m = i / kBN, n = i % kBN;
    if (m < rows && n0 + n < a.Nout)
      a.y[int64_t(row0 + m) * a.y_row + n0 + n] = c_tile[m * kLdC + n];
  }
}

// ---- CUDA-core GEMM (f32 W, or bf16 W the tensor-core path cannot take) ----

template <typename TW>
struct SimpleArgs {
  const float* x;  // [N, K], row stride x_row
  const TW* w;     // [E, Nout, K], expert stride w_expert, rows of K
  float* y;        // [N, Nout], row stride y_row
  const int4* table;
  int64_t x_row, w_expert, y_row;
  int K, Nout;
};

/// Block (tile of <= 16 rows, 64 columns); warp c handles columns n0 + c, n0 + c + 4, ...:
/// lanes stride K, one fp32 partial sum per tile row, then a warp sum per row.
template <typename TW>
__global__ void __launch_bounds__(kThreads)
    moe_grouped_gemm_simple_kernel(const __grid_constant__ SimpleArgs<TW> a) {
  if (int(blockIdx.x) >= a.table[0].x) return;  // uniform per block
  const int4 tile = a.table[1 + blockIdx.x];
  const int row0 = tile.y, rows = tile.z - tile.y;  // rows in [1, kSimpleBM]
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const TW* w = a.w + int64_t(tile.x) * a.w_expert;
  const float* x = a.x + int64_t(row0) * a.x_row;
  for (int c = warp; c < kBN; c += kThreads / 32) {
    const int n = int(blockIdx.y) * kBN + c;
    if (n >= a.Nout) break;  // uniform per warp; later columns are further out
    const TW* w_row = w + int64_t(n) * a.K;
    float acc[kSimpleBM];
#pragma unroll
    for (int m = 0; m < kSimpleBM; ++m) acc[m] = 0.0f;
    for (int k = lane; k < a.K; k += 32) {
      const float wk = to_float(w_row[k]);
#pragma unroll
      for (int m = 0; m < kSimpleBM; ++m)
        if (m < rows) acc[m] = fmaf(x[int64_t(m) * a.x_row + k], wk, acc[m]);
    }
#pragma unroll
    for (int m = 0; m < kSimpleBM; ++m) {
      const float sum = warp_sum(acc[m]);  // every lane takes part
      if (lane == 0 && m < rows) a.y[int64_t(row0 + m) * a.y_row + n] = sum;
    }
  }
}

// ---- launch ----

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

/// Rows per tensor-core tile: the mean rows per expert rounded up to 16, 32 or 64, so a tile of
/// a typical expert is mostly real rows while W is re-read as few times as possible.
int tile_rows_for(int64_t N, int64_t E) {
  const int64_t mean = ceil_div(N, E);
  return mean <= 16 ? 16 : mean <= 32 ? 32 : 64;
}

template <int kBM>
void launch_tc(const GemmArgs& args, int64_t bound, int64_t column_blocks, cudaStream_t s) {
  moe_grouped_gemm_bf16_kernel<kBM>
      <<<dim3(unsigned(bound), unsigned(column_blocks)), kThreads, 0, s>>>(args);
}

}  // namespace

Status moe_grouped_linear(const MoeGroupedLinearParams& p, Stream stream) {
  const int64_t N = p.x.size(0), K = p.x.size(1), E = p.weight.size(0), Nout = p.weight.size(1);
  if (N == 0) return ok_status();
  const bool tensor_cores = p.weight.dtype() == DType::kBF16 && K % 8 == 0 &&
                            p.weight.stride(0) % 8 == 0 && aligned16(p.weight.raw()) &&
                            p.x.stride(0) % 4 == 0 && aligned16(p.x.raw());
  const int BM = tensor_cores ? tile_rows_for(N, E) : kSimpleBM;
  const int64_t bound = std::min(E, N) + ceil_div(N, BM);
  if (bound > INT32_MAX)
    return invalid_argument("moe_grouped_linear: ", bound, " row tiles, expected at most ",
                            INT32_MAX, " (grid size)");
  const int64_t column_blocks = ceil_div(Nout, kBN);
  const cudaStream_t s = to_cuda(stream);

  TableArgs table{};
  table.expert_offsets = ptr<const int32_t>(p.expert_offsets);
  table.table = ptr<int4>(p.workspace);
  table.E = int(E);
  table.N = int(N);
  table.BM = BM;
  table.bound = bound;
  moe_tile_table_kernel<<<1, kTableThreads, 0, s>>>(table);
  HYLA_CUDA_CHECK_LAUNCH();

  if (tensor_cores) {
    GemmArgs args{};
    args.x = ptr<const float>(p.x);
    args.w = ptr<const __nv_bfloat16>(p.weight);
    args.y = ptr<float>(p.y);
    args.table = ptr<const int4>(p.workspace);
    args.x_row = p.x.stride(0);
    args.w_expert = p.weight.stride(0);
    args.y_row = p.y.stride(0);
    args.K = int(K);
    args.Nout = int(Nout);
    switch (BM) {
      case 16: launch_tc<16>(args, bound, column_blocks, s); break;
      case 32: launch_tc<32>(args, bound, column_blocks, s); break;
      default: launch_tc<64>(args, bound, column_blocks, s); break;
    }
    HYLA_CUDA_CHECK_LAUNCH();
    return ok_status();
  }
  const bool known = dispatch_float(p.weight.dtype(), [&](auto tag) {
    using TW = decltype(tag);
    SimpleArgs<TW> args{};
    args.x = ptr<const float>(p.x);
    args.w = ptr<const TW>(p.weight);
    args.y = ptr<float>(p.y);
    args.table = ptr<const int4>(p.workspace);
    args.x_row = p.x.stride(0);
    args.w_expert = p.weight.stride(0);
    args.y_row = p.y.stride(0);
    args.K = int(K);
    args.Nout = int(Nout);
    moe_grouped_gemm_simple_kernel<TW>
        <<<dim3(unsigned(bound), unsigned(column_blocks)), kThreads, 0, s>>>(args);
    HYLA_CUDA_CHECK_LAUNCH();
  });
  if (!known)
    return internal_error("moe_grouped_linear: weight dtype ", dtype_name(p.weight.dtype()),
                          " slipped past the checks");
  return ok_status();
}

}  // namespace hyla::kernels::cuda
