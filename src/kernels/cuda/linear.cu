// CUDA body of the dense projection (kernels/linear.h): y[t, n] = sum_k x[t, k] W[n, k] + bias[n].
// Two paths, both fp32 accumulation:
// - T <= kLinearCudaDirectMaxTokens (decode): linear_rows_kernel, bound by reading the weight.
//   Each warp owns kRows weight rows and reads them in their stored dtype (f32 / bf16 / f16) with
//   16-byte loads when rows are 16-byte aligned (else one element per lane); the block stages x
//   (f32 or bf16, widened exactly) in shared memory as fp32, a chunk of K at a time, and every warp
//   multiplies its rows with all T rows of x; warp sums, then + bias, one rounding to y's dtype.
// - larger T: a cuBLASLt GEMM (CUBLAS_COMPUTE_32F, so no TF32): f32 W x f32 x (a bf16 x widened
//   exactly into scratch), or bf16 W x bf16 x (an f32 x rounded to bf16 into scratch, nearest
//   even). Its output goes straight to y when cuBLASLt can write y's dtype and there is no bias;
//   otherwise to f32 (y itself, or scratch when y is bf16) and finish_kernel adds the bias and
//   rounds once. f16 weights, and shapes for which cuBLASLt offers no algorithm, take the direct
//   kernel kLinearCudaDirectMaxTokens tokens at a time (on the same x the GEMM would have read, so
//   the numbers do not depend on which ran).
// cuBLASLt computes column-major: y^T [N, T] = W [K, N]^T (transposed) x^T [K, T], with leading
// dimensions K, x's row stride and y's row stride.
//
// Owned memory: this body keeps, per (device, stream), a cuBLASLt workspace and scratch for the
// converted x and the f32 GEMM output, allocated stream-ordered on first use and grown (the old
// buffer freed stream-ordered) when a call needs more; per device a cuBLASLt handle and the chosen
// algorithms, cached per (shape, strides, dtypes, alignments). It is the one allocation a kernel
// body owns, as OpenBLAS owns its buffers: the GEMM's operand types are this body's choice, not
// the caller's. Kept until the process exits, also after its stream is destroyed (streams are
// expected to live as long as the engine). A call that grows scratch must not be inside CUDA graph
// capture (warm up at the largest T first).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <compare>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "core/cuda_check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/linear.h"

namespace hyla::kernels::cuda {

namespace {

// ---- direct kernel (decode) ----

constexpr int kDirectThreads = 256;
constexpr int kDirectWarps = kDirectThreads / 32;
/// Shared memory for the staged x: T rows of `chunk` fp32 each, at most this many bytes (the
/// static limit, so no opt-in attribute is needed).
constexpr int64_t kDirectSmemBytes = 48 * 1024;
/// Chunks of K are multiples of this many elements: 32 lanes x 8 (the widest 16-byte vector).
constexpr int64_t kChunkQuantum = 256;

struct DirectParams {
  const void* x;      // [T, K], row stride x_stride; f32 or bf16 (x_bf16)
  const void* w;      // [N, K] contiguous, TW
  const float* bias;  // [N] or null
  void* y;            // [T, N], row stride y_stride; f32 or bf16 (y_bf16)
  int64_t x_stride, y_stride;
  int T, N, K;
  int chunk;  // K elements staged per pass; a multiple of 8 (16-byte aligned smem rows)
  bool x_bf16, y_bf16;
};

/// Weight rows per warp: more rows reuse each staged x value more often (shared-memory reads per
/// weight byte grow with T); fewer rows give more warps for small N.
template <int kT>
constexpr int rows_per_warp() {
  return kT <= 4 ? 2 : 4;
}

// f16 beside common.cuh's f32 / bf16 overloads (the using-declaration keeps those visible: an
// overload here alone would hide them, and a float would then convert to __half implicitly)
using cuda::to_float;
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

/// Elements of TW in one 16-byte load.
template <typename TW>
constexpr int vec_elems() {
  return 16 / int(sizeof(TW));
}

/// 16 bytes of weights at p (16-byte aligned) as fp32.
__device__ __forceinline__ void load_vec(const float* p, float* out) {
  const float4 v = __ldg(reinterpret_cast<const float4*>(p));
  out[0] = v.x;
  out[1] = v.y;
  out[2] = v.z;
  out[3] = v.w;
}
__device__ __forceinline__ void load_vec(const __nv_bfloat16* p, float* out) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // bf16 -> f32: the high half of the f32 bits; low half first
    out[2 * i] = __uint_as_float(words[i] << 16);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void load_vec(const __half* p, float* out) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2 h;
    static_assert(sizeof(h) == sizeof(words[i]));
    memcpy(&h, &words[i], sizeof(h));
    const float2 f = __half22float2(h);  // .x is the lower address
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

/// y[t, n] = sum_k x[t, k] w[n, k] + bias[n] for t < T <= kT, n in this warp's kRows rows.
/// Grid: ceil(N / (kDirectWarps kRows)) blocks of kDirectThreads; dynamic smem T * chunk floats.
/// kVec: w and K * sizeof(TW) are 16-byte aligned (every row starts aligned).
template <typename TW, int kT, bool kVec>
__global__ void __launch_bounds__(kDirectThreads)
    linear_rows_kernel(const __grid_constant__ DirectParams p) {
  constexpr int kRows = rows_per_warp<kT>();
  extern __shared__ float4 smem_vec[];  // float4: 16-byte aligned rows for the vector reads
  float* xs = reinterpret_cast<float*>(smem_vec);  // x chunk [T, chunk] as fp32
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t n_first = (int64_t(blockIdx.x) * kDirectWarps + warp) * kRows;
  // rows past N repeat the last row (computed, never stored): no warp leaves the barriers below
  const TW* w_rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    w_rows[r] = static_cast<const TW*>(p.w) + std::min<int64_t>(n_first + r, p.N - 1) * p.K;

  float acc[kRows][kT];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < kT; ++t) acc[r][t] = 0.0f;

