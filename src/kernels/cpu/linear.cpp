// CPU body of the dense projection (see kernels/linear.h): y = x W^T + bias through OpenBLAS.
// f32 weights: one sgemm (sgemv for T = 1) that OpenBLAS threads itself.
// bf16 / f16 weights: tiles of weight rows are widened into per-task fp32 scratch and multiplied
// in parallel tasks; OpenBLAS (OpenMP build) runs single-threaded inside them.
#include "kernels/linear.h"

#include <cblas.h>

#include <algorithm>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>  // _mm256_cvtph_ps: 8 halves to floats in one instruction
#endif

#include "core/parallel.h"
#include "kernels/cpu/tensor_access.h"

namespace hyla::kernels::cpu {

namespace {

/// Weight rows per tile. T > 1: 256 rows, an sgemm panel large enough to run at full speed.
/// T = 1: the sgemv reads each widened row once, so the tile is kept near 128 KiB (L2).
/// Either way at least one tile per thread.
int64_t tile_rows(int64_t T, int64_t N, int64_t K) {
  constexpr int64_t kMaxRows = 256;
  constexpr int64_t kDecodeTileFloats = 32768;
  int64_t rows = T == 1 ? std::clamp<int64_t>(kDecodeTileFloats / K, 8, kMaxRows) : kMaxRows;
  const int64_t threads = std::max(1, num_threads());
  rows = std::min(rows, (N + threads - 1) / threads);
  return std::max<int64_t>(rows, 1);
}

void widen(const bf16* src, int64_t n, float* dst) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

void widen(const f16* src, int64_t n, float* dst) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

/// y[:, n0 : n0 + rows] = x W[n0 : n0 + rows]^T + bias[n0 : n0 + rows], W rows given in fp32
/// (`w`, contiguous [rows, K]).
void multiply_rows(const LinearParams& p, const float* w, int64_t n0, int64_t rows) {
  const int64_t T = p.x.size(0), K = p.x.size(1);
  const float* x = static_cast<const float*>(p.x.raw());
  float* y = static_cast<float*>(p.y.raw()) + n0;
  float beta = 0.0f;
  if (p.bias.defined()) {
    // y starts as the bias and the product is added to it (beta = 1)
    const float* bias = static_cast<const float*>(p.bias.raw()) + n0;
    for (int64_t t = 0; t < T; ++t) std::copy(bias, bias + rows, y + t * p.y.stride(0));
    beta = 1.0f;
  }
  if (T == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, int(rows), int(K), 1.0f, w, int(K), x, 1, beta, y, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(T), int(rows), int(K), 1.0f, x,
                int(p.x.stride(0)), w, int(K), beta, y, int(p.y.stride(0)));
  }
}

}  // namespace

void linear(const LinearParams& p) {
  const int64_t T = p.x.size(0), K = p.x.size(1), N = p.weight.size(0);
  if (T == 0) return;
  if (p.weight.dtype() == DType::kF32) {
    multiply_rows(p, static_cast<const float*>(p.weight.raw()), 0, N);
    return;
  }
  const int64_t rows = tile_rows(T, N, K);
  const int64_t num_tiles = (N + rows - 1) / rows;
  // one task per thread, each with one scratch buffer, takes every num_tasks-th tile (tiles cost
  // the same, so a static split balances)
  const int64_t num_tasks = std::min<int64_t>(num_tiles, std::max(1, num_threads()));
  auto run = [&]<typename TW>(TW) {
    const TW* weight = static_cast<const TW*>(p.weight.raw());
    parallel_for(num_tasks, [&](int64_t task) {
      std::vector<float> w(static_cast<size_t>(rows * K));
      for (int64_t tile = task; tile < num_tiles; tile += num_tasks) {
        const int64_t n0 = tile * rows, tile_n = std::min(rows, N - n0);
        widen(weight + n0 * K, tile_n * K, w.data());
        multiply_rows(p, w.data(), n0, tile_n);
      }
    });
  };
  if (p.weight.dtype() == DType::kBF16) {
    run(bf16{});
  } else {
    run(f16{});
  }
}

}  // namespace hyla::kernels::cpu
