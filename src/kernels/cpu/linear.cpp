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
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>  // _mm256_cvtph_ps (F16C), FMA
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

// Vectors of 16 fp32 lanes (one AVX-512 register; two AVX2 ones elsewhere). Explicit vectors, not
// a vectorised reduction, so the summation order is fixed: the compiler's alignment peeling would
// otherwise make a dot product's rounding depend on where its inputs lie in memory.
typedef float F32x16 __attribute__((vector_size(64)));
typedef uint32_t U32x16 __attribute__((vector_size(64)));
typedef uint16_t U16x16 __attribute__((vector_size(32)));

inline F32x16 load16(const float* p) {
  F32x16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline F32x16 load16(const bf16* p) {
  U16x16 h;
  std::memcpy(&h, p, sizeof(h));
  const U32x16 u = __builtin_convertvector(h, U32x16) << 16;  // bf16 -> f32: the high half
  F32x16 v;
  std::memcpy(&v, &u, sizeof(v));
  return v;
}

/// a * b + c in one rounding (C++ does not contract a * b + c into an FMA by itself).
inline F32x16 fma16(F32x16 a, F32x16 b, F32x16 c) {
#if defined(__AVX512F__)
  return reinterpret_cast<F32x16>(_mm512_fmadd_ps(
      reinterpret_cast<__m512>(a), reinterpret_cast<__m512>(b), reinterpret_cast<__m512>(c)));
#elif defined(__FMA__)
  __m256 ah, bh, ch, out[2];
  for (int h = 0; h < 2; ++h) {
    std::memcpy(&ah, reinterpret_cast<const float*>(&a) + 8 * h, sizeof(ah));
    std::memcpy(&bh, reinterpret_cast<const float*>(&b) + 8 * h, sizeof(bh));
    std::memcpy(&ch, reinterpret_cast<const float*>(&c) + 8 * h, sizeof(ch));
    out[h] = _mm256_fmadd_ps(ah, bh, ch);
  }
  F32x16 r;
  std::memcpy(&r, out, sizeof(r));
  return r;
#else
  return a * b + c;
#endif
}

inline float load1(const float* p) { return *p; }
inline float load1(const bf16* p) { return bf16_to_f32(*p); }

inline float sum16(F32x16 v) {
  float s = 0.0f;
  for (int l = 0; l < 16; ++l) s += v[l];
  return s;
}

/// y[t, n0 : n0 + rows] = x[t] W[n0 : n0 + rows]^T + bias: weight rows read straight from their
/// stored dtype (f32 or bf16), four at a time, each reused from L1 for every token.
template <typename TW>
void dot_rows(const LinearParams& p, const TW* w, int64_t n0, int64_t rows) {
  const int64_t T = p.x.size(0), K = p.x.size(1), K16 = K / 16 * 16;
  const float* bias = p.bias.defined() ? static_cast<const float*>(p.bias.raw()) + n0 : nullptr;
  for (int64_t r = 0; r < rows; r += 4) {
    const int64_t nr = std::min<int64_t>(4, rows - r);
    const TW* wr[4];
    for (int64_t i = 0; i < 4; ++i) wr[i] = w + (r + std::min(i, nr - 1)) * K;
    for (int64_t t = 0; t < T; ++t) {
      const float* x = static_cast<const float*>(p.x.raw()) + t * p.x.stride(0);
      F32x16 acc[4] = {};
      for (int64_t k = 0; k < K16; k += 16) {
        const F32x16 xv = load16(x + k);
        for (int i = 0; i < 4; ++i) acc[i] = fma16(load16(wr[i] + k), xv, acc[i]);
      }
      float* y = static_cast<float*>(p.y.raw()) + t * p.y.stride(0) + n0 + r;
      for (int64_t i = 0; i < nr; ++i) {
        float s = sum16(acc[i]);
        for (int64_t k = K16; k < K; ++k) s += load1(wr[i] + k) * x[k];
        y[i] = s + (bias ? bias[r + i] : 0.0f);
      }
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