  for (int k0 = 0; k0 < p.K; k0 += p.chunk) {
    const int kc = min(p.chunk, p.K - k0);
    __syncthreads();  // every warp is done with the previous chunk
    for (int i = threadIdx.x; i < p.T * kc; i += kDirectThreads) {
      const int t = i / kc, k = i % kc;
      const int64_t at = int64_t(t) * p.x_stride + k0 + k;
      xs[t * p.chunk + k] = p.x_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p.x)[at])
                                     : static_cast<const float*>(p.x)[at];
    }
    __syncthreads();
    if constexpr (kVec) {
      // lane l: elements [k, k + V) for k = V l, V (l + 32), ... (kc is a multiple of V: K is)
      constexpr int V = vec_elems<TW>();
      constexpr int kUnroll = kT <= 4 ? 2 : 1;  // more loads in flight where registers allow
#pragma unroll kUnroll
      for (int k = lane * V; k < kc; k += 32 * V) {
        float w[kRows][V];
#pragma unroll
        for (int r = 0; r < kRows; ++r) load_vec(w_rows[r] + k0 + k, w[r]);
#pragma unroll
        for (int t = 0; t < kT; ++t) {
          if (t >= p.T) break;
          float xv[V];
#pragma unroll
          for (int j = 0; j < V; j += 4) {
            const float4 v = *reinterpret_cast<const float4*>(xs + t * p.chunk + k + j);
            xv[j] = v.x;
            xv[j + 1] = v.y;
            xv[j + 2] = v.z;
            xv[j + 3] = v.w;
          }
#pragma unroll
          for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int j = 0; j < V; ++j) acc[r][t] = fmaf(w[r][j], xv[j], acc[r][t]);
        }
      }
    } else {
      for (int k = lane; k < kc; k += 32) {
        float w[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) w[r] = to_float(w_rows[r][k0 + k]);
#pragma unroll
        for (int t = 0; t < kT; ++t) {
          if (t >= p.T) break;
          const float xv = xs[t * p.chunk + k];
#pragma unroll
          for (int r = 0; r < kRows; ++r) acc[r][t] = fmaf(w[r], xv, acc[r][t]);
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t n = n_first + r;
#pragma unroll
    for (int t = 0; t < kT; ++t) {
      const float sum = warp_sum(acc[r][t]);  // every lane takes part (n, t checked after)
      if (lane != 0 || n >= p.N || t >= p.T) continue;
      const float value = sum + (p.bias ? p.bias[n] : 0.0f);
      const int64_t at = int64_t(t) * p.y_stride + n;
      if (p.y_bf16) {
        static_cast<__nv_bfloat16*>(p.y)[at] = from_float<__nv_bfloat16>(value);
      } else {
        static_cast<float*>(p.y)[at] = value;
      }
    }
  }
}

template <typename TW, int kT>
void launch_rows_kernel(const DirectParams& p, bool vec, cudaStream_t stream) {
  const int64_t rows_per_block = int64_t(kDirectWarps) * rows_per_warp<kT>();
  const dim3 grid(unsigned(ceil_div(p.N, rows_per_block)));
  const size_t smem = size_t(p.T) * size_t(p.chunk) * sizeof(float);
  if (vec) {
    linear_rows_kernel<TW, kT, true><<<grid, kDirectThreads, smem, stream>>>(p);
  } else {
    linear_rows_kernel<TW, kT, false><<<grid, kDirectThreads, smem, stream>>>(p);
  }
  HYLA_CUDA_CHECK_LAUNCH();
}

/// The direct kernel over T rows of x, kLinearCudaDirectMaxTokens rows per launch.
/// x: [T, K] f32|bf16 (row stride x_stride); y: [T, N] f32|bf16 (row stride y_stride).
void run_direct(const void* x, DType x_dtype, int64_t x_stride, const TensorView& weight,
                const float* bias, void* y, DType y_dtype, int64_t y_stride, int64_t T,
                cudaStream_t stream) {
  const int64_t N = weight.size(0), K = weight.size(1);
  const int64_t w_bytes = dtype_size(weight.dtype());
  const bool vec = reinterpret_cast<uintptr_t>(weight.raw()) % 16 == 0 && (K * w_bytes) % 16 == 0;
  const int64_t x_bytes = dtype_size(x_dtype), y_bytes = dtype_size(y_dtype);
  for (int64_t t0 = 0; t0 < T; t0 += kLinearCudaDirectMaxTokens) {
    const int64_t rows = std::min(kLinearCudaDirectMaxTokens, T - t0);
    // K per pass: as much as fits for these rows, a multiple of kChunkQuantum, but no more than K
    // rounded up to 8 (smem rows stay 16-byte aligned)
    const int64_t fits =
        kDirectSmemBytes / int64_t(sizeof(float)) / rows / kChunkQuantum * kChunkQuantum;
    const int64_t chunk = std::min(std::max(fits, kChunkQuantum), ceil_div(K, 8) * 8);
    DirectParams p{};
    p.x = static_cast<const char*>(x) + t0 * x_stride * x_bytes;
    p.w = weight.raw();
    p.bias = bias;
    p.y = static_cast<char*>(y) + t0 * y_stride * y_bytes;
    p.x_stride = x_stride;
    p.y_stride = y_stride;
    p.T = int(rows);
    p.N = int(N);
    p.K = int(K);
    p.chunk = int(chunk);
    p.x_bf16 = x_dtype == DType::kBF16;
    p.y_bf16 = y_dtype == DType::kBF16;
    auto launch = [&]<typename TW>(TW) {
      static_assert(kLinearCudaDirectMaxTokens == 4, "the kT instantiations below cover 1..4");
      if (rows == 1) {
        launch_rows_kernel<TW, 1>(p, vec, stream);
      } else {
        launch_rows_kernel<TW, 4>(p, vec, stream);
      }
    };
    switch (weight.dtype()) {
      case DType::kF32: launch(float{}); break;
      case DType::kBF16: launch(__nv_bfloat16{}); break;
      default: launch(__half{}); break;  // f16: the entry admits nothing else
    }
  }
}

// ---- elementwise kernels around the GEMM ----

/// dst[t, k] = TD(src[t, k]): x into the GEMM's operand type (contiguous [T, K]); bf16 rounds to
/// nearest even, f32 widens exactly. Grid-stride over T K.
template <typename TS, typename TD>
__global__ void convert_kernel(const TS* src, int64_t src_stride, TD* dst, int64_t T, int64_t K) {
  const int64_t total = T * K;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / K, k = i % K;
    dst[i] = from_float<TD>(to_float(src[t * src_stride + k]));
  }
}

