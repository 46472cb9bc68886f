// CPU body of the dense projection (see kernels/linear.h): y = x W^T + bias.
// The weight rows are cut into tiles, one parallel_for task per thread taking every num_tasks-th
// tile (tiles cost the same, so a static split balances):
// - few tokens (decode): dot products straight from the stored f32 / bf16 weights, so each weight
//   byte is read once and nothing is widened into scratch (the step is bound by reading weights);
// - more tokens: f32 tiles go to sgemm as they are; bf16 / f16 tiles are widened into per-task
//   fp32 scratch first. OpenBLAS runs single-threaded inside the tasks (core/parallel).
#include "kernels/linear.h"

#include <cblas.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>  // _mm256_cvtph_ps: 8 halves to floats in one instruction
#endif

#include "core/parallel.h"
#include "kernels/cpu/tensor_access.h"

namespace hyla::kernels::cpu {

namespace {

/// Up to this many tokens the f32 and bf16 paths compute dot products from the stored weights:
/// each weight row is read from memory once and reused from L1 for every token; beyond it a
/// widened tile + sgemm does fewer operations per weight byte.
constexpr int64_t kDirectMaxTokens = 8;

/// Weight rows per tile, each tile one parallel_for item.
/// Direct path: about 128 KiB of weights per tile (tens of microseconds of reading, far more than
/// a region costs), a multiple of 4 rows. Widened path: 256 rows, an sgemm panel large enough to
/// run at full speed. Either way at least one tile per thread.
int64_t tile_rows(bool direct, int64_t N, int64_t K, int64_t element_bytes) {
  constexpr int64_t kDirectTileBytes = 128 * 1024;
  constexpr int64_t kSgemmRows = 256;
  int64_t rows =
      direct ? std::max<int64_t>(4, kDirectTileBytes / (K * element_bytes) / 4 * 4) : kSgemmRows;
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

/// `n` weights widened to fp32 in this thread's scratch (kept between calls: a tile is up to
/// 256 rows, so sizes repeat).
template <typename TW>
const float* widened(const TW* src, int64_t n) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < static_cast<size_t>(n)) scratch.resize(static_cast<size_t>(n));
  widen(src, n, scratch.data());
  return scratch.data();
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

/// y[t, n0 : n0 + rows] = x[t] W[n0 : n0 + rows]^T + bias, four weight rows at a time read
/// straight from their stored dtype (f32 or bf16: both widen with vector instructions).
template <typename TW>
void dot_rows(const LinearParams& p, const TW* w, int64_t n0, int64_t rows) {
  const int64_t T = p.x.size(0), K = p.x.size(1);
  const float* bias = p.bias.defined() ? static_cast<const float*>(p.bias.raw()) + n0 : nullptr;
  auto widen1 = [](TW v) -> float {
    if constexpr (std::is_same_v<TW, float>) {
      return v;
    } else {
      return bf16_to_f32(v);
    }
  };
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const TW* w0 = w + r * K;
    const TW* w1 = w0 + K;
    const TW* w2 = w1 + K;
    const TW* w3 = w2 + K;
    for (int64_t t = 0; t < T; ++t) {
      const float* x = static_cast<const float*>(p.x.raw()) + t * p.x.stride(0);
      float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
      for (int64_t k = 0; k < K; ++k) {
        a0 += widen1(w0[k]) * x[k];
        a1 += widen1(w1[k]) * x[k];
        a2 += widen1(w2[k]) * x[k];
        a3 += widen1(w3[k]) * x[k];
      }
      float* y = static_cast<float*>(p.y.raw()) + t * p.y.stride(0) + n0 + r;
      y[0] = a0 + (bias ? bias[r] : 0.0f);
      y[1] = a1 + (bias ? bias[r + 1] : 0.0f);
      y[2] = a2 + (bias ? bias[r + 2] : 0.0f);
      y[3] = a3 + (bias ? bias[r + 3] : 0.0f);
    }
  }
  for (; r < rows; ++r) {
    const TW* w0 = w + r * K;
    for (int64_t t = 0; t < T; ++t) {
      const float* x = static_cast<const float*>(p.x.raw()) + t * p.x.stride(0);
      float a0 = 0.0f;
#pragma omp simd reduction(+ : a0)
      for (int64_t k = 0; k < K; ++k) a0 += widen1(w0[k]) * x[k];
      static_cast<float*>(p.y.raw())[t * p.y.stride(0) + n0 + r] = a0 + (bias ? bias[r] : 0.0f);
    }
  }
}

}  // namespace

void linear(const LinearParams& p) {
  const int64_t T = p.x.size(0), K = p.x.size(1), N = p.weight.size(0);
  if (T == 0) return;
  const DType dtype = p.weight.dtype();
  const bool direct = T <= kDirectMaxTokens && dtype != DType::kF16;
  const int64_t rows = tile_rows(direct, N, K, dtype_size(dtype));
  const int64_t num_tiles = (N + rows - 1) / rows;
  auto run = [&]<typename TW>(TW) {
    const TW* weight = static_cast<const TW*>(p.weight.raw());
    parallel_for(num_tiles, [&](int64_t tile) {
      const int64_t n0 = tile * rows, tile_n = std::min(rows, N - n0);
      const TW* w = weight + n0 * K;
      if constexpr (std::is_same_v<TW, f16>) {
        multiply_rows(p, widened(w, tile_n * K), n0, tile_n);
      } else if (direct) {
        dot_rows(p, w, n0, tile_n);
      } else if constexpr (std::is_same_v<TW, float>) {
        multiply_rows(p, w, n0, tile_n);
      } else {
        multiply_rows(p, widened(w, tile_n * K), n0, tile_n);
      }
    });
  };
  if (dtype == DType::kF32) {
    run(float{});
  } else if (dtype == DType::kBF16) {
    run(bf16{});
  } else {
    run(f16{});
  }
}

}  // namespace hyla::kernels::cpu