/// y[t, n] = TY(sum[t, n] + bias[n]) (bias may be null): the GEMM's fp32 output, bias added and
/// rounded once. sum may be y itself (f32 y): each element is read before it is written, by the
/// same thread. Grid-stride over T N.
template <typename TY>
__global__ void finish_kernel(const float* sum, int64_t sum_stride, const float* bias, TY* y,
                              int64_t y_stride, int64_t T, int64_t N) {
  const int64_t total = T * N;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / N, n = i % N;
    const float value = sum[t * sum_stride + n] + (bias ? bias[n] : 0.0f);
    y[t * y_stride + n] = from_float<TY>(value);
  }
}

/// Blocks for a grid-stride loop over `total` elements: at most 16 per SM of an H200 (132 SMs),
/// enough to keep the memory system busy; more only adds block launches.
unsigned grid_stride_blocks(int64_t total, int threads) {
  constexpr int64_t kMaxBlocks = 132 * 16;
  return unsigned(std::clamp<int64_t>(ceil_div(total, threads), 1, kMaxBlocks));
}

// ---- owned resources: cuBLASLt handle, workspace, scratch, algorithm cache ----

constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt's recommendation for Hopper
/// Algorithm cache entries per device before it is emptied (T varies from call to call).
constexpr size_t kMaxPlans = 4096;

/// A device buffer, allocated stream-ordered and grown by replacement.
struct Scratch {
  void* ptr = nullptr;
  size_t bytes = 0;
};

struct StreamResources {
  Scratch workspace;  // cuBLASLt's
  Scratch x;          // the converted x
  Scratch y;          // the fp32 GEMM output when it cannot go to y
};

/// Everything that decides which algorithm cuBLASLt may pick.
struct PlanKey {
  int64_t N, T, K, x_stride, y_stride;
  cudaDataType_t w_type, x_type, d_type;
  uint32_t w_align, x_align, d_align;
  auto operator<=>(const PlanKey&) const = default;
};

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, x = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // false: cuBLASLt offered nothing; the direct kernel runs instead
};

void destroy(Plan& plan) {
  if (plan.op) cublasLtMatmulDescDestroy(plan.op);
  for (cublasLtMatrixLayout_t l : {plan.w, plan.x, plan.d})
    if (l) cublasLtMatrixLayoutDestroy(l);
  plan = {};
}

struct DeviceResources {
  cublasLtHandle_t handle = nullptr;
  std::map<PlanKey, Plan> plans;
  std::map<cudaStream_t, StreamResources> streams;
};

/// All devices' resources behind one mutex; never destroyed (handles outlive static destruction
/// order, which may come after the CUDA runtime has shut down).
struct Registry {
  std::mutex mutex;
  std::map<int, DeviceResources> devices;
};
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

/// Makes `s` hold at least `bytes`, freeing the old buffer in stream order (work queued before on
/// this stream still reads it; nothing after does).
Status reserve(Scratch& s, size_t bytes, cudaStream_t stream, const char* what) {
  if (s.bytes >= bytes) return ok_status();
  const size_t grown = std::max(bytes, s.bytes * 2);
  if (s.ptr) HYLA_CUDA_CHECK(cudaFreeAsync(s.ptr, stream));
  s = {};
  void* p = nullptr;
  const cudaError_t err = cudaMallocAsync(&p, grown, stream);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // reset the last error, so later launch checks do not see it
    return internal_error("linear: cannot allocate ", grown, " bytes of ", what,
                          " scratch on the GPU: ", cudaGetErrorString(err));
  }
  s = {p, grown};
  return ok_status();
}

uint32_t alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

#define HYLA_CUBLAS_RETURN(call, what)                                         \
  do {                                                                         \
    const cublasStatus_t hyla_cublas_s_ = (call);                              \
    if (hyla_cublas_s_ != CUBLAS_STATUS_SUCCESS)                               \
      return internal_error("linear: cuBLASLt ", what,                         \
                            " failed: ", cublasGetStatusName(hyla_cublas_s_)); \
  } while (0)

/// The plan for `key`: descriptors and cuBLASLt's first heuristic choice (or none).
Status find_plan(DeviceResources& dev, const PlanKey& key, const Plan** out) {
  if (auto it = dev.plans.find(key); it != dev.plans.end()) {
    *out = &it->second;
    return ok_status();
  }
  if (dev.plans.size() >= kMaxPlans) {
    for (auto& [k, plan] : dev.plans) destroy(plan);
    dev.plans.clear();
  }
  Plan plan;
  auto fail = [&](Status s) {
    destroy(plan);
    return s;
  };
  cublasStatus_t s = cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (s != CUBLAS_STATUS_SUCCESS)
    return fail(
        internal_error("linear: cublasLtMatmulDescCreate failed: ", cublasGetStatusName(s)));
  const cublasOperation_t trans = CUBLAS_OP_T, no_trans = CUBLAS_OP_N;
  s = cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans));
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans,
                                       sizeof(no_trans));
  // column-major: W^T as [K, N] (ld K), x^T as [K, T] (ld x_stride), y^T as [N, T] (ld y_stride)
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatrixLayoutCreate(&plan.w, key.w_type, uint64_t(key.K), uint64_t(key.N), key.K);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatrixLayoutCreate(&plan.x, key.x_type, uint64_t(key.K), uint64_t(key.T),
                                   key.x_stride);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatrixLayoutCreate(&plan.d, key.d_type, uint64_t(key.N), uint64_t(key.T),
                                   key.y_stride);
  if (s != CUBLAS_STATUS_SUCCESS)
    return fail(
        internal_error("linear: cuBLASLt descriptor setup failed: ", cublasGetStatusName(s)));

  cublasLtMatmulPreference_t pref = nullptr;
  s = cublasLtMatmulPreferenceCreate(&pref);
  if (s != CUBLAS_STATUS_SUCCESS)
    return fail(
        internal_error("linear: cublasLtMatmulPreferenceCreate failed: ", cublasGetStatusName(s)));
  const uint64_t workspace = kWorkspaceBytes;
  s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace, sizeof(workspace));
  // the buffers' real alignments, so that no algorithm assuming more is offered (default: 256)
  for (const auto& [attr, value] :
       {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.w_align},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.x_align},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.d_align},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.d_align}}) {
    if (s == CUBLAS_STATUS_SUCCESS)
      s = cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulAlgoGetHeuristic(dev.handle, plan.op, plan.w, plan.x, plan.d, plan.d, pref, 1,
                                       &result, &count);
  cublasLtMatmulPreferenceDestroy(pref);
  // no algorithm for this shape / alignment (CUBLAS_STATUS_NOT_SUPPORTED or count 0): remembered,
  // the direct kernel serves it
  if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED)
    return fail(
        internal_error("linear: cuBLASLt heuristic query failed: ", cublasGetStatusName(s)));
  plan.found = s == CUBLAS_STATUS_SUCCESS && count > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan.found) plan.algo = result.algo;
  *out = &dev.plans.emplace(key, plan).first->second;
  return ok_status();
}

Status device_resources(cudaStream_t stream, DeviceResources** dev_out,
                        StreamResources** stream_out) {
  int device = 0;
  HYLA_CUDA_CHECK(cudaGetDevice(&device));
  DeviceResources& dev = registry().devices[device];
  if (!dev.handle) HYLA_CUBLAS_RETURN(cublasLtCreate(&dev.handle), "handle creation");
  *dev_out = &dev;
  *stream_out = &dev.streams[stream];
  return ok_status();
}

cudaDataType_t cuda_type(DType d) { return d == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F; }

}  // namespace

Status linear(const LinearParams& p, Stream s) {
  const int64_t T = p.x.size(0), K = p.x.size(1), N = p.weight.size(0);
  if (T == 0) return ok_status();
  const cudaStream_t stream = to_cuda(s);
  const float* bias = p.bias.defined() ? ptr<const float>(p.bias) : nullptr;
  const DType w_dtype = p.weight.dtype(), y_dtype = p.y.dtype();

  // decode, and f16 weights at any T: the direct kernel on x as given
  if (T <= kLinearCudaDirectMaxTokens || w_dtype == DType::kF16) {
    run_direct(p.x.raw(), p.x.dtype(), p.x.stride(0), p.weight, bias, p.y.raw(), y_dtype,
               p.y.stride(0), T, stream);
    return ok_status();
  }

  std::lock_guard<std::mutex> lock(registry().mutex);
  DeviceResources* dev = nullptr;
  StreamResources* res = nullptr;
  HYLA_RETURN_IF_ERROR(device_resources(stream, &dev, &res));

  // x in the weight's dtype (f32 or bf16): as given, or converted into scratch
  const void* x = p.x.raw();
  int64_t x_stride = p.x.stride(0);
  if (p.x.dtype() != w_dtype) {
    HYLA_RETURN_IF_ERROR(
        reserve(res->x, size_t(T * K) * size_t(dtype_size(w_dtype)), stream, "converted x"));
    const unsigned blocks = grid_stride_blocks(T * K, 256);
    if (w_dtype == DType::kBF16) {
      convert_kernel<<<blocks, 256, 0, stream>>>(ptr<const float>(p.x), x_stride,
                                                 static_cast<__nv_bfloat16*>(res->x.ptr), T, K);
    } else {
      convert_kernel<<<blocks, 256, 0, stream>>>(ptr<const __nv_bfloat16>(p.x), x_stride,
                                                 static_cast<float*>(res->x.ptr), T, K);
    }
    HYLA_CUDA_CHECK_LAUNCH();
    x = res->x.ptr;
    x_stride = K;
  }

  // the GEMM's output: y itself when cuBLASLt can write its dtype and no bias is left to add;
  // else fp32 (y itself when f32, scratch when bf16), finished by finish_kernel
  const bool straight = !bias && (y_dtype == DType::kF32 || w_dtype == DType::kBF16);
  void* d = p.y.raw();
  int64_t d_stride = p.y.stride(0);
  DType d_dtype = y_dtype;
  if (!straight && y_dtype == DType::kBF16) {
    HYLA_RETURN_IF_ERROR(reserve(res->y, size_t(T * N) * sizeof(float), stream, "GEMM output"));
    d = res->y.ptr;
    d_stride = N;
    d_dtype = DType::kF32;
  }

  const PlanKey key{N,
                    T,
                    K,
                    x_stride,
                    d_stride,
                    cuda_type(w_dtype),
                    cuda_type(w_dtype),
                    cuda_type(d_dtype),
                    alignment(p.weight.raw()),
                    alignment(x),
                    alignment(d)};
  const Plan* plan = nullptr;
  HYLA_RETURN_IF_ERROR(find_plan(*dev, key, &plan));
  if (!plan->found) {
    // same operands as the GEMM (x converted as above), so the numbers do not depend on the path
    run_direct(x, w_dtype, x_stride, p.weight, bias, p.y.raw(), y_dtype, p.y.stride(0), T, stream);
    return ok_status();
  }
  HYLA_RETURN_IF_ERROR(reserve(res->workspace, kWorkspaceBytes, stream, "cuBLASLt workspace"));
  const float alpha = 1.0f, beta = 0.0f;
  HYLA_CUBLAS_RETURN(
      cublasLtMatmul(dev->handle, plan->op, &alpha, p.weight.raw(), plan->w, x, plan->x, &beta, d,
                     plan->d, d, plan->d, &plan->algo, res->workspace.ptr, kWorkspaceBytes, stream),
      "matmul");
  if (!straight) {
    const unsigned blocks = grid_stride_blocks(T * N, 256);
    if (y_dtype == DType::kBF16) {
      finish_kernel<<<blocks, 256, 0, stream>>>(static_cast<const float*>(d), d_stride, bias,
                                                ptr<__nv_bfloat16>(p.y), p.y.stride(0), T, N);
    } else {
      finish_kernel<<<blocks, 256, 0, stream>>>(static_cast<const float*>(d), d_stride, bias,
                                                ptr<float>(p.y), p.y.stride(0), T, N);
    }
    HYLA_CUDA_CHECK_LAUNCH();
  }
  return ok_status();
}

}  // namespace hyla::kernels::cuda
